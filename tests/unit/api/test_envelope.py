"""The success envelope is rendered by the route itself (pydantic's serialiser), byte for
byte what FastAPI rendered from a returned dict."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from skald.api.envelope import Envelope, ResultTypeError, ok
from skald.domain.wire import OMIT_NONE


def test_ok_renders_the_envelope_as_json() -> None:
    response = ok({"uri": "viking://resources/é", "n": 2}, full=True)
    assert isinstance(response, Envelope)
    assert response.media_type == "application/json"
    assert json.loads(bytes(response.body)) == {
        "status": "ok",
        "result": {"uri": "viking://resources/é", "n": 2},
        "error": None,
        "telemetry": None,
        "profile": None,
    }
    assert "é".encode() in response.body  # UTF-8, not \\u escapes


def test_non_finite_floats_become_null_and_rich_types_serialise() -> None:
    @dataclass
    class Point:
        x: int

    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    body = json.loads(
        bytes(
            ok(
                {"nan": math.nan, "inf": math.inf, "when": when, "point": Point(1), "pair": (1, 2)}
            ).body
        )
    )
    assert body["result"] == {
        "nan": None,
        "inf": None,
        "when": "2026-01-02T03:04:05Z",
        "point": {"x": 1},
        "pair": [1, 2],
    }


def test_the_bytes_match_what_fastapi_renders_from_a_dict() -> None:
    app = FastAPI()
    payload: dict[str, object] = {
        "status": "ok",
        "result": {"hits": [{"uri": "viking://a", "score": 0.5, "tags": ["k=v"], "abstract": "ü"}]},
    }

    @app.get("/dict")
    def as_dict() -> dict[str, object]:
        return payload

    @app.get("/envelope")
    def as_envelope() -> Envelope:
        return ok(payload["result"])

    client = TestClient(app)
    assert client.get("/envelope").content == client.get("/dict").content


@dataclass(frozen=True)
class Item:
    uri: str
    n: int
    score: float
    reason: Annotated[str | None, OMIT_NONE] = None
    task_id: str | None = None


def test_a_typed_result_is_checked_against_its_declared_types() -> None:
    body = json.loads(bytes(ok(Item("viking://a", 2, 0.5), full=True, has_more=False).body))
    assert body == {
        "status": "ok",
        "result": {"uri": "viking://a", "n": 2, "score": 0.5, "task_id": None},
        "error": None,
        "telemetry": None,
        "profile": None,
        "has_more": False,
    }
    assert list(body) == ["status", "result", "error", "telemetry", "profile", "has_more"]
    assert json.loads(bytes(ok(Item("u", 1, 1.5, "why")).body))["result"]["reason"] == "why"
    assert json.loads(bytes(ok([Item("u", 1, 1.5)], kind=list[Item]).body))["result"][0]["n"] == 1
    with pytest.raises(ResultTypeError, match="n"):
        ok(Item("viking://a", "two", 0.5))  # type: ignore[arg-type]
    with pytest.raises(ResultTypeError):
        ok([{"uri": "viking://a"}], kind=list[Item])
