"""Which IAM authorizations each recorded call needs: action(s), resource ARN(s), request
context. Multi-item operations need one authorization per item (TransactWriteItems: PutItem /
UpdateItem / DeleteItem / ConditionCheckItem per item, DeleteObjects: DeleteObject per key),
and some calls imply others the service makes with the caller's credentials (an SSE-KMS
object read needs kms:Decrypt through S3, iam:PassRole goes with a schedule's role). A read of
a missing S3 key needs s3:ListBucket too: without it S3 answers 403, not 404, and the blob
store takes only a 404 for "absent".

Request context: what the policies' conditions read. DynamoDB item requests carry
`dynamodb:LeadingKeys` (the partition keys they name: one item's for each item of a
transaction, every item's for a batch), S3 listings `s3:prefix`, AssumeRole the session tags
asked for (`aws:RequestTag/...`, `aws:TagKeys`). The 404 of a read of a missing key stands on
`s3:ListBucket`; that implied request carries the key as `s3:prefix`, which is what the blob
store's own listing of that one key asks for when S3 answers such a read with 403 instead
(skald.adapters.aws.s3.blobstore).

An operation missing from these tables fails the contract test ("no IAM mapping"): a new
call must be described here before it can be judged.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlparse

from tests.contract.cfn import ACCOUNT, Template
from tests.contract.recorder import AwsCall


@dataclass(frozen=True)
class AuthRequest:
    action: str
    resource: str
    # values: a string, or a tuple of strings for a multivalued key (dynamodb:LeadingKeys)
    context: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    implied_by: str = ""  # the call whose service makes this request on the caller's behalf


class UnmappedCall(LookupError):
    pass


class Deployment:
    """Lookups in the template that turn call parameters into ARNs and implied requests."""

    def __init__(self, template: Template) -> None:
        self.template = template
        self.bucket_keys: dict[str, str] = {}
        for logical_id, bucket in template.of_type("AWS::S3::Bucket"):
            rules = (bucket["Properties"].get("BucketEncryption") or {}).get(
                "ServerSideEncryptionConfiguration"
            ) or []
            for rule in rules:
                default = rule.get("ServerSideEncryptionByDefault") or {}
                if default.get("SSEAlgorithm") == "aws:kms":
                    self.bucket_keys[template.name(logical_id)] = str(
                        template.resolve(default["KMSMasterKeyID"])
                    )
        self.secret_keys: dict[str, str] = {}
        for logical_id, secret in template.of_type("AWS::SecretsManager::Secret"):
            key = secret["Properties"].get("KmsKeyId")
            if key is not None:
                self.secret_keys[str(template.attribute(logical_id, "Ref"))] = str(
                    template.resolve(key)
                )
        domains = [
            template.name(lid) for lid, _ in template.of_type("AWS::OpenSearchService::Domain")
        ]
        self.domain = domains[0] if len(domains) == 1 else None


def requests_for(call: AwsCall, deployment: Deployment) -> list[AuthRequest]:
    mapper = _SERVICES.get(call.service)
    if mapper is None:
        raise UnmappedCall(f"no IAM mapping for service {call.service} ({call.describe()})")
    return mapper(call, deployment)


# -- S3 ------------------------------------------------------------------------------------

_S3_OBJECT = {
    "GetObject": ["s3:GetObject"],
    "HeadObject": ["s3:GetObject"],
    "PutObject": ["s3:PutObject"],
    "DeleteObject": ["s3:DeleteObject"],
    "CreateMultipartUpload": ["s3:PutObject"],
    "UploadPart": ["s3:PutObject"],
    "CompleteMultipartUpload": ["s3:PutObject"],
    "AbortMultipartUpload": ["s3:AbortMultipartUpload"],
    "ListParts": ["s3:ListMultipartUploadParts"],
    "GetObjectAttributes": ["s3:GetObject", "s3:GetObjectAttributes"],
}
_S3_BUCKET = {
    "ListObjectsV2": "s3:ListBucket",
    "ListObjects": "s3:ListBucket",
    "HeadBucket": "s3:ListBucket",
    "ListMultipartUploads": "s3:ListBucketMultipartUploads",
    "ListObjectVersions": "s3:ListBucketVersions",
}
# What S3 asks KMS for, with the caller's credentials, on an SSE-KMS bucket.
_S3_KMS = {
    "GetObject": ["kms:Decrypt"],
    "PutObject": ["kms:GenerateDataKey"],
    "CreateMultipartUpload": ["kms:GenerateDataKey"],
    "UploadPart": ["kms:Decrypt"],
    "CompleteMultipartUpload": ["kms:Decrypt"],
}


def _s3(call: AwsCall, d: Deployment) -> list[AuthRequest]:
    p, op = call.params, call.operation
    ctx = {"aws:SecureTransport": "true", "s3:TlsVersion": "1.3"}
    bucket = str(p.get("Bucket", ""))
    out: list[AuthRequest] = []
    if op in _S3_OBJECT:
        arn = f"arn:aws:s3:::{bucket}/{p['Key']}"
        out += [AuthRequest(a, arn, ctx) for a in _S3_OBJECT[op]]
        if p.get("VersionId") and op in ("GetObject", "HeadObject"):
            out.append(AuthRequest("s3:GetObjectVersion", arn, ctx))
        if call.status == 404 and op in ("GetObject", "HeadObject"):
            out.append(
                AuthRequest(
                    "s3:ListBucket", f"arn:aws:s3:::{bucket}", {**ctx, "s3:prefix": str(p["Key"])}
                )
            )
            return out  # nothing to decrypt
        out += _kms_via(d.bucket_keys.get(bucket), _S3_KMS.get(op, []), "s3", call)
    elif op in _S3_BUCKET:
        listing = {**ctx, "s3:prefix": str(p["Prefix"])} if p.get("Prefix") else ctx
        out.append(AuthRequest(_S3_BUCKET[op], f"arn:aws:s3:::{bucket}", listing))
    elif op == "DeleteObjects":
        for item in p["Delete"]["Objects"]:
            # Deleting one version of a key (not just hiding it) is its own action.
            action = "s3:DeleteObjectVersion" if item.get("VersionId") else "s3:DeleteObject"
            out.append(AuthRequest(action, f"arn:aws:s3:::{bucket}/{item['Key']}", ctx))
    elif op in ("CopyObject", "UploadPartCopy"):
        source = p["CopySource"]
        if isinstance(source, str):
            src_bucket, _, src_key = unquote(source.lstrip("/")).partition("/")
            src_key = src_key.split("?versionId=", 1)[0]
        else:
            src_bucket, src_key = source["Bucket"], source["Key"]
        out.append(AuthRequest("s3:GetObject", f"arn:aws:s3:::{src_bucket}/{src_key}", ctx))
        out.append(AuthRequest("s3:PutObject", f"arn:aws:s3:::{bucket}/{p['Key']}", ctx))
        out += _kms_via(d.bucket_keys.get(src_bucket), ["kms:Decrypt"], "s3", call)
        out += _kms_via(d.bucket_keys.get(bucket), ["kms:GenerateDataKey"], "s3", call)
    else:
        raise UnmappedCall(f"no IAM mapping for {call.describe()}")
    return out


def _kms_via(key: str | None, actions: list[str], service: str, call: AwsCall) -> list[AuthRequest]:
    if key is None:
        return []
    ctx = {
        "kms:ViaService": f"{service}.{call.region}.amazonaws.com",
        "kms:CallerAccount": ACCOUNT,
        "aws:SecureTransport": "true",
    }
    return [AuthRequest(a, key, ctx, implied_by=call.describe()) for a in actions]


# -- DynamoDB ------------------------------------------------------------------------------

_DYNAMO_ITEM = {
    "GetItem": "dynamodb:GetItem",
    "PutItem": "dynamodb:PutItem",
    "UpdateItem": "dynamodb:UpdateItem",
    "DeleteItem": "dynamodb:DeleteItem",
    "Query": "dynamodb:Query",
    "Scan": "dynamodb:Scan",
    "DescribeTable": "dynamodb:DescribeTable",
}
_TRANSACT = {
    "Put": "dynamodb:PutItem",
    "Update": "dynamodb:UpdateItem",
    "Delete": "dynamodb:DeleteItem",
    "ConditionCheck": "dynamodb:ConditionCheckItem",
    "Get": "dynamodb:GetItem",
}


def _table_arn(call: AwsCall, table: str, index: str | None = None) -> str:
    base = (
        table
        if table.startswith("arn:")
        else f"arn:aws:dynamodb:{call.region}:{ACCOUNT}:table/{table}"
    )
    return f"{base}/index/{index}" if index else base


def _partition(item: Any) -> tuple[str, ...]:
    """The partition key of an item or key (the first attribute of the table's key schema:
    `pk` on the state table, `id` on the idempotency table)."""
    for name in ("pk", "id"):
        value = (item or {}).get(name) if isinstance(item, Mapping) else None
        if isinstance(value, Mapping) and "S" in value:
            return (str(value["S"]),)
    return ()


def _query_partition(p: Mapping[str, Any]) -> tuple[str, ...]:
    """The partition a Query names: the equality on the (index's) partition key."""
    names = p.get("ExpressionAttributeNames") or {}
    values = p.get("ExpressionAttributeValues") or {}
    index = p.get("IndexName")
    wanted = {"gsi1": "gsi1pk", "idle": "idle_pk"}.get(index, "pk") if index else "pk"
    for name, placeholder in re.findall(
        r"(#?\w+)\s*=\s*(:\w+)", str(p.get("KeyConditionExpression", ""))
    ):
        if names.get(name, name) == wanted:
            return (str(values[placeholder]["S"]),)
    return ()


def _keys(ctx: dict[str, Any], partitions: tuple[str, ...]) -> dict[str, Any]:
    return {**ctx, "dynamodb:LeadingKeys": partitions} if partitions else ctx


def _dynamodb(call: AwsCall, d: Deployment) -> list[AuthRequest]:
    p, op = call.params, call.operation
    ctx: dict[str, Any] = {"aws:SecureTransport": "true"}
    if op in _DYNAMO_ITEM:
        index = p.get("IndexName") if op in ("Query", "Scan") else None
        keys = _query_partition(p) if op == "Query" else _partition(p.get("Key") or p.get("Item"))
        return [
            AuthRequest(_DYNAMO_ITEM[op], _table_arn(call, p["TableName"], index), _keys(ctx, keys))
        ]
    if op in ("TransactWriteItems", "TransactGetItems"):
        out = []
        for item in p["TransactItems"]:
            ((kind, body),) = item.items()
            keys = _partition(body.get("Key") or body.get("Item"))
            out.append(
                AuthRequest(_TRANSACT[kind], _table_arn(call, body["TableName"]), _keys(ctx, keys))
            )
        return out
    if op == "BatchGetItem":
        return [
            AuthRequest(
                "dynamodb:BatchGetItem",
                _table_arn(call, t),
                _keys(ctx, tuple(k for key in r["Keys"] for k in _partition(key))),
            )
            for t, r in p["RequestItems"].items()
        ]
    if op == "BatchWriteItem":
        return [
            AuthRequest(
                "dynamodb:BatchWriteItem",
                _table_arn(call, t),
                _keys(
                    ctx,
                    tuple(
                        k
                        for r in requests
                        for k in _partition(
                            (r.get("PutRequest") or {}).get("Item")
                            or (r.get("DeleteRequest") or {}).get("Key")
                        )
                    ),
                ),
            )
            for t, requests in p["RequestItems"].items()
        ]
    raise UnmappedCall(f"no IAM mapping for {call.describe()}")


# -- SQS -----------------------------------------------------------------------------------

_SQS = {
    "SendMessage": "sqs:SendMessage",
    "SendMessageBatch": "sqs:SendMessage",
    "ReceiveMessage": "sqs:ReceiveMessage",
    "DeleteMessage": "sqs:DeleteMessage",
    "DeleteMessageBatch": "sqs:DeleteMessage",
    "ChangeMessageVisibility": "sqs:ChangeMessageVisibility",
    "ChangeMessageVisibilityBatch": "sqs:ChangeMessageVisibility",
    "GetQueueAttributes": "sqs:GetQueueAttributes",
    "GetQueueUrl": "sqs:GetQueueUrl",
    "PurgeQueue": "sqs:PurgeQueue",
}


def _sqs(call: AwsCall, d: Deployment) -> list[AuthRequest]:
    action = _SQS.get(call.operation)
    if action is None:
        raise UnmappedCall(f"no IAM mapping for {call.describe()}")
    if call.operation == "GetQueueUrl":
        name = call.params["QueueName"]
        account = call.params.get("QueueOwnerAWSAccountId", ACCOUNT)
    else:
        parts = [s for s in urlparse(call.params["QueueUrl"]).path.split("/") if s]
        account, name = parts[-2], parts[-1]
    arn = f"arn:aws:sqs:{call.region}:{account}:{name}"
    return [AuthRequest(action, arn, {"aws:SecureTransport": "true"})]


# -- EventBridge Scheduler -----------------------------------------------------------------


def _scheduler(call: AwsCall, d: Deployment) -> list[AuthRequest]:
    p, op = call.params, call.operation
    if op not in ("CreateSchedule", "UpdateSchedule", "DeleteSchedule", "GetSchedule"):
        raise UnmappedCall(f"no IAM mapping for {call.describe()}")
    group = p.get("GroupName") or "default"
    arn = f"arn:aws:scheduler:{call.region}:{ACCOUNT}:schedule/{group}/{p['Name']}"
    out = [AuthRequest(f"scheduler:{op}", arn, {"aws:SecureTransport": "true"})]
    role = (p.get("Target") or {}).get("RoleArn")
    if role:  # the schedule runs as this role: handing it over is iam:PassRole
        out.append(
            AuthRequest(
                "iam:PassRole",
                role,
                {"iam:PassedToService": "scheduler.amazonaws.com"},
                implied_by=call.describe(),
            )
        )
    return out


# -- STS -------------------------------------------------------------------------------------


def _sts(call: AwsCall, d: Deployment) -> list[AuthRequest]:
    """AssumeRole (with session tags: sts:TagSession too, in the same request context)."""
    if call.operation != "AssumeRole":
        raise UnmappedCall(f"no IAM mapping for {call.describe()}")
    tags = {t["Key"]: t["Value"] for t in call.params.get("Tags") or []}
    ctx: dict[str, Any] = {
        "aws:SecureTransport": "true",
        **{f"aws:RequestTag/{k}": v for k, v in tags.items()},
    }
    if tags:
        ctx["aws:TagKeys"] = tuple(tags)
    role = str(call.params["RoleArn"])
    out = [AuthRequest("sts:AssumeRole", role, ctx)]
    if tags:
        out.append(AuthRequest("sts:TagSession", role, ctx))
    return out


# -- Secrets Manager -----------------------------------------------------------------------


def _secretsmanager(call: AwsCall, d: Deployment) -> list[AuthRequest]:
    if call.operation != "GetSecretValue":
        raise UnmappedCall(f"no IAM mapping for {call.describe()}")
    secret = str(call.params["SecretId"])
    if not secret.startswith("arn:"):
        raise UnmappedCall(f"GetSecretValue by name ({secret}): the contract expects the ARN")
    out = [AuthRequest("secretsmanager:GetSecretValue", secret, {"aws:SecureTransport": "true"})]
    return out + _kms_via(d.secret_keys.get(secret), ["kms:Decrypt"], "secretsmanager", call)


# -- API Gateway (management): the edge's account keys -------------------------------------
# The management API authorises by HTTP verb on the resource path it names.
_APIGATEWAY: dict[str, tuple[str, Callable[[Mapping[str, Any]], str]]] = {
    "GetApiKeys": ("GET", lambda p: "/apikeys"),
    "CreateApiKey": ("POST", lambda p: "/apikeys"),
    "DeleteApiKey": ("DELETE", lambda p: f"/apikeys/{p['apiKey']}"),
    "GetUsagePlans": ("GET", lambda p: "/usageplans"),
    "CreateUsagePlanKey": ("POST", lambda p: f"/usageplans/{p['usagePlanId']}/keys"),
    "DeleteUsagePlanKey": (
        "DELETE",
        lambda p: f"/usageplans/{p['usagePlanId']}/keys/{p['keyId']}",
    ),
}


def _apigateway(call: AwsCall, d: Deployment) -> list[AuthRequest]:
    mapped = _APIGATEWAY.get(call.operation)
    if mapped is None:
        raise UnmappedCall(f"no IAM mapping for {call.describe()}")
    verb, path = mapped
    arn = f"arn:aws:apigateway:{call.region}::{path(call.params)}"
    return [AuthRequest(f"apigateway:{verb}", arn, {"aws:SecureTransport": "true"})]


# -- Bedrock -------------------------------------------------------------------------------

_GEOGRAPHIES = ("us", "us-gov", "eu", "apac", "jp", "au", "ca", "global")


def _model_arns(model: str, region: str) -> list[str]:
    if model.startswith("arn:"):
        return [model]
    geography, _, base = model.partition(".")
    if geography in _GEOGRAPHIES and base:
        return [
            f"arn:aws:bedrock:{region}:{ACCOUNT}:inference-profile/{model}",
            f"arn:aws:bedrock:{region}::foundation-model/{base}",
        ]
    return [f"arn:aws:bedrock:{region}::foundation-model/{model}"]


def _bedrock_runtime(call: AwsCall, d: Deployment) -> list[AuthRequest]:
    actions = {
        "InvokeModel": "bedrock:InvokeModel",
        "Converse": "bedrock:InvokeModel",
        "InvokeModelWithResponseStream": "bedrock:InvokeModelWithResponseStream",
        "ConverseStream": "bedrock:InvokeModelWithResponseStream",
    }
    action = actions.get(call.operation)
    if action is None:
        raise UnmappedCall(f"no IAM mapping for {call.describe()}")
    return [AuthRequest(action, arn) for arn in _model_arns(call.params["modelId"], call.region)]


def _bedrock_agent_runtime(call: AwsCall, d: Deployment) -> list[AuthRequest]:
    if call.operation != "Rerank":
        raise UnmappedCall(f"no IAM mapping for {call.describe()}")
    config = call.params["rerankingConfiguration"]["bedrockRerankingConfiguration"]
    model = config["modelConfiguration"]["modelArn"]
    return [
        AuthRequest("bedrock:Rerank", "*"),
        *[AuthRequest("bedrock:InvokeModel", arn) for arn in _model_arns(model, call.region)],
    ]


# -- OpenSearch Service (HTTP) -------------------------------------------------------------


def _es(call: AwsCall, d: Deployment) -> list[AuthRequest]:
    if d.domain is None:
        raise UnmappedCall("OpenSearch calls, but the template has no (single) domain")
    path = str(call.params["path"]).lstrip("/")
    arn = f"arn:aws:es:{call.region}:{ACCOUNT}:domain/{d.domain}/{path}"
    return [
        AuthRequest(f"es:ESHttp{call.operation.capitalize()}", arn, {"aws:SecureTransport": "true"})
    ]


_SERVICES: dict[str, Callable[[AwsCall, Deployment], list[AuthRequest]]] = {
    "s3": _s3,
    "dynamodb": _dynamodb,
    "sqs": _sqs,
    "scheduler": _scheduler,
    "secretsmanager": _secretsmanager,
    "bedrock-runtime": _bedrock_runtime,
    "sts": _sts,
    "bedrock-agent-runtime": _bedrock_agent_runtime,
    "es": _es,
    "apigateway": _apigateway,
}


def describe(request: AuthRequest) -> str:
    via = f" (by {request.implied_by})" if request.implied_by else ""
    return f"{request.action} on {request.resource}{via}"


__all__ = ["AuthRequest", "Deployment", "UnmappedCall", "describe", "requests_for"]
