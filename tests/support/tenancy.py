"""The tenant-scoping rule: every request an AWS adapter sends names exactly the caller's account,
unless it is a control-plane request of a kind declared in CONTROL_PLANE (one list, each entry
with its reason).

A request is broken into *parts*, each a short text (what it touches) and the account it names,
if any:

- DynamoDB (layout: skald/adapters/aws/dynamo/keys.py): every partition key it reads or writes
  (`pk`, and `gsi1pk` / `idle_pk` in a key condition) is a required part; `ACCT#{a}...` and
  `SESS#{a}#...` name account a. Sort keys, GSI keys written into items, `account_id`
  attributes and the values of condition / filter expressions name an account where they have
  one (the accounts listing's `ACCT#{a}`, an outbox entry's `{stamp}#SESS#{a}#...`), and are
  otherwise not required. Table-level calls are `op {Operation}`.
- S3: every object key and listing prefix; `{account}/{path}` names the account (a prefix
  without the `/` after the account names none: it would also match `{account}x/`).
  Bucket-level calls are `op {Operation}`.
- OpenSearch: a search, count, delete-by-query and each search of an _msearch must be
  *restricted* to an account by its query: a `term`/`terms` filter on `account` (in a bool's
  filter or must, a k-NN clause's filter, every half of a hybrid query), or a filter on ids
  the ledger knows as that account's. Every bulk document names its `account`, and its
  `record_id` (and `_id` where the action sets one) must be derived from that account; a bulk
  delete by `_id` names the account the ledger knows the id as. Any other request is
  `op {METHOD} {path}`.
- SQS: a message body's `account` (a job's payload, or the `payload` of a schedule's
  envelope) where it carries one, `message without account` where not; other calls are
  `op {Operation}`.
- EventBridge Scheduler: a schedule's `Input` (its payload) names its account; other calls
  are `op {Operation}`. So are the calls of services that store nothing (models, secrets).

The check (`problems`): a part matching a CONTROL_PLANE pattern of its service is fine; every
other required part must name an account; every named account must be the caller's. A caller
bound to no account (None: setup, sweeps across accounts, resolving an API key) may name at
most one account per request. Blob-store calls may also bind `within`: the keys or prefixes the
caller gave, which every S3 key and prefix of the request must start with (the adapter never
widens or changes them).

Adding a control-plane kind is one line in CONTROL_PLANE: the service, a pattern the part's
text must match entirely (run the check to see the text of a failing part) and the reason.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class ControlKind:
    service: str
    pattern: str  # full match against a part's text
    reason: str

    def matches(self, service: str, text: str) -> bool:
        return self.service == service and re.fullmatch(self.pattern, text) is not None


_TABLE_OPS = "CreateTable|DescribeTable|DeleteTable|UpdateTimeToLive|DescribeTimeToLive|ListTables"
_QUEUE_OPS = (
    "ReceiveMessage|DeleteMessage|DeleteMessageBatch|ChangeMessageVisibility|"
    "ChangeMessageVisibilityBatch|GetQueueAttributes|GetQueueUrl|CreateQueue|"
    "DeleteQueue|PurgeQueue"
)

CONTROL_PLANE: tuple[ControlKind, ...] = (
    # DynamoDB state table
    ControlKind(
        "dynamodb",
        r"partition KEY#[^#]*",
        "API-key guard item: looked up by the key's hash before any account is known "
        "(it points to the user item, read next in its account's partition)",
    ),
    ControlKind(
        "dynamodb",
        r"partition TASK#[^#]*",
        "task item: task ids are global; the task service checks the item's account "
        "after reading it (an account's task listing is ACCT#{a}#TASKS, which names it)",
    ),
    ControlKind(
        "dynamodb",
        r"partition ACCOUNTS",
        "the accounts listing, read by root's admin routes (an account's own row in it "
        "has the sort key ACCT#{a}, which names it)",
    ),
    ControlKind(
        "dynamodb",
        r"partition IDLE#\d+",
        "idle-deadline shard of the `idle` GSI: the auto-commit sweep reads every "
        "account's due sessions from it",
    ),
    ControlKind(
        "dynamodb",
        r"partition OUTBOX#\d+",
        "unsealed-commit shard of gsi1: commit recovery sweeps every account's "
        "half-done commits from it",
    ),
    ControlKind(
        "dynamodb",
        r"partition QUEUE#[^#]*",
        "a job queue's counters and dedup claims: per queue, not per account",
    ),
    ControlKind(
        "dynamodb",
        r"partition DELETIONS",
        "the tombstone list: every user or account being removed (each item names its "
        "account in its sort key); the purge sweep reads it across accounts",
    ),
    ControlKind(
        "dynamodb",
        r"partition AUDITS#[^#]+#\d+",
        "root's cross-account view of the audit trail (a gsi1 shard per month), read "
        "by root only; each record's own partition AUDIT#{a}#{month} names its account",
    ),
    ControlKind(
        "dynamodb",
        r"partition ACCT#_root#TASKS",
        "the system's task listing: a purge the root key asked for (or a user removing "
        "themself) is tracked by a task of the reserved account `_root`, written in "
        "the request that tombstones the tenant",
    ),
    ControlKind(
        "dynamodb",
        r"account_id _root",
        "the system's task (its `account_id` is the reserved `_root`): the purge of a "
        "tenant the root key removed, created in the request that tombstones it",
    ),
    ControlKind(
        "dynamodb",
        r"partition ACCT#_health",
        "the health probe reads the account `_health`, which cannot exist (account ids "
        "never start with `_`)",
    ),
    ControlKind("dynamodb", rf"op ({_TABLE_OPS})", "table setup (aws-local, the harness)"),
    ControlKind(
        "dynamodb",
        r"key id=.+",
        "Powertools idempotency record of a worker message, in its own table",
    ),
    # S3
    ControlKind(
        "s3",
        r"(key|prefix) _jobs/.*",
        "job payloads too large for one SQS message (`_jobs/{queue}/{job id}`); the "
        "message carrying the reference names the account",
    ),
    ControlKind(
        "s3",
        r"(key|prefix) _watches/.*",
        "watches of remote sources (`_watches/{task id}.json`), outside every account's "
        "tree; the watch service filters them by the caller's account and user",
    ),
    ControlKind("s3", r"key _health/probe", "the health probe (a HEAD of a key nobody writes)"),
    ControlKind(
        "s3",
        r"op (CreateBucket|PutBucketLifecycleConfiguration|HeadBucket|"
        r"PutBucketVersioning|DeleteBucket|ListMultipartUploads)",
        "bucket setup and upkeep (aws-local, the harness)",
    ),
    # SQS
    ControlKind(
        "sqs",
        rf"op ({_QUEUE_OPS})",
        "queue plumbing: receiving, settling and counting messages, not an account's "
        "data (what a message carries is checked when it is sent)",
    ),
    ControlKind(
        "sqs",
        r"message without account",
        "jobs of the sweeps across accounts (commit recovery, due watches) name none",
    ),
    # EventBridge Scheduler
    ControlKind(
        "scheduler",
        r"op (DeleteSchedule|GetSchedule|ListSchedules|"
        r"CreateScheduleGroup)",
        "an idle timer's schedule by its name (its Input, checked when it is created or "
        "moved, names the session's account)",
    ),
    # OpenSearch
    ControlKind(
        "opensearch",
        r"account _health",
        "the health probe counts the records of `_health`, an account that cannot "
        "exist (account ids never start with `_`)",
    ),
    ControlKind(
        "opensearch",
        r"op (PUT|HEAD|GET|DELETE) /[^_/][^/]*",
        "index setup: create, check or delete the records index (deploy time, tests)",
    ),
    ControlKind(
        "opensearch",
        r"op (GET|PUT) /[^_/][^/]*/_mapping",
        "index setup: the vector dimension of an existing index",
    ),
    ControlKind(
        "opensearch",
        r"op (GET|HEAD|PUT|DELETE) (/[^_/][^/]*)?/_alias(es)?(/[^/]+)?|"
        r"op POST /_aliases",
        "index setup: the alias the app reads through, moved between index versions",
    ),
    ControlKind(
        "opensearch",
        r"op (GET|PUT|DELETE) /_search/pipeline/[^/]+",
        "index setup: the hybrid search pipeline",
    ),
    ControlKind(
        "opensearch",
        r"op POST /[^_/][^/]*/_refresh",
        "a refresh makes earlier writes searchable before a delete-by-query; it reads "
        "and changes no document",
    ),
    # Not stores: nothing is kept there, so nothing is any account's
    ControlKind(
        "bedrock-runtime",
        r"op (InvokeModel|Converse)",
        "models: embeddings and completions of the text sent; nothing is stored",
    ),
    ControlKind("bedrock-agent-runtime", r"op Rerank", "models: reranking; nothing is stored"),
    ControlKind(
        "sts",
        r"op AssumeRole",
        "tenant-scoped credentials: the session is tagged with the one account it is "
        "for (the tag, not the request, names it; tests/contract/test_tenant_scope.py "
        "checks the tag against the caller)",
    ),
    ControlKind(
        "secretsmanager",
        r"op GetSecretValue",
        "the root API key's secret (one per deployment), read by the authorizer",
    ),
    # API Gateway: the edge's account keys (skald.adapters.aws.edge); a key's name names its
    # account (`<namespace>/<account>`), checked where a request gives it
    ControlKind(
        "apigateway",
        r"op (GetUsagePlans|CreateUsagePlanKey|DeleteUsagePlanKey|DeleteApiKey)",
        "the stack's usage plans (per tier, not per account), and a key by the id that "
        "the lookup by its account's name returned; no account data is kept there",
    ),
)


# --------------------------------------------------------------------------------------------
# requests and parts


@dataclass(frozen=True)
class StoreRequest:
    """One request to a store, with who made it."""

    service: str  # botocore service name, or "opensearch"
    operation: str  # botocore operation name; for OpenSearch the HTTP method
    params: Mapping[str, Any]  # botocore: the caller's parameters; OpenSearch: path and body
    accounts: frozenset[str] | None  # the caller's account(s); None: bound to no account
    within: tuple[str, ...] | None = None  # blob-store calls: the keys / prefixes given
    answer: Any = None  # OpenSearch: the ids of the answer, for the ledger (tenancy_capture)
    where: str = ""  # which call sent it (for the messages)

    def describe(self) -> str:
        what = f"{self.params.get('path')}" if self.service == "opensearch" else ""
        caller = "control plane" if self.accounts is None else ",".join(sorted(self.accounts))
        return f"[{self.where or '-'}] {self.service} {self.operation} {what} (caller: {caller})"

    def to_json(self) -> str:
        return json.dumps(
            {
                "service": self.service,
                "operation": self.operation,
                "params": self.params,
                "answer": self.answer,
                "where": self.where,
                "accounts": None if self.accounts is None else sorted(self.accounts),
                "within": self.within,
            },
            default=str,
        )

    @classmethod
    def from_json(cls, line: str) -> StoreRequest:
        raw = json.loads(line)
        accounts = raw.get("accounts")
        within = raw.get("within")
        return cls(
            raw["service"],
            raw["operation"],
            raw["params"],
            None if accounts is None else frozenset(accounts),
            None if within is None else tuple(within),
            raw.get("answer"),
            raw.get("where", ""),
        )


def caller(tenant: str | None) -> frozenset[str] | None:
    return None if tenant is None else frozenset({tenant})


@dataclass(frozen=True)
class Part:
    text: str
    account: str | None = None
    required: bool = True
    problem: str | None = None  # a defect of its own, whatever it names
    scoped_key: str | None = None  # S3: the key or prefix, for the `within` check


@dataclass
class Ledger:
    """OpenSearch document ids known as one account's: from the bulk bodies that indexed them
    and the answers of searches restricted to one account. Feed it every request in order."""

    ids: dict[str, str] = field(default_factory=dict)

    def account_of(self, doc_id: Any) -> str | None:
        return self.ids.get(doc_id) if isinstance(doc_id, str) else None

    def accounts_of(self, ids: Iterable[Any]) -> frozenset[str] | None:
        found = [self.account_of(i) for i in ids]
        if not found or any(a is None for a in found):
            return None
        return frozenset(a for a in found if a is not None)

    def learn(self, req: StoreRequest) -> None:
        if req.service != "opensearch":
            return
        endpoint = api_of(str(req.params.get("path", "")))
        body, answer = req.params.get("body"), req.answer or {}
        if endpoint == "_bulk":
            self._learn_bulk(body, answer)
        elif endpoint in ("_search", "_msearch"):
            self._learn_searches(endpoint, body, answer)

    def _learn_bulk(self, body: Any, answer: Mapping[str, Any]) -> None:
        """The ids of every document a bulk request indexed, as its account's."""
        actions = list(_bulk_actions(ndjson(body)))
        items = answer.get("items") or []
        for n, (op, meta, doc) in enumerate(actions):
            if doc is None or not isinstance(doc.get("account"), str):
                continue
            account = doc["account"]
            for known in (
                doc.get("record_id"),
                meta.get("_id"),
                items[n][1] if n < len(items) and op in ("index", "create") else None,
            ):
                if isinstance(known, str):
                    self.ids[known] = account

    def _learn_searches(self, endpoint: str, body: Any, answer: Mapping[str, Any]) -> None:
        """The ids each search (of one _search or _msearch) answered, when its hits carry
        their account or the search is restricted to one account."""
        bodies = [body] if endpoint == "_search" else ndjson(body)[1::2]
        hit_lists = (
            [answer.get("hits")] if endpoint == "_search" else list(answer.get("responses") or [])
        )
        for search, hits in zip(bodies, hit_lists, strict=False):
            query = search.get("query") if isinstance(search, dict) else None
            scope = restriction(query, self)
            only = next(iter(scope)) if scope and len(scope) == 1 else None
            for doc_id, account in hits or []:
                owner = account or only
                if isinstance(doc_id, str) and owner:
                    self.ids[doc_id] = owner


