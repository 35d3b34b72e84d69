"""`skald admin init` on the AWS backend (and the deploy-time setup function): checks that the
bucket, the state table and the queues exist, then sets the search index up behind its alias
(skald.adapters.aws.opensearch.setup). Everything missing is named in one error."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from botocore.exceptions import ClientError

from skald import catalog
from skald.adapters.aws.opensearch.setup import ensure_search_index
from skald.adapters.factory import SetupError, SetupReport, embedding_dimension, require
from skald.config import Settings

_MISSING_CODES = {
    "NoSuchBucket",
    "404",
    "NotFound",
    "ResourceNotFoundException",
    "AWS.SimpleQueueService.NonExistentQueue",
    "QueueDoesNotExist",
}


def run_setup(
    settings: Settings,
    client: Callable[[str], Any],
    search: Callable[[], Any],
    *,
    ready_timeout_s: float = 0.0,
) -> SetupReport:
    """`client(service)` makes a boto3 client, `search()` the OpenSearch client."""
    for port in (catalog.BLOBS, catalog.STATE, catalog.QUEUE, catalog.INDEX):
        require(settings, port)
    report = SetupReport("aws")
    missing: list[str] = []

    def check(what: str, call: Callable[[], Any]) -> None:
        try:
            call()
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code not in _MISSING_CODES:
                raise
            missing.append(what)
            return
        report.steps.append(f"{what}: ok")

    s3, dynamo, sqs = client("s3"), client("dynamodb"), client("sqs")
    check(
        f"bucket {settings.bucket} (SKALD_BUCKET)", lambda: s3.head_bucket(Bucket=settings.bucket)
    )
    check(
        f"table {settings.state_table} (SKALD_STATE_TABLE)",
        lambda: dynamo.describe_table(TableName=settings.state_table),
    )
    for q in catalog.QUEUES:
        url = settings.queue_urls.get(q.name)
        check(
            f"queue {q.name} ({q.url_env})",
            partial(sqs.get_queue_attributes, QueueUrl=url, AttributeNames=["QueueArn"]),
        )
    if missing:
        raise SetupError(f"missing: {'; '.join(missing)}")
    assert settings.opensearch_index
    os_client = search()
    try:
        report.steps += ensure_search_index(
            os_client,
            settings.opensearch_index,
            dimension=embedding_dimension(settings),
            serverless=settings.opensearch_auth == "sigv4-aoss",
            pipeline=settings.opensearch_hybrid_pipeline,
            ready_timeout_s=ready_timeout_s,
        )
    finally:
        os_client.close()
    return report
