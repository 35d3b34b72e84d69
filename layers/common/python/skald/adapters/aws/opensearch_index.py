"""SearchIndex on OpenSearch: k-NN (HNSW) for dense search, BM25 for lexical, RRF for hybrid.

One OpenSearch index holds every account's records; the account is a keyword term that every
request carries (the adapter adds it, never the caller), so nothing crosses accounts. The
semantics follow the embedded index (skald/adapters/local/searchindex.py):

- A scope matches a record whose uri equals it or has it among its `ancestors`.
- Filters run *before* ranking: the k-NN filter sits inside the knn clause (efficient
  filtering), so a filter never empties a top-k that other records could fill.
- Dense score = cosine. Vectors (stored and query) are L2-normalised here, so the inner product
  IS the cosine; the index uses `innerproduct` and the score OpenSearch returns is mapped back
  (see `cosine_from_score`). `cosinesimil` and `l2` are supported too, with their own inverses.
- Lexical score = bm25 / (bm25 + 1), in [0, 1).
- Hybrid score = reciprocal rank fusion (k = 60) over a dense and a lexical ranking, each
  `max(limit * 4, 50)` deep, divided by its maximum 2 / 61, so rank 1 in both scores 1.
- Ties are broken by (uri, level, section), whatever the mode.

Deliberate differences from the embedded index:
- BM25 statistics are per shard (OpenSearch's), not per account.
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

import hashlib
import json
import math
import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlparse

from opensearchpy import OpenSearch, RequestsAWSV4SignerAuth, RequestsHttpConnection
from opensearchpy.exceptions import RequestError, TransportError

from skald.domain.filter_tree import (
    MAX_TREE_DEPTH,
    RANGE_OPS,
    STRING_FIELDS,
    as_list,
    number_value,
    only_keys,
    string_value,
    tree_field,
)
from skald.domain.fusion import RRF_BEST, RRF_K, rrf_contribution
from skald.ports import IndexFilter, IndexHit, IndexQuery, IndexRecord, IndexUnsupported

MAX_WINDOW = 10_000  # index.max_result_window and the k-NN k limit
_BULK_MAX_DOCS = 500
_BULK_MAX_BYTES = 5_000_000
_BULK_RETRIES = 3
_DBQ_ATTEMPTS = 3
_SCAN_PAGE = 1000
_TERMS_CHUNK = 1000
_TIE_MARGIN = 10
# A match query becomes one clause per token per field; OpenSearch caps a query at 1024.
_MAX_QUERY_WORDS = 256
_MAX_QUERY_CHARS = 4096

_DATE_FIELDS = ("created_at", "updated_at")
_SPACES = ("innerproduct", "cosinesimil", "l2")
_ENGINES = ("faiss", "lucene", "nmslib")
# Search requests leave vectors out of hits: a 1024-d vector is ~20 kB of JSON.
_NO_VECTORS: dict[str, Any] = {"excludes": ["vector"]}
_TIE_SORT: list[dict[str, Any]] = [
    {"_score": {"order": "desc"}},
    {"uri": {"order": "asc"}},
    {"level": {"order": "asc"}},
    {"section": {"order": "asc"}},
]

Auth = Literal["none", "sigv4-es", "sigv4-aoss", "basic"]
Refresh = bool | Literal["wait_for"]


class OpenSearchIndexError(RuntimeError):
    """A write was refused by OpenSearch (per-document bulk errors, delete-by-query failures)."""


# --------------------------------------------------------------------------------------------
# Small pure helpers.


def norm_uri(uri: str) -> str:
    """Canonical form for matching: no trailing slash, except on a bare scheme root."""
    while uri.endswith("/") and not uri.endswith("://"):
        uri = uri[:-1]
    return uri


def record_id(account: str, uri: str, level: int, section: int) -> str:
    """Stable document id of (account, uri, level, section); JSON so no separator is ambiguous."""
    key = json.dumps([account, norm_uri(uri), int(level), int(section)], ensure_ascii=False)
    return hashlib.sha256(key.encode()).hexdigest()


def to_millis(seconds: float) -> int | float:
    """Epoch seconds -> epoch milliseconds, an int when exact (tidy JSON, exact terms)."""
    return _tidy(float(seconds) * 1000.0)


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


def write_stamp() -> int:
    """`written_at` of a write: epoch microseconds, below 2**53 so exact even where a long is
    handled as a double (JSON tooling, osmem)."""
    return time.time_ns() // 1000


def lexical_from_bm25(score: float) -> float:
    return score / (score + 1.0)


def _unit_array(vector: Sequence[float], dimension: int, what: str) -> list[float] | None:
    # Plain floats, no numpy: this module is on the Lambda cold-start path.
    values = [float(x) for x in vector]
    if len(values) != dimension:
        raise ValueError(f"{what}: vector has {len(values)} dimensions, the index {dimension}")
    norm = math.sqrt(math.fsum(x * x for x in values))
    if not math.isfinite(norm):
        raise ValueError(f"{what}: vector is not finite")
    if norm == 0.0:
        return None
    return values if norm == 1.0 else [x / norm for x in values]


def unit_vector(vector: Sequence[float], dimension: int, what: str) -> list[float] | None:
    """`vector` scaled to unit length; None for a zero vector (it cannot rank).
    Raises ValueError on a wrong dimension or a non-finite value."""
    arr = _unit_array(vector, dimension, what)
    if arr is None:
        return None
    return arr




def _query_text(text: str) -> str:
    words = text[:_MAX_QUERY_CHARS].split()
    return " ".join(words[:_MAX_QUERY_WORDS])


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


# --------------------------------------------------------------------------------------------
# Request builders (pure: golden-tested in tests/unit/test_opensearch_requests.py).


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
    if engine not in _ENGINES:
        raise ValueError(f"engine must be one of {', '.join(_ENGINES)}, not {engine!r}")
    if space_type not in _SPACES:
        raise ValueError(f"space_type must be one of {', '.join(_SPACES)}, not {space_type!r}")
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

    "rrf": the score-ranker-processor (OpenSearch 2.19+), rank constant 60 like the
    client-side fusion; its scores are rescaled to the port's normalised RRF.
    "min_max": the normalization-processor (min-max per sub-query, arithmetic mean), scores in
    [0, 1] used as they are."""
    if technique == "rrf":
        processor: dict[str, Any] = {
            "score-ranker-processor": {
                "combination": {"technique": "rrf", "rank_constant": RRF_K}
            }
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


def filter_clauses(account: str, flt: IndexFilter) -> list[dict[str, Any]]:
    """The bool.filter clauses of `flt` for `account` (the account term always comes first).
    Raises ValueError on a malformed filter."""
    if flt.time_field not in _DATE_FIELDS:
        raise ValueError(f"time_field must be updated_at or created_at, not {flt.time_field!r}")
    tree = _tree_query(flt.tree, 0) if flt.tree is not None else None
    clauses: list[dict[str, Any]] = [{"term": {"account": account}}]
    if flt.scopes:
        scope = _scope_query(as_list(flt.scopes))
        if scope is not None:
            clauses.append(scope)
    if flt.exclude_scopes:
        scope = _scope_query(as_list(flt.exclude_scopes))
        clauses.append({"match_none": {}} if scope is None else {"bool": {"must_not": [scope]}})
    if flt.context_types is not None:
        clauses.append(_terms("context_type", as_list(flt.context_types)))
    if flt.levels is not None:
        levels = [flt.levels] if isinstance(flt.levels, int) else list(flt.levels)
        clauses.append(_terms("level", [int(v) for v in levels]))
    for tag in as_list(flt.tags_all):
        clauses.append({"term": {"tags": tag}})
    if flt.since is not None or flt.until is not None:
        bounds: dict[str, Any] = {}
        if flt.since is not None:
            bounds["gte"] = str(to_millis(flt.since))
        if flt.until is not None:
            bounds["lte"] = str(to_millis(flt.until))
        bounds["format"] = "epoch_millis"
        clauses.append({"range": {flt.time_field: bounds}})
    if tree is not None:
        clauses.append(tree)
    return clauses


def _terms(field: str, values: list[Any]) -> dict[str, Any]:
    return {"terms": {field: values}} if values else {"match_none": {}}


def _scope_query(scopes: list[str]) -> dict[str, Any] | None:
    """uri equal to a scope or below it; None when a scheme root scopes everything."""
    norm = [norm_uri(s) for s in scopes]
    if any(s.endswith("://") for s in norm):
        return None
    return {
        "bool": {
            "should": [{"terms": {"uri": norm}}, {"terms": {"ancestors": norm}}],
            "minimum_should_match": 1,
        }
    }


def _tree_query(node: Any, depth: int) -> dict[str, Any]:
    """The metadata filter tree (see IndexFilter.tree) as an OpenSearch query."""
    if depth > MAX_TREE_DEPTH:
        raise ValueError(f"filter nests deeper than {MAX_TREE_DEPTH} levels")
    if not isinstance(node, dict):
        raise ValueError(f"filter node must be an object, got {type(node).__name__}")
    op = node.get("op")
    if op in ("and", "or"):
        only_keys(node, {"op", "conds"})
        conds = node.get("conds")
        if not isinstance(conds, list) or not conds:
            raise ValueError(f"filter op {op!r} needs a non-empty 'conds' list")
        subs = [_tree_query(c, depth + 1) for c in conds]
        if op == "and":
            return {"bool": {"filter": subs}}
        return {"bool": {"should": subs, "minimum_should_match": 1}}
    if op in ("must", "must_not"):
        only_keys(node, {"op", "field", "conds"})
        field_ = tree_field(node)
        values = node.get("conds")
        if not isinstance(values, list):
            values = [values]
        if not values:
            raise ValueError(f"filter op {op!r} needs a non-empty 'conds' list")
        hit = _values_query(field_, values)
        return hit if op == "must" else {"bool": {"must_not": [hit]}}
    if op == "range":
        field_ = tree_field(node)
        bounds = {k: v for k, v in node.items() if k not in ("op", "field")}
        if not bounds or set(bounds) - set(RANGE_OPS):
            raise ValueError(
                f"filter op 'range' takes one or more of {', '.join(RANGE_OPS)}, "
                f"got {sorted(bounds) or 'none'}"
            )
        if field_ == "level":
            levels = {k: _tidy(number_value(v, field_)) for k, v in bounds.items()}
            return {"range": {"level": levels}}
        if field_ in _DATE_FIELDS:
            out: dict[str, Any] = {k: str(to_millis(number_value(v, field_)))
                                   for k, v in bounds.items()}
            out["format"] = "epoch_millis"
            return {"range": {field_: out}}
        raise ValueError(f"filter op 'range' needs a numeric field, not {field_!r}")
    if op == "prefix":
        only_keys(node, {"op", "field", "prefix"})
        field_ = tree_field(node)
        prefix = node.get("prefix")
        if not isinstance(prefix, str):
            raise ValueError("filter op 'prefix' needs a string 'prefix'")
        if field_ == "tags" or field_ in STRING_FIELDS:
            return {"prefix": {field_: {"value": prefix}}}
        raise ValueError(f"filter op 'prefix' does not apply to the numeric field {field_!r}")
    raise ValueError(
        f"unknown filter op {op!r}: expected and, or, must, must_not, range or prefix"
    )


def _values_query(field_: str, values: list[Any]) -> dict[str, Any]:
    if field_ == "tags" or field_ in STRING_FIELDS:
        strs = [string_value(v, field_) for v in values]
        if field_ in ("uri", "parent"):
            strs = [norm_uri(s) for s in strs]
        return {"terms": {field_: strs}}
    numbers = [number_value(v, field_) for v in values]
    if field_ == "level":
        # A fractional level can match no record: leave it out rather than let it be rounded.
        return _terms("level", [int(v) for v in numbers if v.is_integer()])
    return _terms(field_, [to_millis(v) for v in numbers])


def _tidy(value: float) -> int | float:
    return int(value) if value.is_integer() else value










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
        vec = _unit_array(rec.vector, dimension, rec.uri)
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
    the same key. Serverless collections generate their own `_id` (see the module docstring)."""
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
    return {"query": {"bool": {"filter": [
        {"term": {"account": account}},
        {"terms": {"uri": [norm_uri(u) for u in uris]}},
    ]}}}


def delete_prefix_query(account: str, prefix: str) -> dict[str, Any]:
    """Delete-by-query body: the records at `prefix` and below it, in `account`."""
    return {"query": {"bool": {"filter": filter_clauses(account, IndexFilter(scopes=[prefix]))}}}


def stale_sections_query(
    account: str, uris: Sequence[str], level: int, keep_ids: Sequence[str]
) -> dict[str, Any]:
    """Delete-by-query body: the section records of (uri, level), for each of `uris`, other
    than `keep_ids`."""
    query: dict[str, Any] = {"bool": {"filter": [
        {"term": {"account": account}},
        {"terms": {"uri": sorted({norm_uri(u) for u in uris})}},
        {"term": {"level": int(level)}},
    ]}}
    if keep_ids:
        query["bool"]["must_not"] = [{"ids": {"values": list(keep_ids)}}]
    return {"query": query}


def older_versions_query(record_ids: Sequence[str], stamp: int) -> dict[str, Any]:
    """Serverless: versions of `record_ids` written before `stamp` (superseded copies)."""
    return {"query": {"bool": {"filter": [
        {"terms": {"record_id": list(record_ids)}},
        {"range": {"written_at": {"lt": stamp}}},
    ]}}}


# --------------------------------------------------------------------------------------------
# The client.

_AWS_REGION_RE = re.compile(r"\.([a-z]{2}(?:-[a-z]+)+-\d+)\.(?:es|aoss)\.amazonaws\.com")


def build_client(
    endpoint: str,
    *,
    auth: Auth = "none",
    region: str | None = None,
    username: str | None = None,
    password: str | None = None,
    timeout: float = 10.0,
    pool_maxsize: int = 16,
) -> OpenSearch:
    """An OpenSearch client for `endpoint` (a URL; https:// is assumed without a scheme).

    auth: "none"; "basic" (username/password); "sigv4-es" (an OpenSearch Service domain) or
    "sigv4-aoss" (an OpenSearch Serverless collection), both signing every request with the
    default boto3 credentials (refreshed as they rotate). The region defaults to the one in an
    AWS endpoint's host name, then to boto3's."""
    url = endpoint if "://" in endpoint else f"https://{endpoint}"
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError(f"not an OpenSearch endpoint URL: {endpoint!r}")
    https = parsed.scheme == "https"
    options: dict[str, Any] = {
        "hosts": [url],
        "use_ssl": https,
        "verify_certs": https,
        "timeout": timeout,
        "max_retries": 3,
        "retry_on_timeout": True,
        "pool_maxsize": pool_maxsize,
    }
    if auth == "none":
        pass
    elif auth == "basic":
        if not username or password is None:
            raise ValueError("basic auth needs a username and a password")
        options["http_auth"] = (username, password)
    elif auth in ("sigv4-es", "sigv4-aoss"):
        import boto3  # only the AWS modes need it

        session = boto3.Session()
        credentials = session.get_credentials()
        if credentials is None:
            raise ValueError(f"{auth}: no AWS credentials found to sign requests")
        match = _AWS_REGION_RE.search(parsed.hostname)
        region = region or (match.group(1) if match else None) or session.region_name
        if not region:
            raise ValueError(f"{auth}: no AWS region given, none in the endpoint or the config")
        # "es" signs for managed domains, "aoss" for serverless collections.
        service = "es" if auth == "sigv4-es" else "aoss"
        options["http_auth"] = RequestsAWSV4SignerAuth(credentials, region, service)
        options["connection_class"] = RequestsHttpConnection
    else:
        raise ValueError(f"auth must be none, basic, sigv4-es or sigv4-aoss, not {auth!r}")
    return OpenSearch(**options)


# --------------------------------------------------------------------------------------------
# The adapter.


@dataclass
class _Hit:
    key: str  # record_id
    order: tuple[str, int, int]  # (uri, level, section): the tie-break
    score: float
    record: IndexRecord
    stamp: int
    vector: list[float] | None = None


def _record(src: dict[str, Any], *, with_vector: bool) -> IndexRecord:
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


def _hit(raw: dict[str, Any], score: float, *, keep_vector: bool = False) -> _Hit:
    src = raw["_source"]
    rec = _record(src, with_vector=False)
    key = src.get("record_id") or record_id(rec.account, rec.uri, rec.level, rec.section)
    vector = src.get("vector") if keep_vector else None
    return _Hit(key, (rec.uri, rec.level, rec.section), score, rec,
                int(src.get("written_at") or 0), vector)


def _newest(hits: Iterable[_Hit]) -> list[_Hit]:
    """One hit per key: the newest version (serverless may briefly hold superseded copies)."""
    best: dict[str, _Hit] = {}
    for h in hits:
        seen = best.get(h.key)
        if seen is None or h.stamp > seen.stamp:
            best[h.key] = h
    return list(best.values())


def _ranked(hits: Iterable[_Hit]) -> list[_Hit]:
    return sorted(_newest(hits), key=lambda h: (-h.score, h.order))


def _error_text(exc: TransportError) -> tuple[str, str]:
    info = exc.info if isinstance(exc.info, dict) else {}
    err = info.get("error", exc.error)
    if isinstance(err, dict):
        return str(err.get("type", "")), str(err.get("reason", ""))
    return str(exc.error), str(err)


def _is_unsupported(status: int, etype: str, reason: str) -> bool:
    if status != 400:
        return False
    text = reason.lower()
    return etype in (
        "unsupported_operation_exception",
        "parsing_exception",
        "named_object_not_found_exception",
        "x_content_parse_exception",
    ) or any(s in text for s in ("not supported", "unknown query", "no registered", "pipeline"))


class OpenSearchIndex:
    """SearchIndex on one OpenSearch index (a managed domain, self-managed OpenSearch, or an
    OpenSearch Serverless VECTORSEARCH collection with `serverless=True`).

    The adapter takes ownership of `client` (close() closes it). It does no I/O at
    construction: call ensure_index() once (idempotent) before use.
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
            dimension=dimension, engine=engine, space_type=space_type, m=m,
            ef_construction=ef_construction, ef_search=ef_search,
        )
        hybrid_pipeline_body(hybrid_technique)  # validates the technique
        self._client = client
        self._index = index
        self._dim = dimension
        self._space = space_type
        self._pipeline = hybrid_pipeline
        self._technique = hybrid_technique
        self._refresh: Refresh = refresh
        self._serverless = serverless
        self._write_timeout = write_timeout

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
            etype, _ = _error_text(exc)
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

    def _refresh_param(self) -> dict[str, Any]:
        return {} if self._refresh is False else {"refresh": self._refresh}

    def _bulk(self, actions: list[dict[str, Any]], *, with_sources: bool) -> list[dict[str, Any]]:
        """Sends `actions` (meta lines, each followed by its source when `with_sources`) in
        chunks; retries items the cluster throttled (429). Returns every item's result."""
        step = 2 if with_sources else 1
        # Serialised once, here: the chunking needs the sizes and the client sends the text.
        ops = ["".join(json.dumps(line, separators=(",", ":")) + "\n"
                       for line in actions[i : i + step])
               for i in range(0, len(actions), step)]
        results: list[dict[str, Any]] = []
        for chunk in self._bulk_chunks(ops):
            pending = chunk
            for attempt in range(_BULK_RETRIES + 1):
                resp = self._client.bulk(
                    body="".join(pending), params={"request_timeout": self._write_timeout},
                    **self._refresh_param(),
                )
                items: list[dict[str, Any]] = resp.get("items", [])
                retry = []
                for op, item in zip(pending, items, strict=True):
                    kind, res = next(iter(item.items()))
                    if res.get("status") == 429 and attempt < _BULK_RETRIES:
                        retry.append(op)
                    else:
                        results.append({kind: res})
                if not retry:
                    break
                pending = retry
                time.sleep(0.2 * 2**attempt)
        errors = [
            (kind, res) for item in results for kind, res in item.items()
            if res.get("error") is not None and not (kind == "delete" and res.get("status") == 404)
        ]
        if errors:
            kind, res = errors[0]
            raise OpenSearchIndexError(
                f"OpenSearch index {self._index!r}: {len(errors)} bulk {kind} operation(s) "
                f"failed, first: {res.get('error')}"
            )
        return results

    @staticmethod
    def _bulk_chunks(ops: list[str]) -> Iterator[list[str]]:
        chunk: list[str] = []
        size = 0
        for op in ops:
            if chunk and (len(chunk) >= _BULK_MAX_DOCS or size + len(op) > _BULK_MAX_BYTES):
                yield chunk
                chunk, size = [], 0
            chunk.append(op)
            size += len(op)
        if chunk:
            yield chunk

    def _index_records(self, records: Sequence[IndexRecord]) -> tuple[list[str], int]:
        """Indexes `records` (unique keys); returns their ids and the write stamp."""
        stamp = write_stamp()
        body = bulk_body(self._index, records, dimension=self._dim, stamp=stamp,
                         serverless=self._serverless)
        self._bulk(body, with_sources=True)
        return [body[i + 1]["record_id"] for i in range(0, len(body), 2)], stamp

    def upsert(self, records: Sequence[IndexRecord]) -> None:
        if not records:
            return
        latest: dict[tuple[str, str, int, int], IndexRecord] = {}
        for rec in records:  # the last record of a key wins
            latest[(rec.account, norm_uri(rec.uri), int(rec.level), int(rec.section))] = rec
        ids, stamp = self._index_records(list(latest.values()))
        if self._serverless:
            for chunk in _chunks(ids, _TERMS_CHUNK):
                self._scan_delete(older_versions_query(chunk, stamp))

    def delete_uris(self, account: str, uris: Sequence[str]) -> int:
        uris = list(uris)
        return sum(self._delete(delete_uris_query(account, chunk))
                   for chunk in _chunks(uris, _TERMS_CHUNK))

    def delete_prefix(self, account: str, prefix: str) -> int:
        return self._delete(delete_prefix_query(account, prefix))

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
                if rec.account != account or norm_uri(rec.uri) != norm_uri(uri) or \
                        int(rec.level) != int(level):
                    raise ValueError("replace_sections: every record must have the given "
                                     "account, uri and level")
                latest[(norm_uri(uri), int(level), int(rec.section))] = rec
        ids, stamp = self._index_records(list(latest.values())) if latest else ([], 0)
        kept: dict[tuple[str, int], list[str]] = {}
        for key, rid in zip(latest, ids, strict=True):
            kept.setdefault((key[0], key[1]), []).append(rid)
        stamp = stamp or write_stamp()
        for level, uris in sorted(by_level.items()):
            for chunk in _chunks(sorted(uris), _TERMS_CHUNK):
                if self._serverless:
                    stale = stale_sections_query(account, chunk, level, [])
                    stale["query"]["bool"]["filter"].append(
                        {"range": {"written_at": {"lt": stamp}}})
                    self._scan_delete(stale)
                else:
                    keep = [rid for u in chunk for rid in kept.get((u, level), [])]
                    self._delete(stale_sections_query(account, chunk, level, keep))

    def _delete(self, body: dict[str, Any]) -> int:
        if self._serverless:
            return self._scan_delete(body)
        if self._refresh is False:
            # Delete-by-query only sees refreshed documents: make every earlier write visible.
            self._client.indices.refresh(index=self._index)
        deleted = 0
        for attempt in range(_DBQ_ATTEMPTS):
            resp = self._client.delete_by_query(
                index=self._index, body=body, conflicts="proceed",
                refresh=self._refresh is not False,
                params={"request_timeout": self._write_timeout},
            )
            deleted += int(resp.get("deleted", 0))
            if resp.get("failures"):
                raise OpenSearchIndexError(
                    f"OpenSearch index {self._index!r}: delete by query failed: "
                    f"{resp['failures'][0]}"
                )
            # A concurrent write changed a matching document under us (conflicts=proceed
            # skipped it): it still matches, so another pass deletes the new version.
            if not resp.get("version_conflicts") or attempt == _DBQ_ATTEMPTS - 1:
                break
            if self._refresh is False:
                self._client.indices.refresh(index=self._index)
        return deleted

    def _scan_delete(self, body: dict[str, Any]) -> int:
        """Delete-by-query without _delete_by_query (serverless): page through the matching
        ids in a stable order, delete them by id in bulk."""
        search: dict[str, Any] = {
            "size": _SCAN_PAGE,
            "_source": False,
            "query": body["query"],
            "sort": [{"record_id": {"order": "asc"}}, {"written_at": {"order": "asc"}}],
        }
        deleted = 0
        while True:
            hits = self._client.search(index=self._index, body=search)["hits"]["hits"]
            if not hits:
                return deleted
            actions = [{"delete": {"_index": self._index, "_id": h["_id"]}} for h in hits]
            for item in self._bulk(actions, with_sources=False):
                if item.get("delete", {}).get("result") == "deleted":
                    deleted += 1
            if len(hits) < _SCAN_PAGE:
                return deleted
            search["search_after"] = hits[-1]["sort"]

    # ---- reads ----

    def get(self, account: str, uri: str) -> list[IndexRecord]:
        body = {
            "size": MAX_WINDOW,
            "query": {"bool": {"filter": [
                {"term": {"account": account}}, {"term": {"uri": norm_uri(uri)}},
            ]}},
            "sort": [{"level": {"order": "asc"}}, {"section": {"order": "asc"}}],
        }
        hits = self._client.search(index=self._index, body=body)["hits"]["hits"]
        newest: dict[str, tuple[int, IndexRecord]] = {}
        for raw in hits:
            src = raw["_source"]
            rec = _record(src, with_vector=True)
            key = src.get("record_id") or record_id(rec.account, rec.uri, rec.level, rec.section)
            stamp = int(src.get("written_at") or 0)
            if key not in newest or stamp > newest[key][0]:
                newest[key] = (stamp, rec)
        return sorted((r for _, r in newest.values()), key=lambda r: (r.level, r.section))

    def count(self, account: str, flt: IndexFilter | None = None) -> int:
        clauses = filter_clauses(account, flt or IndexFilter())
        resp = self._client.count(index=self._index,
                                  body={"query": {"bool": {"filter": clauses}}})
        return int(resp["count"])

    def search(self, query: IndexQuery) -> list[IndexHit]:
        mode = query.mode
        if mode not in ("dense", "lexical", "hybrid"):
            raise ValueError(f"unknown search mode {mode!r}: expected dense, lexical or hybrid")
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
        # Built (and so validated) before anything else: a bad filter always fails.
        filters = filter_clauses(query.account, query.filter)
        limit = min(query.limit, MAX_WINDOW)
        if limit == 0:
            return []
        if mode == "dense":
            assert qvec is not None
            out = [IndexHit(h.record, h.score, h.score, None)
                   for h in self._dense(qvec, filters, limit)]
        elif mode == "lexical":
            out = [IndexHit(h.record, h.score, None, h.score)
                   for h in self._lexical(text, filters, limit)]
        else:
            assert qvec is not None
            if self._pipeline is not None:
                out = self._hybrid_pipeline(text, qvec, filters, limit)
            else:
                out = self._hybrid(text, qvec, filters, limit)
        if query.score_threshold is not None:
            out = [h for h in out if h.score >= query.score_threshold]
        return out

    # ---- ranking ----

    def _unsupported(self, what: str, status: int, etype: str, reason: str) -> IndexUnsupported:
        return IndexUnsupported(
            f"OpenSearch index {self._index!r}: the cluster rejected the {what} query "
            f"(HTTP {status} {etype}: {reason}). Dense and hybrid search need the k-NN plugin "
            "(and, for server-side fusion, the neural-search plugin and a hybrid search "
            "pipeline); lexical search still works."
        )

    def _search(self, body: dict[str, Any], what: str, **params: Any) -> list[dict[str, Any]]:
        try:
            resp = self._client.search(index=self._index, body=body, **params)
        except RequestError as exc:
            etype, reason = _error_text(exc)
            if what != "bm25" and _is_unsupported(400, etype, reason):
                raise self._unsupported(what, 400, etype, reason) from exc
            raise
        hits: list[dict[str, Any]] = resp["hits"]["hits"]
        return hits

    def _msearch(self, body: list[dict[str, Any]], whats: list[str]) -> list[list[dict[str, Any]]]:
        resp = self._client.msearch(body=body)
        out: list[list[dict[str, Any]]] = []
        for item, what in zip(resp["responses"], whats, strict=True):
            err = item.get("error")
            if err is not None:
                status = int(item.get("status", 500))
                etype, reason = (str(err.get("type", "")), str(err.get("reason", ""))) \
                    if isinstance(err, dict) else ("", str(err))
                if what != "bm25" and _is_unsupported(status, etype, reason):
                    raise self._unsupported(what, status, etype, reason)
                raise OpenSearchIndexError(
                    f"OpenSearch index {self._index!r}: {what} search failed: HTTP {status} "
                    f"{etype}: {reason}"
                )
            out.append(item["hits"]["hits"])
        return out

    def _knn_hits(self, raw: list[dict[str, Any]]) -> list[_Hit]:
        return [_hit(r, cosine_from_score(float(r["_score"]), self._space)) for r in raw]

    def _dense(
        self,
        qvec: list[float],
        filters: list[dict[str, Any]],
        k: int,
        first: list[dict[str, Any]] | None = None,
        fetched: int = 0,
    ) -> list[_Hit]:
        """The best k by cosine, ties broken by (uri, level, section). k-NN returns *some* k
        of tied records, so it asks for a few more and, while a tie reaches the end of what
        came back, for more still."""
        fetch = fetched or min(k + _TIE_MARGIN, MAX_WINDOW)
        raw = first
        while True:
            if raw is None:
                raw = self._search(knn_query(qvec, fetch, filters), "k-NN")
            ranked = _ranked(self._knn_hits(raw))
            full = len(raw) >= fetch and fetch < MAX_WINDOW
            if not full or (len(ranked) > k and ranked[k - 1].score != ranked[-1].score):
                return ranked[:k]
            fetch, raw = min(fetch * 2, MAX_WINDOW), None

    def _lexical(
        self,
        text: str,
        filters: list[dict[str, Any]],
        size: int,
        raw: list[dict[str, Any]] | None = None,
        *,
        keep_vector: bool = False,
    ) -> list[_Hit]:
        if raw is None:
            raw = self._search(bm25_query(text, filters, size), "bm25")
        # The server sorted by (score, uri, level, section) already; re-sorting on the mapped
        # score keeps that order and drops superseded copies (serverless).
        hits = [_hit(r, lexical_from_bm25(float(r["_score"])), keep_vector=keep_vector)
                for r in raw if r.get("_score") is not None]
        return _ranked(hits)[:size]

    def _hybrid(
        self, text: str, qvec: list[float], filters: list[dict[str, Any]], limit: int
    ) -> list[IndexHit]:
        depth = min(max(limit * 4, 50), MAX_WINDOW)
        fetch = min(depth + _TIE_MARGIN, MAX_WINDOW)
        # k-NN asks for a tie margin beyond the depth, see _dense.
        body = hybrid_msearch_body(self._index, text, qvec, filters, depth, k=fetch)
        knn_raw, bm25_raw = self._msearch(body, ["k-NN", "bm25"])
        dense = self._dense(qvec, filters, depth, knn_raw, fetch)
        lexical = self._lexical(text, filters, depth, bm25_raw, keep_vector=True)
        fused: dict[str, float] = {}
        hits: dict[str, _Hit] = {}
        for ranking in (dense, lexical):
            for rank, h in enumerate(ranking, start=1):
                fused[h.key] = fused.get(h.key, 0.0) + rrf_contribution(rank)
                hits.setdefault(h.key, h)
        dense_known = {h.key: h.score for h in dense}
        lexical_known = {h.key: h.score for h in lexical}
        for h in lexical:  # a lexical-only hit still gets its cosine when it has a vector
            if h.key not in dense_known and h.vector is not None:
                dense_known[h.key] = _cosine(qvec, h.vector)
        order = sorted(fused, key=lambda key: (-fused[key], hits[key].order))[:limit]
        return [
            IndexHit(hits[key].record, min(fused[key] / RRF_BEST, 1.0),
                     dense_known.get(key), lexical_known.get(key))
            for key in order
        ]

    def _hybrid_pipeline(
        self, text: str, qvec: list[float], filters: list[dict[str, Any]], limit: int
    ) -> list[IndexHit]:
        depth = min(max(limit * 4, 50), MAX_WINDOW)
        raw = self._search(hybrid_query(text, qvec, filters, depth, depth), "hybrid",
                           search_pipeline=self._pipeline)
        scale = (RRF_K + 1) / 2.0 if self._technique == "rrf" else 1.0
        hits = _ranked(_hit(r, min(float(r["_score"]) * scale, 1.0), keep_vector=True)
                       for r in raw)[:limit]
        if not hits:
            return []
        # The pipeline returns fused scores only: the BM25 part comes from one more request
        # restricted to these hits, the cosine from their vectors.
        ids = [h.key for h in hits]
        lex_body = bm25_query(text, [*filters, {"terms": {"record_id": ids}}], len(ids))
        lexical = {h.key: h.score for h in self._lexical(text, filters, len(ids),
                                                          self._search(lex_body, "bm25"))}
        return [
            IndexHit(h.record, h.score,
                     _cosine(qvec, h.vector) if h.vector is not None else None,
                     lexical.get(h.key))
            for h in hits
        ]


def _cosine(unit_query: list[float], stored: Sequence[float]) -> float:
    # Stored vectors are unit length (record_document), so the dot product is the cosine.
    dot = math.fsum(a * float(b) for a, b in zip(unit_query, stored, strict=True))
    return min(1.0, max(-1.0, dot))


__all__ = [
    "MAX_WINDOW",
    "RRF_K",
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