def problems(req: StoreRequest, ledger: Ledger | None = None) -> list[str]:
    """What is wrong with `req` under the rule ([] when nothing)."""
    ledger = ledger if ledger is not None else Ledger()
    parts = list(parts_of(req, ledger))
    out: list[str] = []
    if not parts:
        out.append("names nothing: no key, prefix, query or payload to scope it")
    named: dict[str, str] = {}  # account -> the first part naming it
    for part in parts:
        problem = _part_problem(req, part, named)
        if problem is not None:
            out.append(problem)
    crossing = _crossing(req, named)
    if crossing is not None:
        out.append(crossing)
    return out


def _part_problem(req: StoreRequest, part: Part, named: dict[str, str]) -> str | None:
    """What is wrong with one part of `req`; records in `named` the account it names."""
    if part.problem is not None:
        return f"{part.text}: {part.problem}"
    if req.within is not None and part.scoped_key is not None:
        if part.account is not None:
            named.setdefault(part.account, part.text)
        if not part.scoped_key.startswith(req.within):
            return f"{part.text}: outside what the caller gave ({', '.join(req.within)})"
        return None
    if control_kind(req.service, part.text) is not None:
        return None
    if part.account is not None:
        named.setdefault(part.account, part.text)
        return None
    if part.required:
        return f"{part.text}: names no account and is no declared control-plane kind"
    return None


