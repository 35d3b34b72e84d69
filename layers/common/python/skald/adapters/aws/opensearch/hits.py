"""OpenSearch search hits as the port's records and scores: the source -> IndexRecord codec,
the k-NN score -> cosine inverse of each space type, and the newest-version dedup a
serverless collection needs (it may briefly hold superseded copies of a record)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from skald.adapters.aws.opensearch.requests import record_id
from skald.domain.retrieval.scores import TieKey, lexical_score, tie_key
from skald.ports import IndexRecord

# The port's lexical score mapping, under the name this adapter has always exported.
lexical_from_bm25 = lexical_score


def cosine_from_score(score: float, space_type: str) -> float:
    """The cosine behind an OpenSearch k-NN score, for unit-length vectors.

    innerproduct (faiss, nmslib, lucene): with ip = x.y, score = ip + 1 when ip >= 0 and
    1 / (1 - ip) otherwise, so a score >= 1 means ip = score - 1, else ip = 1 - 1 / score.
    cosinesimil: score = (1 + cos) / 2. l2: score = 1 / (1 + |x - y|^2) and |x - y|^2 = 2 - 2cos.
    """
    if space_type == "innerproduct":
        cos = score - 1.0 if score >= 1.0 else 1.0 - 1.0 / score
    elif space_type == "cosinesimil":
        cos = 2.0 * score - 1.0
    elif space_type == "l2":
        cos = 1.0 - (1.0 / score - 1.0) / 2.0
    else:
        raise ValueError(f"unsupported space_type {space_type!r}")
    return min(1.0, max(-1.0, cos))


def cosine(unit_query: list[float], stored: Sequence[float]) -> float:
    # Stored vectors are unit length (record_document), so the dot product is the cosine.
    dot = math.fsum(a * float(b) for a, b in zip(unit_query, stored, strict=True))
    return min(1.0, max(-1.0, dot))


@dataclass
class Hit:
    key: str  # record_id
    order: TieKey
    score: float
    record: IndexRecord
    stamp: int
    vector: list[float] | None = None


def source_record(src: dict[str, Any], *, with_vector: bool) -> IndexRecord:
    """The record a document's _source holds (times come back from epoch milliseconds)."""
    vector = src.get("vector") if with_vector else None
    return IndexRecord(
        account=src["account"],
        uri=src["uri"],
        level=int(src["level"]),
        context_type=src.get("context_type") or "",
        parent=src.get("parent") or "",
        ancestors=list(src.get("ancestors") or []),
        text=src.get("text") or "",
        abstract=src.get("abstract") or "",
        vector=[float(x) for x in vector] if vector is not None else None,
        section=int(src.get("section") or 0),
        line_start=src.get("line_start"),
        line_end=src.get("line_end"),
        tags=list(src.get("tags") or []),
        memory_type=src.get("memory_type"),
        owner=src.get("owner"),
        peer=src.get("peer"),
        created_at=float(src.get("created_at") or 0) / 1000.0,
        updated_at=float(src.get("updated_at") or 0) / 1000.0,
    )


def source_key(src: dict[str, Any], rec: IndexRecord) -> str:
    return src.get("record_id") or record_id(rec.account, rec.uri, rec.level, rec.section)


def to_hit(raw: dict[str, Any], score: float, *, keep_vector: bool = False) -> Hit:
    src = raw["_source"]
    rec = source_record(src, with_vector=False)
    vector = src.get("vector") if keep_vector else None
    return Hit(
        source_key(src, rec),
        tie_key(rec.uri, rec.level, rec.section),
        score,
        rec,
        int(src.get("written_at") or 0),
        vector,
    )


def newest(hits: Iterable[Hit]) -> list[Hit]:
    """One hit per key: the newest version (serverless may briefly hold superseded copies)."""
    best: dict[str, Hit] = {}
    for h in hits:
        seen = best.get(h.key)
        if seen is None or h.stamp > seen.stamp:
            best[h.key] = h
    return list(best.values())


def ranked(hits: Iterable[Hit]) -> list[Hit]:
    """Newest versions, best score first, ties by (uri, level, section)."""
    return sorted(newest(hits), key=lambda h: (-h.score, h.order))


def newest_records(raw: Iterable[dict[str, Any]]) -> list[IndexRecord]:
    """The records of a `get`'s raw hits (vectors included), one per key: its newest stored
    copy; by (level, section)."""
    best: dict[str, tuple[int, IndexRecord]] = {}
    for hit in raw:
        src = hit["_source"]
        rec = source_record(src, with_vector=True)
        key = source_key(src, rec)
        stamp = int(src.get("written_at") or 0)
        if key not in best or stamp > best[key][0]:
            best[key] = (stamp, rec)
    return sorted((r for _, r in best.values()), key=lambda r: (r.level, r.section))
