"""Search index: derived, rebuildable records (one per uri, level and section)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass
class IndexRecord:
    account: str
    uri: str  # canonical viking:// URI the hit resolves to (a file, or a .abstract.md/.overview.md)
    level: int  # 0 = L0 abstract, 1 = L1 overview, 2 = file
    context_type: str  # memory | resource | skill
    parent: str  # URI of the containing directory
    ancestors: list[str]  # every directory URI above `uri`, "viking://resources" included
    text: str  # what BM25 indexes
    abstract: str = ""  # short summary returned with hits
    vector: list[float] | None = None
    section: int = 0  # 0 = the whole file; n > 0 = n-th heading-aware section of a long file
    line_start: int | None = None  # 1-based line span of the section in the file
    line_end: int | None = None
    tags: list[str] = field(default_factory=list)  # "k=v"
    memory_type: str | None = None
    owner: str | None = None  # user id owning a user-space record
    peer: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0


@dataclass
class IndexFilter:
    """Applied before ranking: a filter never empties a top-k that other records could fill."""

    scopes: list[str] = field(default_factory=list)  # URI prefixes: the URI itself or any ancestor
    exclude_scopes: list[str] = field(default_factory=list)
    context_types: list[str] | None = None
    levels: list[int] | None = None
    tags_all: list[str] = field(default_factory=list)  # every tag must be present
    time_field: str = "updated_at"  # or "created_at"
    since: float | None = None
    until: float | None = None
    # Metadata filter tree: {"op":"and"|"or","conds":[...]} or
    # {"op":"must"|"must_not","field":F,"conds":[values]} or
    # {"op":"range","field":F,"gte"|"gt"|"lte"|"lt":v} or {"op":"prefix","field":F,"prefix":p}.
    # Fields: uri, parent, context_type, level, memory_type, owner, peer, tags, created_at,
    # updated_at.
    tree: dict[str, Any] | None = None


@dataclass
class IndexQuery:
    account: str
    # "dense" | "lexical" | "hybrid", or "recent": every record passing the filter, newest
    # first by the filter's time_field, ties by (uri, level, section), each scored 0.
    mode: str
    limit: int
    vector: list[float] | None = None  # required for dense / hybrid
    text: str | None = None  # required for lexical / hybrid
    filter: IndexFilter = field(default_factory=IndexFilter)
    score_threshold: float | None = None
    # Instead of `vector`: a vector still being computed (the query's embedding, running in
    # another thread). An adapter that can start with the keyword side of a hybrid search
    # asks for it only then, so both overlap.
    vector_source: Callable[[], list[float]] | None = None

    def dense_vector(self) -> list[float] | None:
        """`vector`, or what `vector_source` gives (asked once)."""
        if self.vector is None and self.vector_source is not None:
            self.vector = self.vector_source()
            self.vector_source = None
        return self.vector


@dataclass
class IndexHit:
    record: IndexRecord
    # dense: cosine; lexical: bm25/(bm25+1) in [0, 1); hybrid: normalised RRF in (0, 1]
    score: float
    dense_score: float | None = None
    lexical_score: float | None = None


class IndexUnsupported(Exception):
    """The backend cannot run this kind of query (e.g. k-NN on an engine without it)."""


class IndexVectorMismatch(ValueError):
    """A vector's size is not the index's: the embedder and the index were set up for
    different models. A deployment's mistake, not the caller's: reindex, or configure the
    model the index was built with."""


@runtime_checkable
class SearchIndex(Protocol):
    def upsert(self, records: Sequence[IndexRecord]) -> None:
        """Insert or replace by (account, uri, level, section)."""
        ...

    def delete_uris(self, account: str, uris: Sequence[str]) -> int:
        """Removes every level and section of each URI; returns how many records went. Once
        it returns, no search finds them (read your deletes: a removal answers after it;
        OpenSearch Serverless, which has no refresh control, excepted)."""
        ...

    def delete_prefix(self, account: str, prefix: str) -> int:
        """Removes the records at `prefix` and below it; returns how many went. Searches stop
        finding them before it returns, as with `delete_uris`."""
        ...

    def replace_sections(
        self, account: str, uri: str, level: int, records: Sequence[IndexRecord]
    ) -> None:
        """Atomically replaces every section record of (uri, level) by `records`."""
        ...

    def replace_many(
        self, account: str, sets: Mapping[tuple[str, int], Sequence[IndexRecord]]
    ) -> None:
        """`replace_sections` for every (uri, level) of `sets`, in one write (atomic where
        the backend is): a batch of files costs one transaction or bulk request, not one
        per file."""
        ...

    def get(self, account: str, uri: str) -> list[IndexRecord]: ...

    def head(self, account: str, uri: str) -> IndexRecord | None:
        """The first record of `uri` (lowest level, then section), without its vector; None
        when it has none. What a reader of one field of a file (its abstract) asks for: a
        large document has thousands of sections."""
        ...

    def heads(self, account: str, uris: Sequence[str]) -> dict[str, IndexRecord]:
        """`head` of each URI in one call (one request to a remote engine: a directory's
        refresh asks for every listed file's abstract); URIs with no record are left out."""
        ...

    def get_many(self, account: str, uris: Sequence[str]) -> dict[str, list[IndexRecord]]:
        """`get` of each URI in one call (one request to a remote engine for a few URIs);
        every URI asked for is a key, with [] when it has no record. Vectors included: meant
        for URIs with few records (a directory's sidecars), not for large documents."""
        ...

    def search(self, query: IndexQuery) -> list[IndexHit]:
        """Best first. Raises MalformedFilter (skald.domain.retrieval.index_filter) for a
        filter it cannot apply, IndexVectorMismatch for a query vector of another size than
        the index's and IndexUnsupported for a mode the backend lacks."""
        ...

    def count(self, account: str, flt: IndexFilter | None = None) -> int: ...

    def scroll(
        self,
        account: str,
        flt: IndexFilter | None = None,
        *,
        limit: int = 100,
        cursor: str | None = None,
    ) -> tuple[list[IndexRecord], str | None]:
        """One page of the records `flt` matches, in a stable order, without their vectors;
        the second value is the cursor of the next page (None on the last one). Raises
        ValueError for a cursor this index did not hand out or a limit below 1."""
        ...