def _crossing(req: StoreRequest, named: Mapping[str, str]) -> str | None:
    """The accounts `req` names beyond its caller's (the control plane: more than one)."""
    if req.accounts is None:
        if len(named) > 1:
            return (
                f"names several accounts at once: {sorted(named)} "
                f"({'; '.join(named[a] for a in sorted(named))})"
            )
        return None
    others = sorted(set(named) - req.accounts)
    if others:
        return (
            f"names {others}, not the caller's {sorted(req.accounts)} "
            f"({'; '.join(named[a] for a in others)})"
        )
    return None


def violations(requests: Iterable[StoreRequest]) -> list[str]:
    """Every problem of `requests` (in the order they were sent), one line each."""
    ledger = Ledger()
    out: list[str] = []
    for req in requests:
        out.extend(f"{req.describe()}: {p}" for p in problems(req, ledger))
        ledger.learn(req)
    return out


def control_kind(service: str, text: str) -> ControlKind | None:
    return next((k for k in CONTROL_PLANE if k.matches(service, text)), None)


def parts_of(req: StoreRequest, ledger: Ledger) -> Iterator[Part]:
    params = req.params
    if req.service == "dynamodb":
        yield from _dynamodb_parts(req.operation, params)
    elif req.service == "s3":
        yield from _s3_parts(req.operation, params)
    elif req.service == "opensearch":
        yield from _opensearch_parts(req.operation, params, ledger)
    elif req.service == "sqs":
        yield from _sqs_parts(req.operation, params)
    elif req.service == "scheduler":
        yield from _scheduler_parts(req.operation, params)
    elif req.service == "apigateway" and req.operation in ("GetApiKeys", "CreateApiKey"):
        name = str(params.get("nameQuery") or params.get("name") or "")
        account = name.split("/", 1)[1] if "/" in name else None
        yield Part(f"api key name={name}", account)
    else:
        yield Part(f"op {req.operation}")


