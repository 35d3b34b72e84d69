"""The tenant-scoping rule of tests/support/tenancy.py, on requests built by the adapters' own
key and body builders: what names an account, what is declared control plane, what fails."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from skald.adapters.aws.dynamo import keys as k
from skald.adapters.aws.opensearch.filters import filter_clauses
from skald.adapters.aws.opensearch.requests import (
    bm25_query,
    bulk_body,
    delete_uris_query,
    hybrid_query,
    knn_query,
    msearch_body,
    older_versions_query,
    record_id,
)
from skald.ports import IndexFilter, IndexRecord
from tests.support import tenancy
from tests.support.tenancy import CONTROL_PLANE, StoreRequest, caller, problems, violations
from tests.support.tenancy_capture import slim, slim_body

ACME = caller("acme")


def req(
    service: str,
    operation: str,
    params: dict[str, Any],
    accounts: frozenset[str] | None = ACME,
    **kw: Any,
) -> StoreRequest:
    return StoreRequest(service, operation, params, accounts, **kw)


def dynamo(operation: str, accounts: frozenset[str] | None = ACME, **params: Any) -> StoreRequest:
    return req("dynamodb", operation, {"TableName": "t", **params}, accounts)


def key(pk: str, sk: str = k.META) -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": sk}}


def os_req(
    method: str,
    path: str,
    body: Any = None,
    accounts: frozenset[str] | None = ACME,
    answer: Any = None,
) -> StoreRequest:
    return req(
        "opensearch", method, {"path": path, "body": slim_body(path, body)}, accounts, answer=answer
    )


def fails(request: StoreRequest, fragment: str) -> None:
    found = problems(request)
    assert any(fragment in p for p in found), found


def passes(request: StoreRequest) -> None:
    assert problems(request) == []


# -- DynamoDB -----------------------------------------------------------------------------------


def test_a_key_of_the_callers_account_passes_and_one_of_another_fails() -> None:
    passes(dynamo("GetItem", Key=key(k.session_pk("acme", "alice", "s1"))))
    passes(dynamo("GetItem", Key=key(k.account_pk("acme"), k.user_sk("alice"))))
    fails(
        dynamo("GetItem", Key=key(k.session_pk("beta", "alice", "s1"))),
        "names ['beta'], not the caller's ['acme']",
    )
    fails(dynamo("GetItem", Key=key(k.sessions_listing_pk("beta"))), "names ['beta']")


def test_escaped_ids_name_the_account_they_escape() -> None:
    pk = k.session_pk("ac#me", "u", "s")
    assert tenancy.key_account(pk) == "ac#me"
    passes(dynamo("GetItem", caller("ac#me"), Key=key(pk)))
    fails(dynamo("GetItem", Key=key(pk)), "names ['ac#me']")


def test_control_plane_kinds_pass_for_any_caller() -> None:
    for pk in (
        k.key_guard_pk("abc"),
        k.task_pk("t1"),
        k.ACCOUNTS_PK,
        *k.idle_shard_pks(),
        *k.outbox_shard_pks(),
        "QUEUE#semantic",
    ):
        passes(dynamo("GetItem", Key=key(pk)))
        passes(dynamo("GetItem", None, Key=key(pk)))


def test_an_unnamed_partition_fails() -> None:
    fails(
        dynamo("GetItem", Key=key("WIDGET#1")),
        "partition WIDGET#1: names no account and is no declared control-plane kind",
    )
    fails(dynamo("Scan"), "without a key condition")


def test_a_transaction_is_judged_item_by_item() -> None:
    account_item = {**key(k.account_pk("acme")), "account_id": {"S": "acme"}}
    listing = {**key(k.ACCOUNTS_PK, k.account_listing_sk("acme")), "account_id": {"S": "acme"}}
    passes(
        dynamo(
            "TransactWriteItems",
            TransactItems=[{"Put": {"Item": account_item}}, {"Put": {"Item": listing}}],
        )
    )
    other = {**key(k.ACCOUNTS_PK, k.account_listing_sk("beta"))}
    fails(
        dynamo(
            "TransactWriteItems",
            TransactItems=[{"Put": {"Item": account_item}}, {"Put": {"Item": other}}],
        ),
        "names ['beta']",
    )


def test_an_item_names_its_account_id_and_its_index_keys() -> None:
    task = {
        **key(k.task_pk("t1")),
        "gsi1pk": {"S": k.tasks_gsi1pk("acme")},
        "account_id": {"S": "acme"},
    }
    passes(dynamo("PutItem", Item=task))
    fails(dynamo("PutItem", Item={**task, "account_id": {"S": "beta"}}), "names ['beta']")
    fails(
        dynamo("PutItem", Item={**task, "gsi1pk": {"S": k.tasks_gsi1pk("beta")}}), "names ['beta']"
    )
    outbox = k.outbox_sk(1.0, "beta", "u", "s", 1)
    fails(
        dynamo(
            "UpdateItem",
            Key=key(k.session_pk("acme", "u", "s"), k.archive_sk(1)),
            UpdateExpression="SET #g = :g",
            ExpressionAttributeNames={"#g": "gsi1sk"},
            ExpressionAttributeValues={":g": {"S": outbox}},
        ),
        "names ['beta']",
    )


def test_a_query_names_its_partition_its_start_key_and_its_filter_values() -> None:
    cond = "#pk = :pk AND begins_with(#sk, :sk)"
    names = {"#pk": "pk", "#sk": "sk", "#a": "account_id"}
    values = {":pk": {"S": k.sessions_listing_pk("acme")}, ":sk": {"S": "USER#alice#SESS#"}}
    passes(
        dynamo(
            "Query",
            KeyConditionExpression=cond,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
        )
    )
    fails(
        dynamo(
            "Query",
            KeyConditionExpression=cond,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues={**values, ":pk": {"S": "LISTING"}},
        ),
        "partition LISTING: names no account",
    )
    fails(
        dynamo(
            "Query",
            KeyConditionExpression=cond,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
            ExclusiveStartKey=key(k.session_pk("beta", "u", "s")),
        ),
        "names ['beta']",
    )
    fails(
        dynamo(
            "Query",
            KeyConditionExpression=cond,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues={**values, ":a": {"S": "beta"}},
            FilterExpression="#a = :a",
        ),
        "names ['beta']",
    )
    gsi = {":pk": {"S": k.tasks_gsi1pk("beta")}}
    fails(
        dynamo(
            "Query",
            IndexName="gsi1",
            KeyConditionExpression="#pk = :pk",
            ExpressionAttributeNames={"#pk": "gsi1pk"},
            ExpressionAttributeValues=gsi,
        ),
        "names ['beta']",
    )


def test_the_control_plane_may_name_one_account_per_request_not_two() -> None:
    passes(dynamo("GetItem", None, Key=key(k.account_pk("beta"), k.user_sk("u"))))
    fails(
        dynamo(
            "BatchGetItem",
            None,
            RequestItems={
                "t": {
                    "Keys": [
                        key(k.session_pk("acme", "u", "s")),
                        key(k.session_pk("beta", "u", "s")),
                    ]
                }
            },
        ),
        "names several accounts at once: ['acme', 'beta']",
    )


def test_table_setup_is_control_plane_and_other_tables_need_a_declared_kind() -> None:
    passes(dynamo("CreateTable", None))
    passes(dynamo("PutItem", None, Item={"id": {"S": "skald-memory#abc"}}))
    fails(dynamo("PutItem", Item={"name": {"S": "x"}}), "key name: names no account")


# -- S3 -----------------------------------------------------------------------------------------


def s3(operation: str, accounts: frozenset[str] | None = ACME, **params: Any) -> StoreRequest:
    return req("s3", operation, {"Bucket": "b", **params}, accounts)


def test_a_key_or_prefix_names_its_first_segment() -> None:
    passes(s3("GetObject", Key="acme/resources/a.md"))
    passes(s3("ListObjectsV2", Prefix="acme/resources/", Delimiter="/"))
    fails(s3("PutObject", Key="beta/resources/a.md"), "names ['beta']")
    fails(
        s3("CopyObject", Key="acme/a.md", CopySource={"Bucket": "b", "Key": "beta/a.md"}),
        "names ['beta']",
    )
    fails(
        s3("DeleteObjects", Delete={"Objects": [{"Key": "acme/a"}, {"Key": "beta/a"}]}),
        "names ['beta']",
    )


def test_a_prefix_without_the_accounts_slash_or_none_at_all_names_nobody() -> None:
    fails(s3("ListObjectsV2", Prefix="acme"), "prefix acme: names no account")
    fails(s3("ListObjectsV2"), "prefix : names no account")


def test_job_payloads_watches_and_probes_are_declared_s3_kinds() -> None:
    passes(s3("PutObject", Key="_jobs/semantic/j1.json"))
    passes(s3("ListObjectsV2", Prefix="_watches/"))
    passes(s3("HeadObject", Key="_health/probe"))
    passes(s3("CreateBucket", None))
    fails(
        s3("PutObject", Key="_other/x"),
        "names ['_other'], not the caller's ['acme'] (key _other/x)",
    )


def test_a_blob_call_stays_within_what_it_was_given() -> None:
    given = req("s3", "ListObjectsV2", {"Prefix": "acme/b/"}, ACME, within=("acme/b/",))
    passes(given)
    fails(replace_params(given, Prefix="acme/"), "outside what the caller gave (acme/b/)")
    everything = req("s3", "ListObjectsV2", {"Prefix": ""}, None, within=("",))
    passes(everything)


def replace_params(request: StoreRequest, **params: Any) -> StoreRequest:
    return StoreRequest(
        request.service,
        request.operation,
        {**request.params, **params},
        request.accounts,
        request.within,
    )


# -- OpenSearch ---------------------------------------------------------------------------------


def acme_filters() -> list[dict[str, Any]]:
    return filter_clauses("acme", IndexFilter(scopes=["viking://resources"]))


def test_a_search_must_be_restricted_to_the_callers_account() -> None:
    passes(os_req("POST", "/skald-records/_search", bm25_query("tea", acme_filters(), 10)))
    passes(os_req("POST", "/skald-records/_search", knn_query([1.0] * 16, 5, acme_filters())))
    passes(
        os_req(
            "POST",
            "/skald-records/_search",
            hybrid_query("tea", [1.0] * 16, acme_filters(), 10, 10),
        )
    )
    passes(os_req("POST", "/skald-records/_count", {"query": {"bool": {"filter": acme_filters()}}}))
    fails(
        os_req(
            "POST",
            "/skald-records/_search",
            bm25_query("tea", filter_clauses("beta", IndexFilter()), 10),
        ),
        "names ['beta']",
    )
    fails(
        os_req("POST", "/skald-records/_search", {"query": {"match_all": {}}}),
        "query not restricted to an account",
    )


def test_an_account_term_that_does_not_restrict_is_no_restriction() -> None:
    only_excluded = {"query": {"bool": {"must_not": [{"term": {"account": "beta"}}]}}}
    fails(os_req("POST", "/skald-records/_search", only_excluded), "not restricted")
    fails(os_req("POST", "/skald-records/_search", only_excluded), "names ['beta']")
    half = hybrid_query("tea", [1.0] * 16, acme_filters(), 10, 10)
    half["query"]["hybrid"]["queries"][1]["knn"]["vector"]["filter"] = {"match_all": {}}
    fails(os_req("POST", "/skald-records/_search", half), "not restricted")
    widened = {"query": {"bool": {"filter": [{"prefix": {"account": "ac"}}]}}}
    fails(os_req("POST", "/skald-records/_search", widened), "only ever matched exactly")
    both = delete_uris_query("acme", ["viking://resources/a.md"])
    both["query"]["bool"]["filter"][0] = {"terms": {"account": ["acme", "beta"]}}
    fails(os_req("POST", "/skald-records/_delete_by_query", both), "names ['beta']")


def test_every_search_of_an_msearch_is_restricted() -> None:
    good = bm25_query("tea", acme_filters(), 10)
    body = msearch_body("skald-records", [good, good])
    passes(os_req("POST", "/_msearch", "".join(json.dumps(x) + "\n" for x in body)))
    body = msearch_body("skald-records", [good, {"query": {"match_all": {}}}])
    fails(os_req("POST", "/_msearch", body), "not restricted")


def rec(account: str, uri: str = "viking://resources/a.md") -> IndexRecord:
    return IndexRecord(
        account=account,
        uri=uri,
        level=2,
        context_type="resource",
        parent="viking://resources",
        ancestors=["viking://resources"],
        text="tea",
        vector=[1.0] * 16,
    )


def bulk_text(actions: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(a) + "\n" for a in actions)


def test_every_bulk_document_names_the_account_and_its_id_derives_from_it() -> None:
    body = bulk_body(
        "skald-records",
        [rec("acme"), rec("acme", "viking://resources/b.md")],
        dimension=16,
        stamp=1,
    )
    passes(os_req("POST", "/_bulk", bulk_text(body)))
    mixed = bulk_body("skald-records", [rec("acme"), rec("beta")], dimension=16, stamp=1)
    fails(os_req("POST", "/_bulk", bulk_text(mixed)), "names ['beta']")
    forged = bulk_body("skald-records", [rec("acme")], dimension=16, stamp=1)
    forged[0]["index"]["_id"] = record_id("beta", "viking://resources/a.md", 2, 0)
    fails(os_req("POST", "/_bulk", bulk_text(forged)), "not derived from the document's account")
    forged = bulk_body("skald-records", [rec("acme")], dimension=16, stamp=1, serverless=True)
    forged[1]["record_id"] = "x"
    fails(os_req("POST", "/_bulk", bulk_text(forged)), "not derived from the document's account")
    del forged[1]["account"]
    fails(os_req("POST", "/_bulk", bulk_text(forged)), "every document names its account")


def test_the_rules_record_id_is_the_adapters() -> None:
    assert tenancy.record_id("acme", "viking://resources/a.md", 2, 3) == record_id(
        "acme", "viking://resources/a.md", 2, 3
    )


def test_a_delete_by_id_needs_an_id_known_as_the_callers() -> None:
    """Serverless: ids come back from a search restricted to the account, then are deleted
    in bulk; the superseded copies of just-written records are found by their record ids."""
    search = os_req(
        "POST",
        "/skald-records/_search",
        {"query": {"bool": {"filter": acme_filters()}}, "_source": False},
        answer={"hits": [["gen-1", None], ["gen-2", None]]},
    )
    delete = os_req(
        "POST", "/_bulk", bulk_text([{"delete": {"_id": "gen-1"}}, {"delete": {"_id": "gen-2"}}])
    )
    assert violations([search, delete]) == []
    assert any("an id no request named" in v for v in violations([delete]))
    stranger = os_req(
        "POST",
        "/skald-records/_search",
        {"query": {"bool": {"filter": filter_clauses("beta", IndexFilter())}}},
        accounts=caller("beta"),
        answer={"hits": [["gen-1", None]]},
    )
    assert any("names ['beta']" in v for v in violations([stranger, delete]))
    written = os_req(
        "POST",
        "/_bulk",
        bulk_text(
            bulk_body("skald-records", [rec("acme")], dimension=16, stamp=5, serverless=True)
        ),
        answer={"items": [["index", "gen-9"]]},
    )
    older = os_req(
        "POST",
        "/skald-records/_search",
        older_versions_query([record_id("acme", "viking://resources/a.md", 2, 0)], 5),
    )
    assert violations([written, older]) == []
    assert any("not restricted" in v for v in violations([older]))


def test_index_setup_is_control_plane_and_other_apis_are_not() -> None:
    for method, path in (
        ("PUT", "/skald-records-v1"),
        ("HEAD", "/skald-records"),
        ("GET", "/_alias/skald-records"),
        ("POST", "/_aliases"),
        ("PUT", "/_search/pipeline/skald-hybrid"),
        ("POST", "/skald-records/_refresh"),
        ("GET", "/skald-records/_mapping"),
    ):
        passes(os_req(method, path, None, accounts=None))
        passes(os_req(method, path, None))
    fails(os_req("GET", "/_cat/indices"), "op GET /_cat/indices: names no account")
    fails(os_req("GET", "/skald-records/_doc/abc"), "not a request the adapter makes")


# -- SQS and Scheduler --------------------------------------------------------------------------


def test_a_message_names_the_account_of_its_payload() -> None:
    body = json.dumps({"account": "acme", "uris": ["viking://resources/a.md"]})
    passes(req("sqs", "SendMessage", {"QueueUrl": "q", "MessageBody": body}))
    other = json.dumps({"account": "beta"})
    fails(req("sqs", "SendMessage", {"QueueUrl": "q", "MessageBody": other}), "names ['beta']")
    batch = {
        "QueueUrl": "q",
        "Entries": [{"Id": "1", "MessageBody": body}, {"Id": "2", "MessageBody": other}],
    }
    fails(req("sqs", "SendMessageBatch", batch), "names ['beta']")
    envelope = json.dumps({"kind": "auto_commit", "payload": {"account": "beta"}})
    fails(req("sqs", "SendMessage", {"QueueUrl": "q", "MessageBody": envelope}), "names ['beta']")
    sweep = json.dumps({"before": 5})
    passes(req("sqs", "SendMessage", {"QueueUrl": "q", "MessageBody": sweep}))
    passes(req("sqs", "ReceiveMessage", {"QueueUrl": "q"}, None))


def test_a_schedule_names_the_account_of_its_input() -> None:
    def schedule(account: str) -> StoreRequest:
        return req(
            "scheduler",
            "CreateSchedule",
            {
                "Name": "n",
                "Target": {
                    "Arn": "a",
                    "Input": json.dumps({"account": account, "session_id": "s"}),
                },
            },
        )

    passes(schedule("acme"))
    fails(schedule("beta"), "names ['beta']")
    passes(req("scheduler", "DeleteSchedule", {"Name": "n"}))


# -- the list and the records ---------------------------------------------------------------------


def test_every_declared_kind_has_a_reason_and_a_valid_pattern() -> None:
    for kind in CONTROL_PLANE:
        assert kind.reason.strip() and kind.service, kind
        re.compile(kind.pattern)


def test_a_request_survives_its_json_line() -> None:
    request = req(
        "s3",
        "ListObjectsV2",
        {"Prefix": "acme/"},
        ACME,
        within=("acme/",),
        where="S3BlobStore.list",
    )
    assert StoreRequest.from_json(request.to_json()) == request
    control = req("s3", "ListObjectsV2", {"Prefix": "_watches/"}, None)
    assert StoreRequest.from_json(control.to_json()) == control


@pytest.mark.parametrize("body", [[0.5] * 384, {"vector": [0.5] * 384, "k": 3}])
def test_vectors_are_left_out_of_captured_bodies(body: Any) -> None:
    assert "0.5" not in json.dumps(slim(body))
