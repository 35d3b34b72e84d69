"""Ranking for OpenSearchIndex.search: the four modes (recent, dense, lexical, hybrid) as
requests and their hits as scored results (the rules: index.py's module notes).

Dense search asks k-NN for a tie margin beyond k, and more while a tie reaches the end of what
came back. Hybrid search fuses a k-NN and a BM25 ranking client-side (one _msearch) unless a
search pipeline fuses them server-side. A query the cluster rejects for want of the k-NN or
neural-search plugin raises IndexUnsupported.
"""

from __future__ import annotations

from typing import Any

from opensearchpy import OpenSearch
from opensearchpy.exceptions import RequestError

from skald.adapters.aws.opensearch.client import OpenSearchIndexError, error_text, is_unsupported
from skald.adapters.aws.opensearch.hits import (
    Hit,
    cosine,
    cosine_from_score,
    lexical_from_bm25,
    newest,
    ranked,
    to_hit,
)
from skald.adapters.aws.opensearch.requests import (
    MAX_WINDOW,
    bm25_query,
    hybrid_msearch_body,
    hybrid_query,
    knn_query,
    recent_query,
)
from skald.domain.retrieval.fusion import fused_top, hybrid_depth, hybrid_score, rrf_fuse
from skald.ports import IndexHit, IndexQuery, IndexUnsupported

TIE_MARGIN = 10  # k-NN results asked beyond k, so that ties at the cut can be ordered