# --------------------------------------------------------------------------------------------
# DynamoDB

PARTITION_ATTRS = ("pk", "gsi1pk", "idle_pk")
_PARTITION_FORMS = (
    re.compile(r"ACCT#([^#]+)(?:#.*)?"),
    re.compile(r"SESS#([^#]+)#.*"),
    re.compile(r"AUDIT#([^#]+)#.*"),
)
_SORT_FORMS = (re.compile(r"ACCT#([^#]+)"), re.compile(r"[0-9.]+#SESS#([^#]+)#.*"))


def _unesc(part: str) -> str:
    return part.replace("%23", "#").replace("%25", "%")


def key_account(value: str, *, sort: bool = False) -> str | None:
    """The account a key value names (`ACCT#{a}...`, `SESS#{a}#...`; sort keys: the accounts
    listing's `ACCT#{a}`, an outbox entry's `{stamp}#SESS#{a}#...`), else None."""
    for form in _SORT_FORMS if sort else _PARTITION_FORMS:
        m = form.fullmatch(value)
        if m:
            return _unesc(m.group(1))
    return None


def _s_value(value: Any) -> str | None:
    if isinstance(value, dict) and isinstance(value.get("S"), str):
        return str(value["S"])
    return None


def _key_parts(item: Mapping[str, Any]) -> Iterator[Part]:
    if "pk" not in item:  # another table's item (the harness's idempotency table)
        found = _s_value(item.get("id"))
        yield Part(f"key id={found}" if found is not None else f"key {','.join(sorted(item))}")
        return
    for attr, value in item.items():
        text = _s_value(value)
        if text is None:
            continue
        if attr == "pk":
            yield Part(f"partition {text}", key_account(text))
        elif attr in PARTITION_ATTRS:
            yield Part(f"partition {text}", key_account(text), required=False)
        elif attr in ("sk", "gsi1sk"):
            yield Part(f"{attr} {text}", key_account(text, sort=True), required=False)
        elif attr == "account_id":
            yield Part(f"account_id {text}", text, required=False)


