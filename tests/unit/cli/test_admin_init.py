"""`skald admin init`: the deploy-time setup step, run by hand (the setup function runs the
same code). Local: the stores and their schemas. AWS: the bucket, table and queues must exist
(everything missing is named at once), the search index is created behind its alias."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from skald import catalog
from skald.cli import main

moto = pytest.importorskip("moto")
osmem_server = pytest.importorskip("osmem_server")


def init(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any]:
    code = main(["admin", *args, "init"])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else err)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in {n for fn in catalog.FUNCTIONS for n in catalog.environment(fn)}:
        monkeypatch.delenv(name, raising=False)


def test_local_init_creates_the_stores_and_is_idempotent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    code, report = init(capsys, "--data-dir", str(data))
    assert code == 0 and report["backend"] == "local"
    assert report["steps"][-1] == "index.db: ok"
    assert {p.name for p in data.iterdir()} >= {"state.db", "queue.db", "index.db"}
    assert init(capsys, "--data-dir", str(data)) == (0, report)


def test_local_init_refuses_an_index_of_another_vector_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    assert init(capsys, "--data-dir", str(data))[0] == 0  # 384-d, the packaged model
    monkeypatch.setenv("SKALD_EMBEDDING_PROVIDER", "openai")
    monkeypatch.setenv("SKALD_EMBEDDING_DIMENSION", "8")
    code, err = init(capsys, "--data-dir", str(data))
    assert code == 2 and "holds 384-d vectors, not 8-d" in err


def test_aws_local_is_set_up_by_serve(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SKALD_BACKEND", "aws-local")
    code, err = init(capsys)
    assert code == 2 and "skald serve --backend aws-local" in err


def test_aws_init_names_the_variables_it_lacks(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = init(capsys, "--backend", "aws")
    assert code == 2 and "SKALD_BUCKET" in err


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """Moto in-process for S3, DynamoDB and SQS, osmem-server for OpenSearch, and the
    environment a deployed setup function gets."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    server = osmem_server.OsmemServer.start(japanese=False)
    with moto.mock_aws():
        from skald.adapters.aws.local_stack import create_state_table

        boto3.client("s3").create_bucket(Bucket="blobs")
        create_state_table(boto3.client("dynamodb"), "state")
        sqs = boto3.client("sqs")
        env = {
            "SKALD_BACKEND": "aws",
            "SKALD_BUCKET": "blobs",
            "SKALD_STATE_TABLE": "state",
            "SKALD_OPENSEARCH_ENDPOINT": server.url,
            "SKALD_EMBEDDING_PROVIDER": "bedrock",
            "SKALD_EMBEDDING_DIMENSION": "16",
        }
        for q in catalog.QUEUES:
            env[q.url_env] = sqs.create_queue(QueueName=f"skald-{q.name}")["QueueUrl"]
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        yield env
    server.close()


def test_aws_init_checks_the_resources_and_creates_the_index(
    aws: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, report = init(capsys)
    assert code == 0, report
    assert report["steps"][:7] == [
        "bucket blobs (SKALD_BUCKET): ok",
        "table state (SKALD_STATE_TABLE): ok",
        "queue semantic (SKALD_SEMANTIC_QUEUE_URL): ok",
        "queue memory (SKALD_MEMORY_QUEUE_URL): ok",
        "queue autocommit (SKALD_AUTOCOMMIT_QUEUE_URL): ok",
        "queue fetch (SKALD_FETCH_QUEUE_URL): ok",
        "queue purge (SKALD_PURGE_QUEUE_URL): ok",
    ]
    assert report["steps"][7].startswith("search index skald-records -> skald-records-v")
    assert report["steps"][7].endswith(": created")
    code, again = init(capsys)
    assert code == 0 and again["steps"][7].endswith(": unchanged")


def test_aws_init_names_everything_missing_and_creates_nothing(
    aws: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    boto3.client("dynamodb").delete_table(TableName="state")
    boto3.client("sqs").delete_queue(QueueUrl=aws["SKALD_MEMORY_QUEUE_URL"])
    code, err = init(capsys)
    assert code == 2
    assert "missing: table state (SKALD_STATE_TABLE); queue memory (SKALD_MEMORY_QUEUE_URL)" in err
    server_url = aws["SKALD_OPENSEARCH_ENDPOINT"]
    from opensearchpy import OpenSearch

    search = OpenSearch(hosts=[server_url])
    assert search.cat.indices(format="json") == []
    search.close()
