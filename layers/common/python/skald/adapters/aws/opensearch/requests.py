"""OpenSearch request bodies of the records index (pure: golden-tested in
tests/unit/adapters/aws/opensearch/test_opensearch_requests.py): index settings and mappings, the
hybrid search pipeline, k-NN / BM25 / hybrid search bodies, bulk and delete-by-query bodies, and the
document form of a record.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
import time
from collections.abc import Iterator, Sequence
from typing import Any

from skald.adapters.aws.opensearch.filters import filter_clauses, to_millis
from skald.domain.retrieval.fusion import RRF_K
from skald.domain.retrieval.index_filter import norm_uri
from skald.ports import IndexFilter, IndexRecord, IndexVectorMismatch

MAX_WINDOW = 10_000  # index.max_result_window and the k-NN k limit
# A match query becomes one clause per token per field; OpenSearch caps a query at 1024.
_MAX_QUERY_WORDS = 256
_MAX_QUERY_CHARS = 4096

SPACES = ("innerproduct", "cosinesimil", "l2")
ENGINES = ("faiss", "lucene", "nmslib")
# Search requests leave vectors out of hits: a 1024-d vector is ~20 kB of JSON.
_NO_VECTORS: dict[str, Any] = {"excludes": ["vector"]}
# The tie-break of skald.domain.retrieval.scores, spelled as a sort.
_TIE_SORT: list[dict[str, Any]] = [
    {"_score": {"order": "desc"}},
    {"uri": {"order": "asc"}},
    {"level": {"order": "asc"}},
    {"section": {"order": "asc"}},
]


def record_id(account: str, uri: str, level: int, section: int) -> str:
    """Stable document id of (account, uri, level, section); JSON so no separator is ambiguous."""
    key = json.dumps([account, norm_uri(uri), int(level), int(section)], ensure_ascii=False)
    return hashlib.sha256(key.encode()).hexdigest()


def encode_cursor(sort_values: Sequence[Any]) -> str:
    """An opaque page cursor: the sort values of a page's last hit (search_after)."""
    return base64.urlsafe_b64encode(json.dumps(list(sort_values)).encode()).decode()


def decode_cursor(cursor: str) -> list[Any]:
    try:
        values = json.loads(base64.urlsafe_b64decode(cursor.encode()))
    except (ValueError, binascii.Error, UnicodeError) as exc:
        raise ValueError(f"invalid cursor {cursor!r}") from exc
    if (
        not isinstance(values, list)
        or len(values) != 4
        or not all(isinstance(v, (str, int)) for v in values)
    ):
        raise ValueError(f"invalid cursor {cursor!r}")
    return values


def write_stamp() -> int:
    """`written_at` of a write: epoch microseconds, below 2**53 so exact even where a long is
    handled as a double (JSON tooling, osmem)."""
    return time.time_ns() // 1000


def unit_vector(vector: Sequence[float], dimension: int, what: str) -> list[float] | None:
    """`vector` scaled to unit length; None for a zero vector (it cannot rank).
    Raises IndexVectorMismatch on a wrong dimension, ValueError on a non-finite value."""
    # Plain floats, no numpy: this module is on the Lambda cold-start path.
    values = [float(x) for x in vector]
    if len(values) != dimension:
        raise IndexVectorMismatch(
            f"{what}: vector has {len(values)} dimensions, the index {dimension}"
        )
    norm = math.sqrt(math.fsum(x * x for x in values))
    if not math.isfinite(norm):
        raise ValueError(f"{what}: vector is not finite")
    if norm == 0.0:
        return None
    return values if norm == 1.0 else [x / norm for x in values]


def chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _query_text(text: str) -> str:
    words = text[:_MAX_QUERY_CHARS].split()
    return " ".join(words[:_MAX_QUERY_WORDS])


# --------------------------------------------------------------------------------------------
# Index and pipeline.


