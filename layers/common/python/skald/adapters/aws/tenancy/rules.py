"""Which stored items belong to an account, and which are the control plane's: the one rule
the tenant-scoped credentials (clients.py), the IAM policies of the CDK stack
(infra/access.py) and the isolation tests share.

Blob keys are `{account}/{path}`; account ids never start with `_`, so every key starting with
`_` is a system object (`_jobs/`, `_watches/`, `_health/`, ...), outside every account.

State table partitions (layout: dynamo/keys.py): `ACCT#{a}`, `ACCT#{a}#...` and `SESS#{a}#...` are
account-partitioned, and so are `AUDIT#{a}#...` (its audit records); the control plane's are
listed in CONTROL_PLANE_PARTITIONS (API-key guards, tasks, the account listing, queue counters
and dedup claims, the tombstone list, the readiness probe's `ACCT#_health`). Any other
partition is treated as an account's: a new kind of item then goes out with a tenant's
credentials and is refused until it is listed here, rather than crossing accounts unnoticed.
Secondary-index queries read control-plane listings only (an account's tasks on `gsi1`, the
`OUTBOX#` and `IDLE#` shards).

Plain Python without I/O: infra/ imports it to write the same patterns into IAM policies.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from fnmatch import fnmatchcase
from typing import Any

# The session tag naming the account a tenant's credentials are for (ABAC: the tenant roles'
# policies read it as ${aws:PrincipalTag/skald_account}).
TAG_KEY = "skald_account"
# Account ids the API admits. None of these characters is special to IAM's StringLike (`*`,
# `?`) nor to the state table's keys (`#`, `%`), and all are allowed in a session tag, so
# `ACCT#{a}`, `SESS#{a}#*` and `{a}/*` name exactly that account's items.
ACCOUNT_ID = re.compile(r"[A-Za-z0-9.@-][A-Za-z0-9_.@-]{0,254}")
SYSTEM_BLOB_PREFIX = "_"
# IAM StringLike patterns (also matched here with fnmatch: no `[`, so the two agree).
CONTROL_PLANE_PARTITIONS = (
    "ACCOUNTS",
    "KEY#*",
    "TASK#*",
    "QUEUE#*",
    "IDLE#*",
    "OUTBOX#*",
    "ACCT#_*",
    "DELETIONS",
)


def is_tenant_account(account_id: str) -> bool:
    """Whether `account_id` can be given tenant-scoped credentials (an API account id)."""
    return ACCOUNT_ID.fullmatch(account_id) is not None


def tenant_partitions(account: str) -> tuple[str, ...]:
    """The partition-key patterns of one account's items (`account` may be an IAM policy
    variable): the account item, its users and keys, its listings, its sessions, its audit
    records."""
    return (f"ACCT#{account}", f"ACCT#{account}#*", f"SESS#{account}#*", f"AUDIT#{account}#*")


def tenant_blob_prefix(account: str) -> str:
    return f"{account}/"


def is_control_plane_blob(key: str) -> bool:
    return key.startswith(SYSTEM_BLOB_PREFIX)


def is_control_plane_partition(pk: str) -> bool:
    return any(fnmatchcase(pk, pattern) for pattern in CONTROL_PLANE_PARTITIONS)


def control_plane_call(service: str, operation: str, params: Mapping[str, Any]) -> bool:
    """Whether an S3 or DynamoDB call names control-plane items only (then it goes with the
    function's own credentials; otherwise, in a tenant's scope, with the tenant's). A call
    naming no item (a whole-bucket listing, a Scan) or one this rule does not know is not
    control plane: in a tenant's scope it goes scoped, and IAM refuses what is not the
    tenant's."""
    if service == "s3":
        keys = list(_blob_keys(operation, params))
        return bool(keys) and all(is_control_plane_blob(k) for k in keys)
    if service == "dynamodb":
        if operation == "DescribeTable":
            return True  # the table's definition, no item
        if operation == "Query" and params.get("IndexName"):
            return True
        pks = list(partitions_named(operation, params))
        return bool(pks) and all(is_control_plane_partition(pk) for pk in pks)
    return False


def _blob_keys(operation: str, params: Mapping[str, Any]) -> Iterator[str]:
    if operation in ("ListObjectsV2", "ListObjects"):
        prefix = params.get("Prefix")
        if prefix:
            yield str(prefix)
        return
    if operation == "DeleteObjects":
        for item in (params.get("Delete") or {}).get("Objects") or []:
            yield str(item.get("Key", ""))
        return
    if "Key" in params:
        yield str(params["Key"])
    source = params.get("CopySource")
    if isinstance(source, Mapping):
        yield str(source.get("Key", ""))
    elif isinstance(source, str):
        yield source.lstrip("/").partition("/")[2]


def _key_pks(params: Mapping[str, Any]) -> Iterator[str]:
    yield from _pk(params.get("Key"))


def _item_pks(params: Mapping[str, Any]) -> Iterator[str]:
    yield from _pk(params.get("Item"))


def _transact_pks(params: Mapping[str, Any]) -> Iterator[str]:
    for entry in params.get("TransactItems") or []:
        for body in entry.values():
            yield from _pk(body.get("Key") or body.get("Item"))


def _batch_get_pks(params: Mapping[str, Any]) -> Iterator[str]:
    for request in (params.get("RequestItems") or {}).values():
        for item_key in request.get("Keys") or []:
            yield from _pk(item_key)


def _batch_write_pks(params: Mapping[str, Any]) -> Iterator[str]:
    for requests in (params.get("RequestItems") or {}).values():
        for request in requests:
            put, delete = request.get("PutRequest"), request.get("DeleteRequest")
            yield from _pk((put or {}).get("Item") or (delete or {}).get("Key"))


def _query_pks(params: Mapping[str, Any]) -> Iterator[str]:
    if params.get("IndexName"):
        return
    pk = _query_partition(params)
    if pk is not None:
        yield pk


_PARTITIONS_OF: dict[str, Callable[[Mapping[str, Any]], Iterator[str]]] = {
    "GetItem": _key_pks,
    "DeleteItem": _key_pks,
    "UpdateItem": _key_pks,
    "PutItem": _item_pks,
    "TransactWriteItems": _transact_pks,
    "TransactGetItems": _transact_pks,
    "BatchGetItem": _batch_get_pks,
    "BatchWriteItem": _batch_write_pks,
    "Query": _query_pks,
}


def partitions_named(operation: str, params: Mapping[str, Any]) -> Iterator[str]:
    """The partition-key values of the items a state-table call names (its `pk`s)."""
    partitions = _PARTITIONS_OF.get(operation)
    if partitions is not None:
        yield from partitions(params)


def _pk(item: Any) -> Iterator[str]:
    value = (item or {}).get("pk") if isinstance(item, Mapping) else None
    if isinstance(value, Mapping) and isinstance(value.get("S"), str):
        yield value["S"]
    else:
        yield ""  # no readable partition key: not control plane (see control_plane_call)


_EQUALS = re.compile(r"(#?[A-Za-z_][A-Za-z0-9_]*)\s*=\s*(:[A-Za-z0-9_]+)")


def _query_partition(params: Mapping[str, Any]) -> str | None:
    """The `pk` a table query's key condition names (`#n = :v`, `pk = :v`)."""
    names = params.get("ExpressionAttributeNames") or {}
    values = params.get("ExpressionAttributeValues") or {}
    for name, placeholder in _EQUALS.findall(str(params.get("KeyConditionExpression", ""))):
        if names.get(name, name) == "pk":
            value = values.get(placeholder) or {}
            return str(value["S"]) if isinstance(value.get("S"), str) else ""
    return None
