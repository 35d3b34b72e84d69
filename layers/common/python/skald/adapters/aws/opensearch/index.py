"""SearchIndex on OpenSearch: k-NN (HNSW) for dense search, BM25 for lexical, RRF for hybrid.

This module is the adapter (lifecycle, writes, reads); ranking lives in ranking.py, request
bodies in requests.py and filters.py, the client in client.py, hit decoding in hits.py. Their
public names are importable from here too.

One OpenSearch index holds every account's records; the account is a keyword term that every
request carries (the adapter adds it, never the caller), so nothing crosses accounts. The
semantics follow the embedded index (skald/adapters/local/index/searchindex.py):

- A scope matches a record whose uri equals it or has it among its `ancestors`.
- Filters run *before* ranking: the k-NN filter sits inside the knn clause (efficient
  filtering), so a filter never empties a top-k that other records could fill.
- Dense score = cosine. Vectors (stored and query) are L2-normalised here, so the inner product
  IS the cosine; the index uses `innerproduct` and the score OpenSearch returns is mapped back
  (see `cosine_from_score`). `cosinesimil` and `l2` are supported too, with their own inverses.
- Lexical score = bm25 / (bm25 + 1), in [0, 1) (skald.domain.retrieval.scores).
- Hybrid score = reciprocal rank fusion over a dense and a lexical ranking, each
  `hybrid_depth(limit)` deep, normalised so rank 1 in both scores 1 (skald.domain.retrieval.fusion);
  a file's rank in each list counts files only, so directory summaries do not push files
  down. The native search-pipeline mode cannot apply that rule (docs/opensearch.md).
- Ties are broken by (uri, level, section), whatever the mode.

Deliberate differences from the embedded index:
- BM25 statistics are per shard (OpenSearch's), not per account, and count directory
  summaries as documents (the embedded index counts files only).
- Search hits carry `record.vector = None` (vectors are large; `get` returns them).
- At most 10,000 hits per search (OpenSearch's result window and k-NN `k` limit).
- Times are indexed as epoch milliseconds: filters have millisecond resolution.
- URIs are stored normalised (no trailing slash, as the embedded index matches them).

Refresh semantics (`refresh`, managed domains only): OpenSearch makes writes searchable at the
next refresh (1 s by default). With `refresh=False` (production default) a search may miss a
write for up to that long; "wait_for" makes every write call return once its writes are
searchable; True forces a refresh per write (fastest read-your-writes, costlier segments).
Deletes use delete-by-query, which only sees refreshed documents, so with `refresh=False` the
index is refreshed right before each delete-by-query: a delete never misses an earlier write.
`delete_uris` and `delete_prefix` refresh after it too, whatever the policy: once they return,
no search finds what they deleted (a removal answers once its records are gone). The deletes
inside `replace_many` (a rewritten record's leftover sections) follow the policy.

OpenSearch Serverless (`serverless=True`, auth "sigv4-aoss", a VECTORSEARCH collection) differs:
it rejects custom `_id`s on index/bulk, the `refresh` parameter, `_refresh` and
`_delete_by_query`. So there each record is indexed with a server-generated `_id`; its stable
key lives in the `record_id` field with a `written_at` stamp. An upsert indexes the new version,
then deletes older versions of the same keys (found by search, deleted by `_id` in bulk);
deletes are search-then-bulk-delete; reads keep only the newest version of a key (count()
may include a superseded copy until that cleanup has seen it). The collection refreshes on its
own schedule, so searches there are eventually consistent: a record written moments ago may not
be found yet, nor deleted by a delete issued right after.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opensearchpy import OpenSearch
from opensearchpy.exceptions import RequestError

from skald.adapters.aws.opensearch.client import (
    Auth,
    OpenSearchIndexError,
    build_client,
    error_text,
)
from skald.adapters.aws.opensearch.filters import filter_clauses, to_millis
from skald.adapters.aws.opensearch.hits import (
    cosine_from_score,
    lexical_from_bm25,
    newest_records,
    source_key,
    source_record,
)
from skald.adapters.aws.opensearch.ranking import Ranker
from skald.adapters.aws.opensearch.requests import (
    MAX_WINDOW,
    bm25_query,
    bulk_body,
    chunks,
    decode_cursor,
    delete_prefix_query,
    delete_uris_query,
    encode_cursor,
    hybrid_msearch_body,
    hybrid_pipeline_body,
    hybrid_query,
    index_template_body,
    knn_query,
    msearch_body,
    older_versions_query,
    record_document,
    record_id,
    stale_sections_query,
    unit_vector,
    uri_head_query,
    uri_records_query,
    write_stamp,
)
from skald.adapters.aws.opensearch.writes import IndexWriter, Refresh
from skald.domain.retrieval.fusion import RRF_K
from skald.domain.retrieval.index_filter import SEARCH_MODES, norm_uri
from skald.ports import IndexFilter, IndexHit, IndexQuery, IndexRecord

_TERMS_CHUNK = 1000
# Searches per _msearch request: a directory refresh's first records (one hit each), and
# records with their vectors (a sidecar has one; a large file thousands: fewer per request).
_HEADS_CHUNK = 64
_GET_MANY_CHUNK = 16


class OpenSearchIndex:
    """SearchIndex on one OpenSearch index (a managed domain, self-managed OpenSearch, or an
    OpenSearch Serverless VECTORSEARCH collection with `serverless=True`).

    The adapter takes ownership of `client` (close() closes it). It does no I/O at
    construction and creates nothing: the app names the alias that deploy-time setup
    (setup.ensure_search_index) keeps; ensure_index() makes a plain index (tests).
    `hybrid_pipeline` names a search pipeline (see ensure_hybrid_pipeline) that fuses hybrid
    queries server-side with `hybrid_technique`; without one, hybrid search fuses a k-NN and a
    BM25 ranking client-side, exactly like the embedded index."""

    def __init__(
        self,
        client: OpenSearch,
        index: str,
        *,
        dimension: int,
        engine: str = "faiss",
        space_type: str = "innerproduct",
        m: int = 16,
        ef_construction: int = 128,
        ef_search: int = 100,
        hybrid_pipeline: str | None = None,
        hybrid_technique: str = "rrf",
        refresh: Refresh = False,
        serverless: bool = False,
        write_timeout: float = 120.0,
    ) -> None:
        if dimension < 1:
            raise ValueError("dimension must be >= 1")
        if refresh not in (True, False, "wait_for"):
            raise ValueError(f"refresh must be True, False or 'wait_for', not {refresh!r}")
        if serverless and refresh is not False:
            raise ValueError("OpenSearch Serverless has no refresh control: use refresh=False")
        self._template = index_template_body(
            dimension=dimension,
            engine=engine,
            space_type=space_type,
            m=m,
            ef_construction=ef_construction,
            ef_search=ef_search,
        )
        hybrid_pipeline_body(hybrid_technique)  # validates the technique
        self._client = client
        self._index = index
        self._dim = dimension
        self._pipeline = hybrid_pipeline
        self._technique = hybrid_technique
        self._serverless = serverless
        self._ranker = Ranker(
            client,
            index,
            space_type=space_type,
            pipeline=hybrid_pipeline,
            technique=hybrid_technique,
        )
        self._writer = IndexWriter(
            client, index, refresh=refresh, serverless=serverless, write_timeout=write_timeout
        )

    @property
    def index(self) -> str:
        return self._index

    # ---- lifecycle ----

    def ensure_index(self) -> bool:
        """Creates the index when missing; True when it was created. An existing index must hold
        vectors of this dimension (ValueError otherwise: reindex after changing the model)."""
        try:
            self._client.indices.create(index=self._index, body=self._template)
            return True
        except RequestError as exc:
            etype, _ = error_text(exc)
            if etype != "resource_already_exists_exception":
                raise
        mapping = self._client.indices.get_mapping(index=self._index)
        for body in mapping.values():
            props = body.get("mappings", {}).get("properties", {})
            dim = props.get("vector", {}).get("dimension")
            if dim is not None and int(dim) != self._dim:
                raise ValueError(
                    f"OpenSearch index {self._index!r} holds {dim}-d vectors, not {self._dim}-d: "
                    "reindex into a new index after changing the embedding model"
                )
        return False

    def ensure_hybrid_pipeline(self) -> None:
        """Creates (or updates) the `hybrid_pipeline` search pipeline."""
        if self._pipeline is None:
            raise ValueError("no hybrid_pipeline name was configured")
        self._client.search_pipeline.put(
            id=self._pipeline, body=hybrid_pipeline_body(self._technique)
        )

    def delete_index(self) -> None:
        self._client.indices.delete(index=self._index, ignore_unavailable=True)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> OpenSearchIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- writes ----

    def _index_records(self, records: Sequence[IndexRecord]) -> tuple[list[str], int]:
        """Indexes `records` (unique keys); returns their ids and the write stamp."""
        stamp = write_stamp()
        body = bulk_body(
            self._index, records, dimension=self._dim, stamp=stamp, serverless=self._serverless
        )
        self._writer.bulk(body, with_sources=True)
        return [body[i + 1]["record_id"] for i in range(0, len(body), 2)], stamp

    def upsert(self, records: Sequence[IndexRecord]) -> None:
        if not records:
            return
        latest: dict[tuple[str, str, int, int], IndexRecord] = {}
        for rec in records:  # the last record of a key wins
            latest[(rec.account, norm_uri(rec.uri), int(rec.level), int(rec.section))] = rec
        ids, stamp = self._index_records(list(latest.values()))
        if self._serverless:
            for chunk in chunks(ids, _TERMS_CHUNK):
                self._writer.scan_delete(older_versions_query(chunk, stamp))

    # Deletes are read-your-deletes (the port's contract): searches stop finding the records
    # before the call returns, whatever the refresh policy, so a removal can answer once its
    # records are gone. Serverless has no refresh control: there they go at its pace.
    def delete_uris(self, account: str, uris: Sequence[str]) -> int:
        uris = list(uris)
        return sum(
            self._writer.delete(delete_uris_query(account, chunk), visible=True)
            for chunk in chunks(uris, _TERMS_CHUNK)
        )

    def delete_prefix(self, account: str, prefix: str) -> int:
        return self._writer.delete(delete_prefix_query(account, prefix), visible=True)

    def replace_sections(
        self, account: str, uri: str, level: int, records: Sequence[IndexRecord]
    ) -> None:
        self.replace_many(account, {(uri, level): records})

    def replace_many(
        self, account: str, sets: Mapping[tuple[str, int], Sequence[IndexRecord]]
    ) -> None:
        """Indexes every new section set in one bulk, then deletes the (uri, level) records not
        in them, one delete-by-query per level and chunk of URIs. In that order a reader never
        finds a document without sections, at worst for a moment a stale extra section. Not
        atomic (OpenSearch has no multi-document transactions)."""
        latest: dict[tuple[str, int, int], IndexRecord] = {}
        by_level: dict[int, set[str]] = {}
        for (uri, level), records in sets.items():
            by_level.setdefault(int(level), set()).add(norm_uri(uri))
            for rec in records:
                if (
                    rec.account != account
                    or norm_uri(rec.uri) != norm_uri(uri)
                    or int(rec.level) != int(level)
                ):
                    raise ValueError(
                        "replace_sections: every record must have the given account, uri and level"
                    )
                latest[(norm_uri(uri), int(level), int(rec.section))] = rec
        ids, stamp = self._index_records(list(latest.values())) if latest else ([], 0)
        kept: dict[tuple[str, int], list[str]] = {}
        for key, rid in zip(latest, ids, strict=True):
            kept.setdefault((key[0], key[1]), []).append(rid)
        stamp = stamp or write_stamp()
        for level, uris in sorted(by_level.items()):
            for chunk in chunks(sorted(uris), _TERMS_CHUNK):
                if self._serverless:
                    stale = stale_sections_query(account, chunk, level, [])
                    stale["query"]["bool"]["filter"].append(
                        {"range": {"written_at": {"lt": stamp}}}
                    )
                    self._writer.scan_delete(stale)
                else:
                    keep = [rid for u in chunk for rid in kept.get((u, level), [])]
                    self._writer.delete(stale_sections_query(account, chunk, level, keep))

    # ---- reads ----

    def get(self, account: str, uri: str) -> list[IndexRecord]:
        body = uri_records_query(account, uri)
        return newest_records(self._client.search(index=self._index, body=body)["hits"]["hits"])

    def head(self, account: str, uri: str) -> IndexRecord | None:
        hits = self._client.search(index=self._index, body=uri_head_query(account, uri))["hits"][
            "hits"
        ]
        return source_record(hits[0]["_source"], with_vector=False) if hits else None

    def heads(self, account: str, uris: Sequence[str]) -> dict[str, IndexRecord]:
        out: dict[str, IndexRecord] = {}
        for part in chunks(list(dict.fromkeys(uris)), _HEADS_CHUNK):
            body = msearch_body(self._index, [uri_head_query(account, u) for u in part])
            for uri, hits in zip(
                part, self._ranker.msearch(body, ["head"] * len(part)), strict=True
            ):
                if hits:
                    out[uri] = source_record(hits[0]["_source"], with_vector=False)
        return out

    def get_many(self, account: str, uris: Sequence[str]) -> dict[str, list[IndexRecord]]:
        out: dict[str, list[IndexRecord]] = {}
        for part in chunks(list(dict.fromkeys(uris)), _GET_MANY_CHUNK):
            body = msearch_body(self._index, [uri_records_query(account, u) for u in part])
            for uri, hits in zip(
                part, self._ranker.msearch(body, ["get"] * len(part)), strict=True
            ):
                out[uri] = newest_records(hits)
        return out

    def count(self, account: str, flt: IndexFilter | None = None) -> int:
        clauses = filter_clauses(account, flt or IndexFilter())
        resp = self._client.count(index=self._index, body={"query": {"bool": {"filter": clauses}}})
        return int(resp["count"])

    def scroll(
        self,
        account: str,
        flt: IndexFilter | None = None,
        *,
        limit: int = 100,
        cursor: str | None = None,
    ) -> tuple[list[IndexRecord], str | None]:
        if limit < 1:
            raise ValueError("limit must be >= 1")
        body: dict[str, Any] = {
            "size": min(limit, MAX_WINDOW),
            "query": {"bool": {"filter": filter_clauses(account, flt or IndexFilter())}},
            # The record key, then the newest write first: a rewritten record's older copy
            # (still there until its cleanup) follows it and is dropped below.
            "sort": [{"uri": "asc"}, {"level": "asc"}, {"section": "asc"}, {"written_at": "desc"}],
            "_source": {"excludes": ["vector"]},
        }
        if cursor is not None:
            body["search_after"] = decode_cursor(cursor)
        hits = self._client.search(index=self._index, body=body)["hits"]["hits"]
        records: list[IndexRecord] = []
        seen: set[str] = set()
        for raw in hits:
            rec = source_record(raw["_source"], with_vector=False)
            key = source_key(raw["_source"], rec)
            if key not in seen:
                seen.add(key)
                records.append(rec)
        more = len(hits) == body["size"]
        return records, (encode_cursor(hits[-1]["sort"]) if more and hits else None)

    def search(self, query: IndexQuery) -> list[IndexHit]:
        qvec, text = self._query_inputs(query)
        # Built (and so validated) before anything else: a bad filter always fails.
        filters = filter_clauses(query.account, query.filter)
        limit = min(query.limit, MAX_WINDOW)
        if limit == 0:
            return []
        out = self._ranker.rank(query, qvec, text, filters, limit)
        if query.score_threshold is not None:
            out = [h for h in out if h.score >= query.score_threshold]
        return out

    def _query_inputs(self, query: IndexQuery) -> tuple[list[float] | None, str]:
        """The query's unit vector and text, each checked present when its mode needs it."""
        mode = query.mode
        if mode not in SEARCH_MODES:
            raise ValueError(f"unknown search mode {mode!r}: expected {', '.join(SEARCH_MODES)}")
        if query.limit < 0:
            raise ValueError("limit must be >= 0")
        qvec: list[float] | None = None
        if mode in ("dense", "hybrid"):
            # One msearch carries both sides of a hybrid query: nothing to overlap with.
            vector = query.dense_vector()
            if vector is None:
                raise ValueError(f"{mode} search needs a query vector")
            qvec = unit_vector(vector, self._dim, "query")
            if qvec is None:
                raise ValueError("query vector is zero or not finite")
        text = ""
        if mode in ("lexical", "hybrid"):
            if query.text is None:
                raise ValueError(f"{mode} search needs a query text")
            text = query.text
        return qvec, text


__all__ = [
    "MAX_WINDOW",
    "RRF_K",
    "Auth",
    "OpenSearchIndex",
    "OpenSearchIndexError",
    "bm25_query",
    "build_client",
    "bulk_body",
    "cosine_from_score",
    "delete_prefix_query",
    "delete_uris_query",
    "filter_clauses",
    "hybrid_msearch_body",
    "hybrid_pipeline_body",
    "hybrid_query",
    "index_template_body",
    "knn_query",
    "lexical_from_bm25",
    "norm_uri",
    "older_versions_query",
    "record_document",
    "record_id",
    "stale_sections_query",
    "to_millis",
    "unit_vector",
    "write_stamp",
]
