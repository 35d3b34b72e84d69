"""`skald serve --backend aws-local`: the AWS backend on one machine, without an account.

Starts moto (S3, DynamoDB, SQS, Scheduler) and osmem-server on loopback, creates the bucket,
the table and the queues with their dead-letter queues (the search index is `skald admin
init`'s job, which `skald serve` runs next), and drains the queues with the worker Lambda
handlers fed real SQS messages, as event source mappings would.
osmem-server has no k-NN engine: dense and hybrid retrieval answer a clear 400 here.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from skald import catalog
from skald.config import Settings

log = logging.getLogger("skald.aws_local")
REGION = "us-east-1"
BUCKET = "skald-local"
TABLE = "skald-state"
SCHEDULE_GROUP = "skald-idle-commit"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def create_state_table(dynamo: Any, name: str) -> None:
    """The single table exactly as the CDK stack defines it."""
    dynamo.create_table(
        TableName=name,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[
            {"AttributeName": a, "AttributeType": t}
            for a, t in (
                ("pk", "S"),
                ("sk", "S"),
                ("gsi1pk", "S"),
                ("gsi1sk", "S"),
                ("idle_pk", "S"),
                ("idle_at", "N"),
            )
        ],
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "gsi1",
                "Projection": {"ProjectionType": "ALL"},
                "KeySchema": [
                    {"AttributeName": "gsi1pk", "KeyType": "HASH"},
                    {"AttributeName": "gsi1sk", "KeyType": "RANGE"},
                ],
            },
            {
                "IndexName": "idle",
                "Projection": {"ProjectionType": "ALL"},
                "KeySchema": [
                    {"AttributeName": "idle_pk", "KeyType": "HASH"},
                    {"AttributeName": "idle_at", "KeyType": "RANGE"},
                ],
            },
        ],
    )
    dynamo.update_time_to_live(
        TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": "ttl"}
    )


class LocalAwsStack:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._moto: Any = None
        self._osmem: Any = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> Settings:
        """Starts the emulators, creates the resources; returns the settings that use them."""
        try:
            from moto.server import ThreadedMotoServer
            from osmem_server import OsmemServer
        except ImportError as exc:  # dev-only dependencies
            raise RuntimeError(
                "aws-local needs moto[server] and osmem-server: pip install -e '.[dev]'"
            ) from exc
        for var, value in (
            ("AWS_ACCESS_KEY_ID", "testing"),
            ("AWS_SECRET_ACCESS_KEY", "testing"),
            ("AWS_DEFAULT_REGION", REGION),
            ("AWS_REGION", REGION),
        ):
            os.environ.setdefault(var, value)
        for noisy in ("werkzeug", "opensearch", "botocore.credentials"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
        port = _free_port()
        self._moto = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        self._moto.start()
        endpoint = f"http://127.0.0.1:{port}"
        self._osmem = OsmemServer.start(japanese=False)
        import boto3

        def client(service: str) -> Any:
            made: Any = boto3.client(
                service,
                endpoint_url=endpoint,  # type: ignore[call-overload]
                region_name=REGION,
            )
            return made

        s3 = client("s3")
        s3.create_bucket(Bucket=BUCKET)
        # Versioned, as the CDK stack's bucket: a purge must remove every version.
        s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
        # As the CDK stack: job payloads a missed delete left behind expire.
        s3.put_bucket_lifecycle_configuration(
            Bucket=BUCKET,
            LifecycleConfiguration={
                "Rules": [
                    {
                        "ID": "expire-job-payloads",
                        "Status": "Enabled",
                        "Filter": {"Prefix": catalog.JOB_PAYLOAD_PREFIX},
                        "Expiration": {"Days": catalog.JOB_PAYLOAD_EXPIRY_DAYS},
                    }
                ]
            },
        )
        create_state_table(client("dynamodb"), TABLE)
        sqs = client("sqs")
        urls: dict[str, str] = {}
        dlqs: dict[str, str] = {}
        for name in (q.name for q in catalog.QUEUES):
            dlq = dlqs[name] = sqs.create_queue(QueueName=f"skald-{name}-dlq")["QueueUrl"]
            dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])[
                "Attributes"
            ]["QueueArn"]
            urls[name] = sqs.create_queue(
                QueueName=f"skald-{name}",
                Attributes={
                    "VisibilityTimeout": "60",
                    "RedrivePolicy": json.dumps(
                        {
                            "deadLetterTargetArn": dlq_arn,
                            "maxReceiveCount": str(self.settings.job_max_attempts),
                        }
                    ),
                },
            )["QueueUrl"]
        client("scheduler").create_schedule_group(Name=SCHEDULE_GROUP)
        self.settings = self.settings.model_copy(
            update={
                "backend": "aws",
                "bucket": BUCKET,
                "state_table": TABLE,
                "queue_urls": urls,
                "dlq_urls": dlqs,
                "aws_endpoint_url": endpoint,
                "opensearch_endpoint": self._osmem.url,
                "opensearch_auth": "none",
                "embedding_provider": "onnx"
                if self.settings.embedding_provider == "bedrock"
                else self.settings.embedding_provider,
            }
        )
        return self.settings

    def drain(
        self,
        handlers: dict[str, Callable[[dict[str, Any], Any], dict[str, Any]]],
    ) -> None:
        """One poller per queue: receive, hand the batch to the worker handler, delete what
        succeeded; a failed record becomes visible again after a short delay."""
        import boto3

        sqs = boto3.client("sqs", endpoint_url=self.settings.aws_endpoint_url, region_name=REGION)
        for name, handler in handlers.items():
            url = self.settings.queue_urls[name]
            thread = threading.Thread(
                target=self._poll, args=(sqs, url, handler), name=f"skald-sqs-{name}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def _poll(
        self, sqs: Any, url: str, handler: Callable[[dict[str, Any], Any], dict[str, Any]]
    ) -> None:
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        while not self._stop.is_set():
            try:
                got = sqs.receive_message(
                    QueueUrl=url,
                    MaxNumberOfMessages=10,
                    WaitTimeSeconds=1,
                    AttributeNames=["All"],
                    MessageAttributeNames=["All"],
                )
                messages = got.get("Messages", [])
                if not messages:
                    continue
                event = {"Records": [sqs_event_record(m, arn) for m in messages]}
                result = handler(event, _LambdaContext(url.rsplit("/", 1)[-1]))
                failed = {f["itemIdentifier"] for f in result.get("batchItemFailures", [])}
                for m in messages:
                    if m["MessageId"] in failed:
                        sqs.change_message_visibility(
                            QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=1
                        )
                    else:
                        sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
            except Exception:  # the poller outlives a failed batch, as an ESM would
                log.exception("aws-local poller error on %s", url)
                self._stop.wait(1.0)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)
        if self._osmem is not None:
            self._osmem.close()
        if self._moto is not None:
            self._moto.stop()


class _LambdaContext:
    """What a worker handler reads from its Lambda context. The remaining time counts down
    from Lambda's maximum timeout, as in an invocation (a long job continues in a new one)."""

    TIMEOUT_S = 900.0

    def __init__(self, queue_name: str) -> None:
        self._deadline = time.monotonic() + self.TIMEOUT_S
        self.function_name = f"skald-worker-{queue_name}"
        self.function_version = "$LATEST"
        self.invoked_function_arn = (
            f"arn:aws:lambda:{REGION}:000000000000:function:{self.function_name}"
        )
        self.memory_limit_in_mb = 1024
        self.aws_request_id = "aws-local"
        self.log_group_name = "aws-local"
        self.log_stream_name = "aws-local"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def sqs_event_record(message: dict[str, Any], arn: str) -> dict[str, Any]:
    """An SQS message (ReceiveMessage's shape) as Lambda's event source mapping hands it to a
    worker: one record of the event's `Records`. The contract harness and the bench gateway
    deliver with it too."""
    attrs = {
        k: {
            "stringValue": v.get("StringValue"),
            "dataType": v.get("DataType", "String"),
            "stringListValues": [],
            "binaryListValues": [],
        }
        for k, v in (message.get("MessageAttributes") or {}).items()
    }
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": message.get("Attributes", {}),
        "messageAttributes": attrs,
        "md5OfBody": message.get("MD5OfBody", ""),
        "eventSource": "aws:sqs",
        "eventSourceARN": arn,
        "awsRegion": REGION,
    }
