"""Every request the OpenSearch adapter sends, captured at the transport.

`RecordingTransport` is an opensearch-py Transport that keeps (method, path, query params,
body) of each request before sending it to osmem-server. osmem has no k-NN engine and no
search pipelines, so for those requests the transport answers itself: a k-NN or hybrid search
gets the records its filter selects (a plain filtered search on osmem, scored 0.5), a pipeline
PUT is acknowledged. The adapter then goes on exactly as against a cluster, and its follow-up
requests (tie expansion, the BM25 side of a pipeline hybrid) are captured too.

`drive_adapter` calls every public method of OpenSearchIndex, every search mode with every
filter kind the adapter can produce, on a domain and in serverless mode.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from opensearchpy import OpenSearch, Transport

from skald.adapters.aws.opensearch.index import OpenSearchIndex
from skald.ports import IndexFilter, IndexQuery, IndexRecord
from tests.support.tenancy_capture import answer_digest

# Options opensearch-py consumes itself: they never reach the cluster.
CLIENT_SIDE = frozenset({"request_timeout", "ignore", "opaque_id"})
INDEX = "skald-records"
PIPELINE = "skald-hybrid"
DIM = 8
ACCOUNT = "acme"
T0 = 1_700_000_000.0


@dataclass(frozen=True)
class Captured:
    method: str
    path: str
    params: dict[str, Any]
    body: Any  # a dict, or the NDJSON text of _bulk / _msearch
    label: str  # the adapter call that sent it
    answer: Any = None  # the ids of the answer (tests/support/tenancy.py answer_digest)


class RecordingTransport(Transport):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.captured: list[Captured] = []
        self.label = ""

    def perform_request(
        self,
        method: str,
        url: str,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        timeout: Any = None,
        ignore: Any = (),
        headers: Any = None,
    ) -> Any:
        # The client has already turned values into query-string text (bytes or str).
        sent = {
            k: v.decode() if isinstance(v, bytes) else v
            for k, v in (params or {}).items()
            if k not in CLIENT_SIDE
        }
        path = url.split("?", 1)[0]
        self.captured.append(Captured(method.upper(), path, sent, _plain(body), self.label))
        answer = self._stand_in(method, url, body)
        if answer is None:
            answer = super().perform_request(
                method,
                url,
                params=params,
                body=body,
                timeout=timeout,
                ignore=ignore,
                headers=headers,
            )
        self.captured[-1] = replace(self.captured[-1], answer=answer_digest(path, answer))
        return answer

    def _stand_in(self, method: str, url: str, body: Any) -> Any:
        path = url.split("?", 1)[0]
        if method.upper() == "PUT" and path.startswith("/_search/pipeline/"):
            return {"acknowledged": True}
        if path.endswith("/_msearch") or path == "/_msearch":
            lines = _ndjson(body)
            if any(_knn_of(b) for b in lines[1::2]):
                responses = [
                    self._search_or_stand_in(h.get("index", INDEX), b)
                    for h, b in zip(lines[::2], lines[1::2], strict=True)
                ]
                return {"took": 1, "responses": [{**r, "status": 200} for r in responses]}
            return None
        if path.endswith("/_search") and isinstance(_plain(body), dict) and _knn_of(_plain(body)):
            return self._search_or_stand_in(path.strip("/").split("/")[0], _plain(body))
        return None

    def _search_or_stand_in(self, index: str, body: dict[str, Any]) -> Any:
        knn = _knn_of(body)
        if knn is None:
            return super().perform_request("POST", f"/{index}/_search", body=body)
        query = knn.get("filter") or {"match_all": {}}
        plain = {"size": knn.get("k", body.get("size", 10)), "query": query}
        if "_source" in body:
            plain["_source"] = body["_source"]
        found = super().perform_request("POST", f"/{index}/_search", body=plain)
        for hit in found["hits"]["hits"]:
            hit["_score"] = 0.5
        return found


def _plain(body: Any) -> Any:
    if isinstance(body, bytes):
        body = body.decode("utf-8")
    if isinstance(body, str):
        lines = [line for line in body.splitlines() if line.strip()]
        if len(lines) == 1:
            try:
                return json.loads(lines[0])
            except ValueError:
                return body
    return body


def _ndjson(body: Any) -> list[dict[str, Any]]:
    if isinstance(body, bytes):
        body = body.decode("utf-8")
    if isinstance(body, str):
        return [json.loads(line) for line in body.splitlines() if line.strip()]
    return list(body)


def _knn_of(body: dict[str, Any]) -> dict[str, Any] | None:
    """The first k-NN clause of a search body (inside `hybrid` too), or None."""

    def walk(node: Any) -> dict[str, Any] | None:
        if isinstance(node, dict):
            knn = node.get("knn")
            if isinstance(knn, dict) and knn:
                clause = next(iter(knn.values()))
                if isinstance(clause, dict):
                    return clause
            for value in node.values():
                found = walk(value)
                if found is not None:
                    return found
        elif isinstance(node, list):
            for value in node:
                found = walk(value)
                if found is not None:
                    return found
        return None

    return walk(body.get("query"))


# -- the drive -----------------------------------------------------------------------------

TREE = {
    "op": "and",
    "conds": [
        {
            "op": "or",
            "conds": [
                {"op": "must", "field": "context_type", "conds": ["resource", "memory"]},
                {"op": "must", "field": "uri", "conds": ["viking://resources/docs/a.md"]},
            ],
        },
        {"op": "must_not", "field": "tags", "conds": ["draft=1"]},
        {"op": "must", "field": "level", "conds": [2, 1.5]},
        {"op": "must", "field": "created_at", "conds": [T0]},
        {"op": "range", "field": "level", "gte": 0, "lt": 3},
        {"op": "range", "field": "updated_at", "gt": T0 - 10, "lte": T0 + 10.5},
        {"op": "prefix", "field": "parent", "prefix": "viking://resources/"},
        {"op": "prefix", "field": "tags", "prefix": "lang="},
    ],
}

# Every kind of clause filter_clauses can produce, on its own and all together.
FILTERS: dict[str, IndexFilter] = {
    "account only": IndexFilter(),
    "scopes": IndexFilter(scopes=["viking://resources/docs", "viking://user/alice/memories"]),
    "scope root": IndexFilter(scopes=["viking://"]),
    "exclude scopes": IndexFilter(exclude_scopes=["viking://resources/docs/old"]),
    "exclude root": IndexFilter(exclude_scopes=["viking://"]),
    "context types": IndexFilter(context_types=["resource", "skill"]),
    "no context type": IndexFilter(context_types=[]),
    "levels": IndexFilter(levels=[0, 2]),
    "no level": IndexFilter(levels=[]),
    "tags": IndexFilter(tags_all=["lang=py", "kind=doc"]),
    "updated window": IndexFilter(since=T0 - 5, until=T0 + 5),
    "created since": IndexFilter(time_field="created_at", since=T0 - 0.25),
    "tree": IndexFilter(tree=TREE),
    "everything": IndexFilter(
        scopes=["viking://resources"],
        exclude_scopes=["viking://x"],
        context_types=["resource"],
        levels=[2],
        tags_all=["lang=py"],
        since=T0 - 1,
        until=T0 + 1,
        tree=TREE,
    ),
}


def _record(uri: str, level: int = 2, section: int = 0, **kw: Any) -> IndexRecord:
    scheme, rest = uri.split("://", 1)
    parts = rest.split("/")
    ancestors = [f"{scheme}://" + "/".join(parts[:i]) for i in range(1, len(parts))]
    fields: dict[str, Any] = {
        "account": ACCOUNT,
        "uri": uri,
        "level": level,
        "context_type": "resource",
        "parent": ancestors[-1],
        "ancestors": ancestors,
        "text": f"notes about {uri}",
        "abstract": f"about {uri}",
        "vector": [1.0] + [0.0] * (DIM - 1),
        "section": section,
        "tags": ["lang=py", "kind=doc"],
        "created_at": T0,
        "updated_at": T0,
    }
    fields.update(kw)
    return IndexRecord(**fields)


def open_index(
    url: str, *, serverless: bool, pipeline: str | None = None, refresh: Any = False
) -> tuple[OpenSearchIndex, RecordingTransport]:
    client = OpenSearch(hosts=[url], transport_class=RecordingTransport)
    transport = client.transport
    assert isinstance(transport, RecordingTransport)
    return OpenSearchIndex(
        client,
        INDEX,
        dimension=DIM,
        serverless=serverless,
        refresh=refresh,
        hybrid_pipeline=pipeline,
    ), transport


def drive_adapter(url: str) -> list[Captured]:
    """Calls every public method of the adapter, on a domain then in serverless mode; returns
    every request sent. `url` must point at an empty osmem-server."""
    return [*_drive(url, serverless=False), *_drive(url, serverless=True)]


def _drive(url: str, *, serverless: bool) -> list[Captured]:
    prefix = "serverless " if serverless else ""
    index, transport = open_index(url, serverless=serverless, pipeline=PIPELINE)

    def step(label: str, *calls: Any) -> None:
        transport.label = prefix + label
        for call in calls:
            call()

    step("ensure_index (new)", index.ensure_index)
    step("ensure_index (existing)", index.ensure_index)
    step("ensure_hybrid_pipeline", index.ensure_hybrid_pipeline)
    docs = [_record(f"viking://resources/docs/{n}.md") for n in "abc"]
    sections = [_record("viking://resources/docs/long.md", section=s) for s in (1, 2, 3)]
    step(
        "upsert",
        lambda: index.upsert([*docs, *sections, _record("viking://resources/docs", level=0)]),
    )
    step(
        "replace_sections",
        lambda: index.replace_sections(ACCOUNT, "viking://resources/docs/long.md", 2, sections[:2]),
    )
    step(
        "replace_many",
        lambda: index.replace_many(
            ACCOUNT,
            {
                ("viking://resources/docs/long.md", 2): sections[:1],
                ("viking://resources/docs/a.md", 2): [docs[0]],
                ("viking://resources/docs", 0): [],
            },
        ),
    )
    step("get", lambda: index.get(ACCOUNT, "viking://resources/docs/a.md"))
    step("head", lambda: index.head(ACCOUNT, "viking://resources/docs/long.md"))
    step(
        "heads",
        lambda: index.heads(
            ACCOUNT, ["viking://resources/docs/long.md", "viking://resources/docs/b.md"]
        ),
    )
    step(
        "get_many",
        lambda: index.get_many(
            ACCOUNT, ["viking://resources/docs/a.md", "viking://resources/docs/missing.md"]
        ),
    )
    step(
        "scroll",
        lambda: index.scroll(ACCOUNT, FILTERS["everything"], limit=2),
        lambda: index.scroll(
            ACCOUNT, None, limit=1, cursor=index.scroll(ACCOUNT, None, limit=1)[1]
        ),
    )
    vector = [0.6, 0.8] + [0.0] * (DIM - 2)
    for name, flt in FILTERS.items():
        step(f"count [{name}]", lambda flt=flt: index.count(ACCOUNT, flt))
        for mode in ("lexical", "dense", "hybrid"):
            query = IndexQuery(
                ACCOUNT,
                mode,
                5,
                vector=vector,
                text="notes about docs",
                filter=flt,
                score_threshold=0.1,
            )
            step(f"search {mode} [{name}]", lambda query=query: index.search(query))
    step("count (no filter)", lambda: index.count(ACCOUNT))
    # Without a pipeline, hybrid fuses client-side from one _msearch; a domain client may
    # also ask writes to wait for a refresh.
    plain, plain_transport = open_index(
        url, serverless=serverless, refresh=False if serverless else "wait_for"
    )
    plain_transport.label = prefix + "search hybrid (msearch)"
    plain.search(
        IndexQuery(ACCOUNT, "hybrid", 5, vector=vector, text="notes", filter=FILTERS["everything"])
    )
    plain_transport.label = prefix + "upsert, delete_uris (refresh)"
    plain.upsert([_record("viking://resources/docs/d.md")])
    plain.delete_uris(ACCOUNT, ["viking://resources/docs/d.md"])
    step("delete_uris", lambda: index.delete_uris(ACCOUNT, ["viking://resources/docs/b.md"]))
    step("delete_prefix", lambda: index.delete_prefix(ACCOUNT, "viking://resources/docs"))
    step("delete_index", index.delete_index)
    plain.close()
    index.close()
    return [*transport.captured, *plain_transport.captured]