_COMPARE = re.compile(r"(#?\w+)\s*(?:=|<>|<=|>=|<|>|BETWEEN)\s*(:\w+)", re.IGNORECASE)
_FUNCTION = re.compile(r"\w+\(\s*(#?\w+)\s*,\s*(:\w+)\s*\)")


def _expression_parts(
    expression: str | None,
    names: Mapping[str, str],
    values: Mapping[str, Any],
    *,
    key_condition: bool,
) -> Iterator[Part]:
    if not expression:
        return
    for attr_ref, value_ref in [*_COMPARE.findall(expression), *_FUNCTION.findall(expression)]:
        attr = names.get(attr_ref, attr_ref)
        text = _s_value(values.get(value_ref))
        if text is None:
            continue
        if attr == "account_id":
            yield Part(f"account_id {text}", text, required=False)
        elif attr in PARTITION_ATTRS:
            yield Part(f"partition {text}", key_account(text), required=key_condition)
        else:
            account = key_account(text) or key_account(text, sort=True)
            yield Part(f"{attr} {text}", account, required=False)


def _write_parts(op: Mapping[str, Any]) -> Iterator[Part]:
    """One item operation: GetItem/PutItem/UpdateItem/DeleteItem parameters, a transaction's
    Put/Update/Delete/ConditionCheck, a batch's PutRequest/DeleteRequest."""
    if "Item" in op:
        yield from _key_parts(op["Item"])
    if "Key" in op:
        yield from _key_parts(op["Key"])
    names = op.get("ExpressionAttributeNames") or {}
    values = op.get("ExpressionAttributeValues") or {}
    for name in ("ConditionExpression", "FilterExpression", "UpdateExpression"):
        yield from _expression_parts(op.get(name), names, values, key_condition=False)


def _item_parts(operation: str, params: Mapping[str, Any]) -> Iterator[Part]:
    return _write_parts(params)


def _query_or_scan_parts(operation: str, params: Mapping[str, Any]) -> Iterator[Part]:
    if operation == "Scan" or not params.get("KeyConditionExpression"):
        yield Part(f"op {operation} of {params.get('TableName')} without a key condition")
    names = params.get("ExpressionAttributeNames") or {}
    values = params.get("ExpressionAttributeValues") or {}
    yield from _expression_parts(
        params.get("KeyConditionExpression"), names, values, key_condition=True
    )
    yield from _expression_parts(params.get("FilterExpression"), names, values, key_condition=False)
    if params.get("ExclusiveStartKey"):
        for part in _key_parts(params["ExclusiveStartKey"]):
            yield replace(part, required=False)