class Ranker:
    """Runs the searches of one index; `pipeline` names a hybrid search pipeline (server-side
    fusion with `technique`), None to fuse client-side."""

    def __init__(
        self,
        client: OpenSearch,
        index: str,
        *,
        space_type: str,
        pipeline: str | None,
        technique: str,
    ) -> None:
        self._client = client
        self._index = index
        self._space = space_type
        self._pipeline = pipeline
        self._technique = technique

    def rank(
        self,
        query: IndexQuery,
        qvec: list[float] | None,
        text: str,
        filters: list[dict[str, Any]],
        limit: int,
    ) -> list[IndexHit]:
        mode = query.mode
        if mode == "recent":
            raw = self.search(recent_query(filters, query.filter.time_field, limit), "recent")
            # Serverless may hold superseded copies: keep the newest, in the server's order.
            hits = [to_hit(r, 0.0) for r in raw]
            keep = {id(h) for h in newest(hits)}
            return [IndexHit(h.record, 0.0) for h in hits if id(h) in keep]
        if mode == "lexical":
            return [
                IndexHit(h.record, h.score, None, h.score)
                for h in self._lexical(text, filters, limit)
            ]
        assert qvec is not None
        if mode == "dense":
            return [
                IndexHit(h.record, h.score, h.score, None)
                for h in self._dense(qvec, filters, limit)
            ]
        if self._pipeline is not None:
            return self._hybrid_pipeline(text, qvec, filters, limit)
        return self._hybrid(text, qvec, filters, limit)

    def _unsupported(self, what: str, status: int, etype: str, reason: str) -> IndexUnsupported:
        return IndexUnsupported(
            f"OpenSearch index {self._index!r}: the cluster rejected the {what} query "
            f"(HTTP {status} {etype}: {reason}). Dense and hybrid search need the k-NN plugin "
            "(and, for server-side fusion, the neural-search plugin and a hybrid search "
            "pipeline); lexical search still works."
        )

    def search(self, body: dict[str, Any], what: str, **params: Any) -> list[dict[str, Any]]:
        try:
            resp = self._client.search(index=self._index, body=body, **params)
        except RequestError as exc:
            etype, reason = error_text(exc)
            if what != "bm25" and is_unsupported(400, etype, reason):
                raise self._unsupported(what, 400, etype, reason) from exc
            raise
        hits: list[dict[str, Any]] = resp["hits"]["hits"]
        return hits

    def msearch(self, body: list[dict[str, Any]], whats: list[str]) -> list[list[dict[str, Any]]]:
        resp = self._client.msearch(body=body)
        out: list[list[dict[str, Any]]] = []
        for item, what in zip(resp["responses"], whats, strict=True):
            err = item.get("error")
            if err is not None:
                status = int(item.get("status", 500))
                etype, reason = (
                    (str(err.get("type", "")), str(err.get("reason", "")))
                    if isinstance(err, dict)
                    else ("", str(err))
                )
                if what != "bm25" and is_unsupported(status, etype, reason):
                    raise self._unsupported(what, status, etype, reason)
                raise OpenSearchIndexError(
                    f"OpenSearch index {self._index!r}: {what} search failed: HTTP {status} "
                    f"{etype}: {reason}"
                )
            out.append(item["hits"]["hits"])
        return out

    def _knn_hits(self, raw: list[dict[str, Any]]) -> list[Hit]:
        return [to_hit(r, cosine_from_score(float(r["_score"]), self._space)) for r in raw]

    def _dense(
        self,
        qvec: list[float],
        filters: list[dict[str, Any]],
        k: int,
        first: list[dict[str, Any]] | None = None,
        fetched: int = 0,
    ) -> list[Hit]:
        """The best k by cosine, ties broken by (uri, level, section). k-NN returns *some* k
        of tied records, so it asks for a few more and, while a tie reaches the end of what
        came back, for more still."""
        fetch = fetched or min(k + TIE_MARGIN, MAX_WINDOW)
        raw = first
        while True:
            if raw is None:
                raw = self.search(knn_query(qvec, fetch, filters), "k-NN")
            best = ranked(self._knn_hits(raw))
            full = len(raw) >= fetch and fetch < MAX_WINDOW
            if not full or (len(best) > k and best[k - 1].score != best[-1].score):
                return best[:k]
            fetch, raw = min(fetch * 2, MAX_WINDOW), None

    def _lexical(
        self,
        text: str,
        filters: list[dict[str, Any]],
        size: int,
        raw: list[dict[str, Any]] | None = None,
        *,
        keep_vector: bool = False,
    ) -> list[Hit]:
        if raw is None:
            raw = self.search(bm25_query(text, filters, size), "bm25")
        # The server sorted by (score, uri, level, section) already; re-sorting on the mapped
        # score keeps that order and drops superseded copies (serverless).
        hits = [
            to_hit(r, lexical_from_bm25(float(r["_score"])), keep_vector=keep_vector)
            for r in raw
            if r.get("_score") is not None
        ]
        return ranked(hits)[:size]

    def _hybrid(
        self, text: str, qvec: list[float], filters: list[dict[str, Any]], limit: int
    ) -> list[IndexHit]:
        depth = min(hybrid_depth(limit), MAX_WINDOW)
        fetch = min(depth + TIE_MARGIN, MAX_WINDOW)
        # k-NN asks for a tie margin beyond the depth, see _dense.
        body = hybrid_msearch_body(self._index, text, qvec, filters, depth, k=fetch)
        knn_raw, bm25_raw = self.msearch(body, ["k-NN", "bm25"])
        dense = self._dense(qvec, filters, depth, knn_raw, fetch)
        lexical = self._lexical(text, filters, depth, bm25_raw, keep_vector=True)
        hits: dict[str, Hit] = {}
        for h in (*dense, *lexical):
            hits.setdefault(h.key, h)
        # Directory summaries (levels 0/1) do not push files down (skald.domain.retrieval.fusion).
        fused = rrf_fuse(
            [h.key for h in dense],
            [h.key for h in lexical],
            is_summary=lambda key: hits[key].record.level < 2,
        )
        dense_known = {h.key: h.score for h in dense}
        lexical_known = {h.key: h.score for h in lexical}
        for h in lexical:  # a lexical-only hit still gets its cosine when it has a vector
            if h.key not in dense_known and h.vector is not None:
                dense_known[h.key] = cosine(qvec, h.vector)
        return [
            IndexHit(hits[key].record, score, dense_known.get(key), lexical_known.get(key))
            for key, score in fused_top(fused, lambda key: hits[key].order, limit)
        ]

    def _pipeline_score(self, raw: float) -> float:
        return hybrid_score(raw) if self._technique == "rrf" else min(raw, 1.0)

    def _hybrid_pipeline(
        self, text: str, qvec: list[float], filters: list[dict[str, Any]], limit: int
    ) -> list[IndexHit]:
        depth = min(hybrid_depth(limit), MAX_WINDOW)
        raw = self.search(
            hybrid_query(text, qvec, filters, depth, depth),
            "hybrid",
            search_pipeline=self._pipeline,
        )
        # The rrf processor's scores are the fused sums themselves; min_max ones are in [0, 1].
        hits = ranked(
            to_hit(r, self._pipeline_score(float(r["_score"])), keep_vector=True) for r in raw
        )[:limit]
        if not hits:
            return []
        # The pipeline returns fused scores only: the BM25 part comes from one more request
        # restricted to these hits, the cosine from their vectors.
        ids = [h.key for h in hits]
        lex_body = bm25_query(text, [*filters, {"terms": {"record_id": ids}}], len(ids))
        lexical = {
            h.key: h.score
            for h in self._lexical(text, filters, len(ids), self.search(lex_body, "bm25"))
        }
        return [
            IndexHit(
                h.record,
                h.score,
                cosine(qvec, h.vector) if h.vector is not None else None,
                lexical.get(h.key),
            )
            for h in hits
        ]
