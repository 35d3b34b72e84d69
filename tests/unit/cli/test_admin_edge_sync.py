"""`skald admin edge-sync`: every account's API Gateway key into its tier's usage plan, run
against the stores (AWS after the deploy that brings usage plans; nothing to do locally)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from skald.cli import main
from skald.domain.plans import edge_plan_name

moto = pytest.importorskip("moto")


def test_locally_there_is_no_edge(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["admin", "--data-dir", str(tmp_path / "d"), "edge-sync"]) == 0
    assert json.loads(capsys.readouterr().out) == {"accounts": 0, "by_tier": {}}


def test_it_needs_the_stores_not_a_server(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["admin", "--url", "http://127.0.0.1:9", "edge-sync"]) == 2
    assert "no --url" in capsys.readouterr().err


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    with moto.mock_aws():
        yield


def test_on_aws_it_places_every_account(
    aws: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from skald.adapters.aws.dynamo.statestore import DynamoStateStore
    from skald.adapters.aws.local_stack import create_state_table
    from skald.ports import Account

    dynamo = boto3.client("dynamodb")
    apigateway = boto3.client("apigateway")
    for tier in ("unlimited", "team"):
        apigateway.create_usage_plan(name=edge_plan_name("SkaldT", tier))
    create_state_table(dynamo, "skald-state")
    store = DynamoStateStore(dynamo, "skald-state")
    store.create_account(Account("a", 1.0, settings={"plan": "team"}))
    store.create_account(Account("b", 1.0))
    monkeypatch.setenv("SKALD_BACKEND", "aws")
    monkeypatch.setenv("SKALD_STATE_TABLE", "skald-state")
    monkeypatch.setenv("SKALD_EDGE_NAMESPACE", "SkaldT")
    assert main(["admin", "edge-sync"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "accounts": 2,
        "by_tier": {"team": 1, "unlimited": 1},
    }
    keys = apigateway.get_api_keys(nameQuery="SkaldT/")["items"]
    assert sorted(k["name"] for k in keys) == ["SkaldT/a", "SkaldT/b"]
