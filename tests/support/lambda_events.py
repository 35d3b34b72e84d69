"""Lambda events as API Gateway and SQS deliver them, and a Lambda context, for tests that
invoke handlers the way the cloud does."""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

from skald.ports import Job


class Ctx:
    aws_request_id = "req-1"
    function_name = "skald-test"
    function_version = "$LATEST"
    memory_limit_in_mb = 1024
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:skald-test"
    log_group_name = "/aws/lambda/skald-test"
    log_stream_name = "2026/01/01/[$LATEST]abc"

    def get_remaining_time_in_millis(self) -> int:
        # A fresh worker invocation's budget: below jobs stop early and continue elsewhere.
        return 900_000


def rest_event(
    method: str,
    path: str,
    *,
    query: dict[str, str] | None = None,
    body: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    authorizer: dict[str, str] | None = None,
) -> dict[str, Any]:
    """An API Gateway REST (payload 1.0) proxy event; `authorizer` is the context the
    gateway adds after the REQUEST authorizer allowed the call."""
    return {
        "resource": "/{proxy+}",
        "path": path,
        "httpMethod": method,
        "headers": {
            "content-type": "application/json",
            "host": "api.example.com",
            **(headers or {}),
        },
        "multiValueHeaders": {},
        "queryStringParameters": query,
        "multiValueQueryStringParameters": {k: [v] for k, v in (query or {}).items()},
        "pathParameters": {"proxy": path.lstrip("/")},
        "stageVariables": None,
        "requestContext": {
            "resourcePath": "/{proxy+}",
            "httpMethod": method,
            "path": path,
            "stage": "prod",
            "requestId": "r1",
            "identity": {"sourceIp": "1.2.3.4"},
            "authorizer": authorizer or {},
        },
        "body": json.dumps(body) if body is not None else None,
        "isBase64Encoded": False,
    }


def authorizer_event(api_key: str) -> dict[str, Any]:
    return {
        "type": "REQUEST",
        "httpMethod": "GET",
        "path": "/api/v1/fs/ls",
        "methodArn": "arn:aws:execute-api:us-east-1:123456789012:abc/prod/GET/api/v1/fs/ls",
        "headers": {"X-API-Key": api_key},
        "multiValueHeaders": {},
    }


def sqs_event(*jobs: Job) -> dict[str, Any]:
    """One SQS record per job, with the attributes the SQS queue adapter sets."""
    records = []
    for job in jobs:
        body = json.dumps(job.payload)
        attrs = {
            name: {
                "stringValue": value,
                "stringListValues": [],
                "binaryListValues": [],
                "dataType": "String",
            }
            for name, value in {"kind": job.kind, "job_id": job.job_id, "queue": job.queue}.items()
        }
        records.append(
            {
                "messageId": str(uuid.uuid4()),
                "receiptHandle": "AQEB" + uuid.uuid4().hex,
                "body": body,
                "messageAttributes": attrs,
                "attributes": {
                    "ApproximateReceiveCount": "1",
                    "SentTimestamp": "1767225600000",
                    "SenderId": "AIDAEXAMPLE",
                    "ApproximateFirstReceiveTimestamp": "1767225600001",
                },
                "md5OfBody": hashlib.md5(body.encode()).hexdigest(),
                "eventSource": "aws:sqs",
                "eventSourceARN": f"arn:aws:sqs:us-east-1:123456789012:skald-{job.queue}",
                "awsRegion": "us-east-1",
            }
        )
    return {"Records": records}