def _batch_get_parts(operation: str, params: Mapping[str, Any]) -> Iterator[Part]:
    for table in (params.get("RequestItems") or {}).values():
        for k in table.get("Keys", []):
            yield from _key_parts(k)


def _batch_write_parts(operation: str, params: Mapping[str, Any]) -> Iterator[Part]:
    for requests in (params.get("RequestItems") or {}).values():
        for request in requests:
            for op in request.values():
                yield from _write_parts(op)


def _transact_parts(operation: str, params: Mapping[str, Any]) -> Iterator[Part]:
    for entry in params.get("TransactItems", []):
        for op in entry.values():
            yield from _write_parts(op)


def _other_op(operation: str, params: Mapping[str, Any]) -> Iterator[Part]:
    yield Part(f"op {operation}")


# DynamoDB operation -> the parts of its parameters (any other: `op {operation}`).
_DYNAMODB_OPS: dict[str, Callable[[str, Mapping[str, Any]], Iterator[Part]]] = {
    "GetItem": _item_parts,
    "PutItem": _item_parts,
    "UpdateItem": _item_parts,
    "DeleteItem": _item_parts,
    "Query": _query_or_scan_parts,
    "Scan": _query_or_scan_parts,
    "BatchGetItem": _batch_get_parts,
    "BatchWriteItem": _batch_write_parts,
    "TransactWriteItems": _transact_parts,
    "TransactGetItems": _transact_parts,
}


def _dynamodb_parts(operation: str, params: Mapping[str, Any]) -> Iterator[Part]:
    return _DYNAMODB_OPS.get(operation, _other_op)(operation, params)


# --------------------------------------------------------------------------------------------
# S3


def blob_account(key: str) -> str | None:
    """The account of `{account}/{path}` (None without the `/` after the account)."""
    head, slash, _ = key.partition("/")
    return head if slash and head else None


def _s3_key(kind: str, key: str) -> Part:
    return Part(f"{kind} {key}", blob_account(key), scoped_key=key)


def _s3_parts(operation: str, params: Mapping[str, Any]) -> Iterator[Part]:
    if "Key" in params:
        yield _s3_key("key", str(params["Key"]))
    source = params.get("CopySource")
    if isinstance(source, dict) and "Key" in source:
        yield _s3_key("key", str(source["Key"]))
    elif isinstance(source, str):
        yield _s3_key("key", source.split("/", 1)[-1].split("?", 1)[0])
    for obj in (params.get("Delete") or {}).get("Objects", []):
        yield _s3_key("key", str(obj["Key"]))
    if operation in ("ListObjectsV2", "ListObjects", "ListObjectVersions"):
        yield _s3_key("prefix", str(params.get("Prefix", "")))
    if (
        "Key" not in params
        and source is None
        and "Delete" not in params
        and operation not in ("ListObjectsV2", "ListObjects", "ListObjectVersions")
    ):
        yield Part(f"op {operation}")


# --------------------------------------------------------------------------------------------
# SQS and Scheduler


def payload_account(body: Any) -> tuple[bool, str | None]:
    """(whether `body` is a JSON object, the account it carries): a job payload's `account`,
    or that of the `payload` of a schedule's {"kind", "payload"} envelope."""
    try:
        data = json.loads(body) if isinstance(body, str) else body
    except ValueError:
        return False, None
    if not isinstance(data, dict):
        return False, None
    account = data.get("account")
    inner = data.get("payload")
    if account is None and isinstance(inner, dict):
        account = inner.get("account")
    return True, account if isinstance(account, str) else None


def _message_part(body: Any) -> Part:
    _, account = payload_account(body)
    if account is None:
        return Part("message without account")
    return Part(f"message account={account}", account)


def _sqs_parts(operation: str, params: Mapping[str, Any]) -> Iterator[Part]:
    if operation == "SendMessage":
        yield _message_part(params.get("MessageBody"))
    elif operation == "SendMessageBatch":
        for entry in params.get("Entries", []):
            yield _message_part(entry.get("MessageBody"))
    else:
        yield Part(f"op {operation}")


