"""The OpenAPI document is truthful: it declares every error status with the envelope, real
success models and the viking:// URI format, and a bounded schemathesis run against a live
`skald serve` finds no 5xx, no undeclared status and no response that breaks its schema.

Bounded: a fixed number of examples per operation (SKALD_FUZZ_EXAMPLES, 10), a fixed seed
(SKALD_FUZZ_SEED) and a time budget for the whole run. `make fuzz` runs this tier alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.server import SkaldServer

ERROR_STATUSES = {"413", "431", "500"}
FUZZ_BUDGET_S = 240


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SkaldServer]:
    server = SkaldServer(tmp_path_factory.mktemp("fuzz") / "data")
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def document(fuzz_server: SkaldServer) -> dict[str, Any]:
    resp = httpx.get(fuzz_server.url + "/openapi.json", timeout=60)
    assert resp.status_code == 200
    doc: dict[str, Any] = resp.json()
    return doc


def _operations(doc: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in doc["paths"].items():
        for method, op in item.items():
            yield path, method, op


def _resolve(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def test_every_route_declares_its_errors_with_the_envelope(document: dict[str, Any]) -> None:
    envelope = document["components"]["schemas"]["ErrorEnvelope"]
    assert envelope["properties"]["status"]["const"] == "error"
    assert {"code", "message"} <= set(
        _resolve(document, envelope["properties"]["error"])["required"]
    )
    for path, method, op in _operations(document):
        statuses = set(op["responses"])
        assert "422" not in statuses, (method, path)  # validation errors answer 400
        assert statuses >= ERROR_STATUSES, (method, path, statuses)
        for status in statuses - {_success(op)}:
            if path == "/ready":
                continue
            schema = op["responses"][status]["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/ErrorEnvelope"}, (path, status)
        if path.startswith("/api/v1/"):
            assert {"400", "401", "403"} <= statuses, (method, path)


def _success(op: dict[str, Any]) -> str:
    """A route's success status: 200, or 202 for one whose work goes on (a purge)."""
    return "202" if "202" in op["responses"] else "200"


def test_every_success_body_has_a_real_model(document: dict[str, Any]) -> None:
    for path, method, op in _operations(document):
        content = op["responses"][_success(op)]["content"]
        if path == "/api/v1/content/download":
            assert "application/octet-stream" in content
            continue
        if path in ("/api/v1/pack/export", "/api/v1/pack/backup"):
            assert "application/zip" in content
            continue
        if path.endswith("/usage.csv"):  # the billing export
            assert "text/csv" in content
            continue
        schema = _resolve(document, content["application/json"]["schema"])
        assert schema.get("properties"), (method, path, schema)
        if path.startswith("/api/v1/"):
            assert schema["properties"]["status"]["const"] == "ok", (method, path)
            assert schema["properties"]["result"], (method, path)


def test_queued_work_declares_429_with_retry_after(document: dict[str, Any]) -> None:
    write = document["paths"]["/api/v1/content/write"]["post"]["responses"]["429"]
    assert "Retry-After" in write["headers"]
    assert "429" not in document["paths"]["/api/v1/content/read"]["get"]["responses"]


def test_uris_carry_the_viking_format(document: dict[str, Any]) -> None:
    ls_uri = next(
        p for p in document["paths"]["/api/v1/fs/ls"]["get"]["parameters"] if p["name"] == "uri"
    )
    assert ls_uri["schema"]["format"] == "viking-uri"
    assert ls_uri["schema"]["pattern"].startswith("^viking://")
    schemas = document["components"]["schemas"]
    assert schemas["WriteBody"]["properties"]["uri"]["format"] == "viking-uri"
    assert schemas["Hit"]["properties"]["uri"]["format"] == "viking-uri"
    assert schemas["Entry"]["properties"]["uri"]["pattern"].startswith("^viking://")


def test_schemathesis_finds_no_server_error_and_no_schema_violation(
    fuzz_server: SkaldServer, tmp_path: Path
) -> None:
    st = Path(sys.executable).with_name("st")
    cmd = [
        str(st),
        "run",
        fuzz_server.url + "/openapi.json",
        "-H",
        "X-OpenViking-Account: fuzz",
        "-H",
        "X-OpenViking-User: alice",
        "--checks",
        "not_a_server_error,status_code_conformance,response_schema_conformance",
        "--phases",
        "examples,coverage,fuzzing",
        "--max-examples",
        os.environ.get("SKALD_FUZZ_EXAMPLES", "10"),
        "--seed",
        os.environ.get("SKALD_FUZZ_SEED", "14"),
        "--workers",
        "1",
        "--request-timeout",
        "60",
        "--no-color",
    ]
    env = {
        **os.environ,
        "SCHEMATHESIS_HOOKS": "",
        "HYPOTHESIS_STORAGE_DIRECTORY": str(tmp_path / "hypothesis"),
    }
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=FUZZ_BUDGET_S,
            env=env,
            cwd=tmp_path,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"the fuzz run took more than {FUZZ_BUDGET_S} s") from exc
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert "Tested:" in out, out[-2000:]
    server_log = fuzz_server.log_path.read_text(errors="replace")
    assert "Traceback" not in server_log, server_log[-4000:]