def index_template_body(
    *,
    dimension: int,
    engine: str = "faiss",
    space_type: str = "innerproduct",
    m: int = 16,
    ef_construction: int = 128,
    ef_search: int = 100,
) -> dict[str, Any]:
    """Settings and mappings of the records index.

    Text: `text` uses the standard tokenizer, lower-casing and ASCII folding (case and accents
    never matter); its `text.stemmed` sub-field adds the Porter stemmer, the same stemmer as the
    embedded index. Lexical queries match both, so every word form is found (stemmed) and exact
    forms rank a little higher (both fields score). No stop-word list: like the embedded index,
    common words are left to BM25's idf. `abstract` is only kept in _source.
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    if space_type not in SPACES:
        raise ValueError(f"space_type must be one of {', '.join(SPACES)}, not {space_type!r}")
    keyword = {"type": "keyword"}
    integer = {"type": "integer"}
    date = {"type": "date", "format": "epoch_millis"}
    return {
        "settings": {
            "index": {"knn": True, "knn.algo_param.ef_search": ef_search},
            "analysis": {
                "analyzer": {
                    "skald_folded": {
                        "type": "custom",
                        "tokenizer": "standard",
                        "filter": ["lowercase", "asciifolding"],
                    },
                    "skald_english": {
                        "type": "custom",
                        "tokenizer": "standard",
                        "filter": ["lowercase", "asciifolding", "porter_stem"],
                    },
                }
            },
        },
        "mappings": {
            "dynamic": "strict",
            "properties": {
                "record_id": keyword,
                "account": keyword,
                "uri": keyword,
                "parent": keyword,
                "ancestors": keyword,
                "tags": keyword,
                "context_type": keyword,
                "memory_type": keyword,
                "owner": keyword,
                "peer": keyword,
                "level": integer,
                "section": integer,
                "line_start": integer,
                "line_end": integer,
                "created_at": date,
                "updated_at": date,
                "written_at": {"type": "long"},
                "text": {
                    "type": "text",
                    "analyzer": "skald_folded",
                    "fields": {"stemmed": {"type": "text", "analyzer": "skald_english"}},
                },
                "abstract": {"type": "text", "index": False},
                "vector": {
                    "type": "knn_vector",
                    "dimension": dimension,
                    "method": {
                        "name": "hnsw",
                        "engine": engine,
                        "space_type": space_type,
                        "parameters": {"m": m, "ef_construction": ef_construction},
                    },
                },
            },
        },
    }


def hybrid_pipeline_body(technique: str = "rrf") -> dict[str, Any]:
    """A search pipeline fusing the two sub-queries of `hybrid_query` server-side.

    "rrf": the score-ranker-processor (OpenSearch 2.19+), rank constant RRF_K like the
    client-side fusion; its scores are rescaled to the port's normalised RRF.
    "min_max": the normalization-processor (min-max per sub-query, arithmetic mean), scores in
    [0, 1] used as they are."""
    if technique == "rrf":
        processor: dict[str, Any] = {
            "score-ranker-processor": {"combination": {"technique": "rrf", "rank_constant": RRF_K}}
        }
    elif technique == "min_max":
        processor = {
            "normalization-processor": {
                "normalization": {"technique": "min_max"},
                "combination": {
                    "technique": "arithmetic_mean",
                    "parameters": {"weights": [0.5, 0.5]},
                },
            }
        }
    else:
        raise ValueError(f"hybrid technique must be rrf or min_max, not {technique!r}")
    return {
        "description": "Skald hybrid search: BM25 and k-NN fused",
        "phase_results_processors": [processor],
    }


# --------------------------------------------------------------------------------------------
# Searches.


def _knn_clause(vector: list[float], k: int, filters: list[dict[str, Any]]) -> dict[str, Any]:
    # Efficient filtering: the filter inside the knn clause restricts the candidates before
    # the top k is taken (a post-filter could leave fewer than k hits).
    return {"knn": {"vector": {"vector": vector, "k": k, "filter": {"bool": {"filter": filters}}}}}


def _bm25_clause(text: str, filters: list[dict[str, Any]]) -> dict[str, Any]:
    # `match` analyses the text and never parses query syntax; operator "or" ranks any word.
    query = _query_text(text)
    return {
        "bool": {
            "should": [
                {"match": {"text": {"query": query, "operator": "or"}}},
                {"match": {"text.stemmed": {"query": query, "operator": "or"}}},
            ],
            "minimum_should_match": 1,
            "filter": filters,
        }
    }


def knn_query(vector: list[float], k: int, filters: list[dict[str, Any]]) -> dict[str, Any]:
    """Search body: the `k` nearest records passing `filters` (vector already unit length)."""
    return {"size": k, "_source": _NO_VECTORS, "query": _knn_clause(vector, k, filters)}


def bm25_query(
    text: str, filters: list[dict[str, Any]], size: int, *, with_vectors: bool = False
) -> dict[str, Any]:
    """Search body: the best `size` BM25 matches passing `filters`, ties broken server-side by
    (uri, level, section). `with_vectors` keeps vectors in hits (hybrid needs their cosine)."""
    body: dict[str, Any] = {"size": size}
    if not with_vectors:
        body["_source"] = _NO_VECTORS
    body["query"] = _bm25_clause(text, filters)
    body["sort"] = _TIE_SORT
    body["track_scores"] = True
    return body


def recent_query(filters: list[dict[str, Any]], time_field: str, size: int) -> dict[str, Any]:
    """Search body: the `size` newest records passing `filters` by `time_field`, ties broken
    by (uri, level, section)."""
    return {
        "size": size,
        "_source": _NO_VECTORS,
        "query": {"bool": {"filter": filters}},
        "sort": [{time_field: {"order": "desc"}}, *_TIE_SORT[1:]],
    }


def hybrid_query(
    text: str, vector: list[float], filters: list[dict[str, Any]], size: int, k: int
) -> dict[str, Any]:
    """Search body of the `hybrid` compound query, to send with `search_pipeline=<name>` (see
    hybrid_pipeline_body). Vectors stay in hits: dense scores are recomputed from them."""
    return {
        "size": size,
        "query": {
            "hybrid": {"queries": [_bm25_clause(text, filters), _knn_clause(vector, k, filters)]}
        },
    }


def uri_query(account: str, uri: str) -> dict[str, Any]:
    """Every record (level, section, stored copy) of `uri` in `account`."""
    return {"bool": {"filter": [{"term": {"account": account}}, {"term": {"uri": norm_uri(uri)}}]}}


def uri_records_query(account: str, uri: str) -> dict[str, Any]:
    """Search body of `get`: every stored copy of every record of `uri`, vectors included."""
    return {
        "size": MAX_WINDOW,
        "query": uri_query(account, uri),
        "sort": [{"level": {"order": "asc"}}, {"section": {"order": "asc"}}],
    }


def uri_head_query(account: str, uri: str) -> dict[str, Any]:
    """Search body of `head`: the first record of `uri`, without its vector. The newest
    write first: a rewritten record's older copy (a serverless collection keeps it until its
    cleanup) sorts after it."""
    return {
        "size": 1,
        "query": uri_query(account, uri),
        "sort": [
            {"level": {"order": "asc"}},
            {"section": {"order": "asc"}},
            {"written_at": {"order": "desc"}},
        ],
        "_source": _NO_VECTORS,
    }


def msearch_body(index: str, bodies: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """An _msearch of `bodies`, each on `index`: one round trip."""
    return [line for body in bodies for line in ({"index": index}, body)]


def hybrid_msearch_body(
    index: str,
    text: str,
    vector: list[float],
    filters: list[dict[str, Any]],
    depth: int,
    *,
    k: int | None = None,
) -> list[dict[str, Any]]:
    """Client-side hybrid: the k-NN (`k` nearest, default `depth`) and the BM25 (`depth` best)
    rankings in one _msearch round trip."""
    return [
        {"index": index},
        knn_query(vector, depth if k is None else k, filters),
        {"index": index},
        bm25_query(text, filters, depth, with_vectors=True),
    ]


# --------------------------------------------------------------------------------------------
# Writes.


def record_document(rec: IndexRecord, *, dimension: int, stamp: int) -> dict[str, Any]:
    """The _source of one record. Raises ValueError on a bad record."""
    if not rec.account or not rec.uri:
        raise ValueError("IndexRecord.account and IndexRecord.uri are required")
    doc: dict[str, Any] = {
        "record_id": record_id(rec.account, rec.uri, rec.level, rec.section),
        "account": rec.account,
        "uri": norm_uri(rec.uri),
        "level": int(rec.level),
        "section": int(rec.section),
        "context_type": rec.context_type,
        "parent": norm_uri(rec.parent),
        "ancestors": [norm_uri(a) for a in rec.ancestors],
        "text": rec.text or "",
        "abstract": rec.abstract or "",
        "line_start": rec.line_start,
        "line_end": rec.line_end,
        "tags": list(rec.tags),
        "memory_type": rec.memory_type,
        "owner": rec.owner,
        "peer": rec.peer,
        "created_at": to_millis(rec.created_at),
        "updated_at": to_millis(rec.updated_at),
        "written_at": stamp,
    }
    if rec.vector is not None:
        vec = unit_vector(rec.vector, dimension, rec.uri)
        if vec is not None:  # a zero vector cannot rank: the record stays lexical-only
            # k-NN stores float32 anyway: 9 decimals (|x| <= 1, error <= 5e-10, far below what
            # moves a cosine) send a third of the JSON of a double's 17 digits.
            doc["vector"] = [round(x, 9) for x in vec]
    return doc


def bulk_body(
    index: str,
    records: Sequence[IndexRecord],
    *,
    dimension: int,
    stamp: int,
    serverless: bool = False,
) -> list[dict[str, Any]]:
    """Bulk index actions: `_id` = record_id(account, uri, level, section), so a write replaces
    the same key. Serverless collections generate their own `_id` (see index.py)."""
    body: list[dict[str, Any]] = []
    for rec in records:
        doc = record_document(rec, dimension=dimension, stamp=stamp)
        meta: dict[str, Any] = {"_index": index}
        if not serverless:
            meta["_id"] = doc["record_id"]
        body += [{"index": meta}, doc]
    return body


def delete_uris_query(account: str, uris: Sequence[str]) -> dict[str, Any]:
    """Delete-by-query body: every level and section of `uris` in `account`."""
    return {
        "query": {
            "bool": {
                "filter": [
                    {"term": {"account": account}},
                    {"terms": {"uri": [norm_uri(u) for u in uris]}},
                ]
            }
        }
    }


def delete_prefix_query(account: str, prefix: str) -> dict[str, Any]:
    """Delete-by-query body: the records at `prefix` and below it, in `account`."""
    return {"query": {"bool": {"filter": filter_clauses(account, IndexFilter(scopes=[prefix]))}}}


def stale_sections_query(
    account: str, uris: Sequence[str], level: int, keep_ids: Sequence[str]
) -> dict[str, Any]:
    """Delete-by-query body: the section records of (uri, level), for each of `uris`, other
    than `keep_ids`."""
    query: dict[str, Any] = {
        "bool": {
            "filter": [
                {"term": {"account": account}},
                {"terms": {"uri": sorted({norm_uri(u) for u in uris})}},
                {"term": {"level": int(level)}},
            ]
        }
    }
    if keep_ids:
        query["bool"]["must_not"] = [{"ids": {"values": list(keep_ids)}}]
    return {"query": query}


def older_versions_query(record_ids: Sequence[str], stamp: int) -> dict[str, Any]:
    """Serverless: versions of `record_ids` written before `stamp` (superseded copies)."""
    return {
        "query": {
            "bool": {
                "filter": [
                    {"terms": {"record_id": list(record_ids)}},
                    {"range": {"written_at": {"lt": stamp}}},
                ]
            }
        }
    }