def _scheduler_parts(operation: str, params: Mapping[str, Any]) -> Iterator[Part]:
    target = params.get("Target")
    if operation in ("CreateSchedule", "UpdateSchedule") and isinstance(target, dict):
        _, account = payload_account(target.get("Input"))
        yield Part(f"schedule input account={account}", account)
    else:
        yield Part(f"op {operation}")


# --------------------------------------------------------------------------------------------
# OpenSearch

_DATA_ENDPOINTS = (
    "_search",
    "_count",
    "_delete_by_query",
    "_msearch",
    "_bulk",
    "_update_by_query",
    "_doc",
    "_update",
    "_mget",
    "_source",
)


def api_of(path: str) -> str | None:
    """The document API a path calls (`_search`, `_bulk`, `_doc/{id}`, ...), else None."""
    segments = [s for s in path.split("?", 1)[0].split("/") if s]
    for segment in segments[-2:][::-1]:
        if segment in _DATA_ENDPOINTS:
            return segment
    return None


def ndjson(body: Any) -> list[Any]:
    """The lines of an _msearch / _bulk body (text, bytes or a list of objects)."""
    if isinstance(body, bytes):
        body = body.decode("utf-8")
    if isinstance(body, str):
        return [json.loads(line) for line in body.splitlines() if line.strip()]
    if isinstance(body, dict):
        return [body]
    return list(body or [])


def plain(body: Any) -> Any:
    """A single JSON body (text, bytes or an object) as an object."""
    if isinstance(body, bytes):
        body = body.decode("utf-8")
    if isinstance(body, str):
        try:
            return json.loads(body)
        except ValueError:
            return body
    return body


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def restriction(query: Any, ledger: Ledger) -> frozenset[str] | None:
    """The accounts `query` provably keeps to, else None."""
    if not isinstance(query, dict) or len(query) != 1:
        return None
    kind, spec = next(iter(query.items()))
    if not isinstance(spec, dict):
        return None
    rule = _RESTRICTIONS.get(kind)
    return rule(spec, ledger) if rule is not None else None


def _term(spec: dict[str, Any], ledger: Ledger) -> frozenset[str] | None:
    if len(spec) != 1:
        return None
    fld, value = next(iter(spec.items()))
    value = value.get("value") if isinstance(value, dict) else value
    if fld == "account" and isinstance(value, str):
        return frozenset({value})
    if fld in ("record_id", "_id"):
        return ledger.accounts_of([value])
    return None


def _terms(spec: dict[str, Any], ledger: Ledger) -> frozenset[str] | None:
    if len(spec) != 1:
        return None
    fld, values = next(iter(spec.items()))
    if not isinstance(values, list) or not values:
        return None
    if fld == "account" and all(isinstance(v, str) for v in values):
        return frozenset(values)
    return ledger.accounts_of(values) if fld in ("record_id", "_id") else None


def _ids(spec: dict[str, Any], ledger: Ledger) -> frozenset[str] | None:
    return ledger.accounts_of(_as_list(spec.get("values")))


def _bool(spec: dict[str, Any], ledger: Ledger) -> frozenset[str] | None:
    # Any required clause that keeps to accounts bounds the whole; else every `should`
    # alternative must, when at least one of them has to match.
    required = _as_list(spec.get("filter")) + _as_list(spec.get("must"))
    known = [r for r in (restriction(q, ledger) for q in required) if r is not None]
    if known:
        return frozenset.intersection(*known)
    shoulds = _as_list(spec.get("should"))
    minimum = spec.get("minimum_should_match", 0 if required else 1)
    if shoulds and isinstance(minimum, int) and minimum >= 1:
        return _union_of_all([restriction(q, ledger) for q in shoulds])
    return None


def _knn(spec: dict[str, Any], ledger: Ledger) -> frozenset[str] | None:
    if len(spec) != 1:
        return None
    clause = next(iter(spec.values()))
    return restriction(clause.get("filter"), ledger) if isinstance(clause, dict) else None


def _hybrid(spec: dict[str, Any], ledger: Ledger) -> frozenset[str] | None:
    return _union_of_all([restriction(q, ledger) for q in _as_list(spec.get("queries"))])


def _constant_score(spec: dict[str, Any], ledger: Ledger) -> frozenset[str] | None:
    return restriction(spec.get("filter"), ledger)


def _union_of_all(each: list[frozenset[str] | None]) -> frozenset[str] | None:
    """The accounts of alternatives that all keep to accounts, else None."""
    if each and all(r is not None for r in each):
        return frozenset().union(*(r for r in each if r is not None))
    return None


# Query kind -> the accounts a query of that kind keeps to (any other kind: None).
_RESTRICTIONS: dict[str, Callable[[dict[str, Any], Ledger], frozenset[str] | None]] = {
    "term": _term,
    "terms": _terms,
    "ids": _ids,
    "bool": _bool,
    "knn": _knn,
    "hybrid": _hybrid,
    "constant_score": _constant_score,
}


def _account_mentions(node: Any) -> Iterator[Part]:
    """Every query clause on the `account` field, wherever it is (a `must_not` too)."""
    if isinstance(node, list):
        for item in node:
            yield from _account_mentions(item)
        return
    if not isinstance(node, dict):
        return
    for kind, spec in node.items():
        if isinstance(spec, dict) and "account" in spec and kind not in ("_source",):
            values = spec["account"]
            values = values.get("value") if isinstance(values, dict) else values
            if kind in ("term", "terms"):
                for value in _as_list(values):
                    yield Part(f"account {value}", str(value), required=False)
            else:
                yield Part(
                    f"{kind} on account",
                    problem="the account field is only ever matched exactly (term, terms)",
                )
        yield from _account_mentions(spec)


def _query_parts(search: Any, ledger: Ledger) -> Iterator[Part]:
    query = search.get("query") if isinstance(search, dict) else None
    scope = restriction(query, ledger)
    if scope is None:
        yield Part("query not restricted to an account")
    else:
        for account in sorted(scope):
            yield Part(f"account {account}", account)
    yield from _account_mentions(query)


def _bulk_actions(lines: Sequence[Any]) -> Iterator[tuple[str, dict[str, Any], Any]]:
    n = 0
    while n < len(lines):
        action = lines[n]
        op, meta = next(iter(action.items())) if isinstance(action, dict) and action else ("?", {})
        has_source = op in ("index", "create", "update")
        yield (
            op,
            meta if isinstance(meta, dict) else {},
            lines[n + 1] if has_source and n + 1 < len(lines) else None,
        )
        n += 2 if has_source else 1


def record_id(account: str, uri: str, level: int, section: int) -> str:
    """What a record's id must be: derived from its account (as opensearch/requests.py makes it,
    from the normalised uri a document stores)."""
    key = json.dumps([account, uri, int(level), int(section)], ensure_ascii=False)
    return hashlib.sha256(key.encode()).hexdigest()


def _bulk_parts(body: Any, ledger: Ledger) -> Iterator[Part]:
    for op, meta, doc in _bulk_actions(ndjson(body)):
        if op == "delete":
            doc_id = meta.get("_id")
            account = ledger.account_of(doc_id)
            yield Part(
                f"delete of _id {doc_id}",
                account,
                problem=None if account else "an id no request named as an account's",
            )
            continue
        if op not in ("index", "create") or not isinstance(doc, dict):
            yield Part(f"bulk {op}", problem="not a document index or delete")
            continue
        account = doc.get("account")
        if not isinstance(account, str) or not account:
            yield Part("document without account", problem="every document names its account")
            continue
        yield Part(f"account {account}", account)
        try:
            expected = record_id(account, doc["uri"], doc["level"], doc["section"])
        except (KeyError, TypeError, ValueError):
            expected = None
        if doc.get("record_id") != expected:
            yield Part(
                f"record_id {doc.get('record_id')}",
                problem="not derived from the document's account, uri, level, section",
            )
        if "_id" in meta and meta["_id"] != expected:
            yield Part(f"_id {meta['_id']}", problem="not derived from the document's account")


def _opensearch_parts(method: str, params: Mapping[str, Any], ledger: Ledger) -> Iterator[Part]:
    path = str(params.get("path", ""))
    body = params.get("body")
    endpoint = api_of(path)
    if endpoint in ("_search", "_count", "_delete_by_query"):
        yield from _query_parts(plain(body), ledger)
    elif endpoint == "_msearch":
        searches = ndjson(body)[1::2]
        if not searches:
            yield Part("empty _msearch")
        for search in searches:
            yield from _query_parts(search, ledger)
    elif endpoint == "_bulk":
        yield from _bulk_parts(body, ledger)
    elif endpoint is not None:
        yield Part(f"{method} {path}", problem=f"{endpoint} is not a request the adapter makes")
    else:
        yield Part(f"op {method.upper()} {path.split('?', 1)[0]}")
