"""find and search (list mode): scope, filters, dense / keywords / hybrid retrieval, event time
decay, optional reranking and intent planning, grouping into memories / resources / skills."""

from __future__ import annotations

import contextvars
import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from skald.domain.access.identity import Identity
from skald.domain.access.visibility import search_scopes, view_of
from skald.domain.errors import (
    InvalidArgument,
    InvalidFilter,
    InvalidURI,
    PermissionDenied,
    Unavailable,
)
from skald.domain.paths.tags import normalize_tags
from skald.domain.paths.uri import VikingURI, classify_uri, from_canonical, parse_uri
from skald.domain.retrieval.crowding import uncrowded
from skald.domain.retrieval.fusion import keyword_query
from skald.domain.retrieval.index_filter import MalformedFilter
from skald.domain.retrieval.sequence import sequence_scores
from skald.domain.text.memoryfile import strip_memory_fields
from skald.domain.timefmt import parse_duration_s, parse_time_bound
from skald.ports import (
    LLM,
    Embedder,
    IndexFilter,
    IndexHit,
    IndexQuery,
    IndexUnsupported,
    IndexVectorMismatch,
    Reranker,
    SearchIndex,
)
from skald.services.fs.filesystem import VikingFS
from skald.services.retrieval.intent import session_intent
from skald.services.retrieval.request import (
    SEARCH_TYPES,
    check_listing,
    checked_mode,
)

# FindRequest is imported from here by most callers, with the service.
from skald.services.retrieval.request import FindRequest as FindRequest
from skald.services.retrieval.results import (
    Found,
    Hit,
    Provenance,
    QueryPlan,
    RetrievalPlan,
)

log = logging.getLogger("skald.retrieval")

GROUPS = {"memory": "memories", "resource": "resources", "skill": "skills"}
MAX_CANDIDATES = 100_000
DEFAULT_EVENT_PROTECTION_S = 7 * 86400.0
EVENT_HALF_LIFE_S = 30 * 86400.0
QUERY_EMBEDDING_THREADS = 4
# Hybrid retrieval asks the index for this many candidates per wanted result, so a part's
# neighbours in its sequence are in the pool its context is taken from (sequence_context).
CANDIDATES_PER_RESULT = 4

# A query embedding running in the background: calling it waits for the vector.
PendingVector = Callable[[], list[float]]
# A query's vector: computed, still being computed, or none (keywords).
QueryVector = list[float] | PendingVector | None


class _EmbeddingFailed(Exception):
    """Carries the embedder's own exception through the index, which must not read it as a
    bad filter."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(str(original))
        self.original = original


@dataclass
class Candidate:
    """One retrievable item after sections collapse: a file, a sidecar or a skill package."""

    uri: str
    context_type: str
    level: int
    score: float
    abstract: str
    tags: list[str]
    match_reason: str
    updated_at: float
    created_at: float
    memory_type: str | None = None
    peer: str | None = None
    origin_score: float | None = None
    time_score: float | None = None
    sources: list[str] = field(default_factory=list)

    def hit(self) -> Hit:
        hit = Hit(
            self.context_type,
            self.uri,
            self.level,
            round(self.score, 6),
            self.abstract,
            self.tags,
            self.match_reason,
        )
        if self.origin_score is not None:
            hit.origin_score = round(self.origin_score, 6)
            hit.time_score = round(self.time_score or 0.0, 6)
        return hit


def _is_event(c: Candidate) -> bool:
    return c.memory_type == "events" or "memory_type=events" in c.tags


def sequence_context(cands: list[Candidate]) -> list[Candidate]:
    """Candidates rescored with the relevance of their neighbours in a sequence of parts
    (skald.domain.retrieval.sequence). Hybrid scores only: a score threshold is compared with the
    rescored value."""
    scores = sequence_scores([(c.uri, c.score) for c in cands])
    if scores is not None:
        for c, score in zip(cands, scores, strict=True):
            c.score = score
    return cands


class RetrievalService:
    def __init__(
        self,
        fs: VikingFS,
        index: SearchIndex,
        embedder: Embedder,
        *,
        reranker: Reranker | None = None,
        llm: LLM | None = None,
        recent_messages: Callable[[Identity, str, int], list[str]] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.fs = fs
        self.index = index
        self.embedder = embedder
        self.reranker = reranker
        self.llm = llm
        self.recent_messages = recent_messages
        self.clock = clock
        self._embedding_pool: ThreadPoolExecutor | None = None
        self._pool_guard = threading.Lock()

    def embed_query_early(self, req: FindRequest) -> PendingVector | None:
        """Starts embedding the query of a semantic or hybrid request now, so the model runs
        while the request is checked and routed to a worker thread. None when the request
        will not use it: keywords only, no query, or a session whose recent messages may
        rewrite the query."""
        if SEARCH_TYPES.get(req.search_type) not in {"dense", "hybrid"} or not req.query.strip():
            return None
        if req.session_id and self.llm is not None and self.recent_messages is not None:
            return None  # plan_queries may rewrite it
        return self._embed_in_background(req.query)

    def _embed_in_background(self, text: str) -> PendingVector:
        """Starts embedding `text` in another thread; the returned callable waits for it. The
        index then scores the keyword side while the model runs (onnxruntime releases the
        GIL)."""
        with self._pool_guard:
            if self._embedding_pool is None:
                self._embedding_pool = ThreadPoolExecutor(
                    QUERY_EMBEDDING_THREADS, thread_name_prefix="skald-query-embedding"
                )
            # In this call's context: the texts embedded are metered to its caller.
            future: Future[list[list[float]]] = self._embedding_pool.submit(
                contextvars.copy_context().run, self.embedder.embed, [text]
            )

        def vector() -> list[float]:
            try:
                return list(future.result()[0])
            except Exception as exc:
                raise _EmbeddingFailed(exc) from exc

        return vector

    # ---------------------------------------------------------------- request -> filter

    def scopes(self, identity: Identity, targets: list[str]) -> list[VikingURI]:
        """The index scopes of a request: each target intersected with the caller's visible
        roots (`viking://user` is a user's own space, `viking://` every visible root); no
        target means the caller's user space, shared resources and the agent's skills."""
        return search_scopes(
            identity,
            [
                parse_uri(raw, user_id=identity.user_id, privileged=identity.privileged)
                for raw in targets
            ],
        )

    def build_filter(self, identity: Identity, req: FindRequest) -> IndexFilter:
        now = self.clock()
        time_field = req.time_field or "updated_at"
        if time_field not in {"updated_at", "created_at"}:
            raise InvalidArgument("time_field must be updated_at or created_at")
        scopes = self.scopes(identity, req.target_uri)
        since = parse_time_bound(req.since, now, "since")
        until = parse_time_bound(req.until, now, "until")
        if since is not None and until is not None and since > until:
            raise InvalidArgument("since is after until")
        excludes = [
            str(parse_uri(u, user_id=identity.user_id, privileged=identity.privileged))
            for u in req.exclude_uris
        ]
        excludes.extend(self._other_peer_scopes(identity))
        if req.filter is not None and not isinstance(req.filter, dict):
            raise InvalidFilter("filter must be an object")
        return IndexFilter(
            scopes=[str(s) for s in scopes],
            exclude_scopes=excludes,
            context_types=req.context_type,
            levels=req.level,
            tags_all=normalize_tags(req.tags),
            time_field=time_field,
            since=since,
            until=until,
            tree=req.filter,
        )

    def _other_peer_scopes(self, identity: Identity) -> list[str]:
        if identity.actor_peer is None:
            return []
        peers_dir = identity.user_root.child("peers")
        everyone = replace(identity, actor_peer=None)  # to list the peers being hidden
        if not self.fs.is_dir(everyone, peers_dir):
            return []
        return [
            str(e.uri)
            for e in self.fs.children(everyone, peers_dir, show_hidden=False)
            if e.is_dir and e.uri.name != identity.actor_peer
        ]

    # ---------------------------------------------------------------- retrieval

    def retrieve(
        self,
        identity: Identity,
        req: FindRequest,
        *,
        queries: list[str] | None = None,
        limit: int | None = None,
        pending: PendingVector | None = None,
    ) -> tuple[list[Candidate], RetrievalPlan]:
        """Collapsed, decayed, sorted candidates (best first) and a plan for telemetry.
        `pending` is the query's embedding started by `embed_query_early`."""
        mode = checked_mode(req)
        flt = self.build_filter(identity, req)
        want = limit or req.limit
        protection = self._decay_protection(req.events_time_decay_protection)
        texts = queries or [req.query]
        if not any(t.strip() for t in texts):
            mode = "browse"
        vectors = self._vectors(mode, texts, pending if texts == [req.query] else None)
        # `limit` counts final results: sections merge into files and sidecars give way to
        # the files below them, so the index is asked again, deeper, until `want` results
        # survive or it has no more candidates.
        per_result = CANDIDATES_PER_RESULT if mode == "hybrid" else 2
        fetch = min(max(want * per_result, 20), MAX_CANDIDATES)
        while True:
            pool, exhausted = self._pool(
                identity, mode, texts, vectors, flt, fetch, req.score_threshold
            )
            if protection is not None and any(_is_event(c) for c in pool.values()):
                # Decay can demote events below hits that were not fetched: look 3x deeper.
                pool, exhausted = self._pool(
                    identity,
                    mode,
                    texts,
                    vectors,
                    flt,
                    min(fetch * 3, MAX_CANDIDATES),
                    req.score_threshold,
                )
            cands = self._ranked(
                req, list(pool.values()), protection, want, in_context=mode == "hybrid"
            )
            final = uncrowded(cands, lambda c: c.uri, want)
            if len(final) >= want or exhausted or fetch >= MAX_CANDIDATES:
                break
            fetch = min(fetch * 4, MAX_CANDIDATES)
        return final, RetrievalPlan(mode, texts, len(cands))

    def _vectors(
        self, mode: str, texts: list[str], early: PendingVector | None
    ) -> list[QueryVector]:
        """The query vectors of a retrieval: the early embedding of its one query, one
        started in the background (a single hybrid query: the index scores keywords
        meanwhile), all of them now, or none (keywords, browsing)."""
        if early is not None and mode in {"dense", "hybrid"}:
            return [early]
        if mode == "hybrid" and len(texts) == 1:
            return [self._embed_in_background(texts[0])]
        if mode in {"dense", "hybrid"}:
            return list(self.embedder.embed(texts))
        return [None] * len(texts)

    def _ranked(
        self,
        req: FindRequest,
        cands: list[Candidate],
        protection: float | None,
        want: int,
        *,
        in_context: bool = False,
    ) -> list[Candidate]:
        """Candidates put in their sequence context (`in_context`), decayed, reranked, best
        first and above the threshold. Context comes before decay, so an event's score stays
        its `origin_score` times its `time_score`."""
        if in_context:
            cands = sequence_context(cands)
        if protection is not None:
            self._decay(cands, protection)
        if self.reranker is not None and req.query.strip() and cands:
            cands.sort(key=lambda c: -c.score)
            cands = self._rerank(req.query, cands[: 2 * want]) + cands[2 * want :]
        if req.query.strip():
            cands.sort(key=lambda c: (-c.score, c.uri))
        if req.score_threshold is not None:
            cands = [c for c in cands if c.score >= req.score_threshold]
        return cands

    def _pool(
        self,
        identity: Identity,
        mode: str,
        texts: list[str],
        vectors: list[QueryVector],
        flt: IndexFilter,
        fetch: int,
        threshold: float | None,
    ) -> tuple[dict[str, Candidate], bool]:
        """Merged candidates, and whether the index gave every record it had (each search
        returned fewer than `fetch` hits)."""
        pool: dict[str, Candidate] = {}
        exhausted = True
        for text, vector in zip(texts, vectors, strict=True):
            hits, returned = self._search(identity, mode, text, vector, flt, fetch, threshold)
            exhausted = exhausted and returned < fetch
            for hit in hits:
                self._merge(pool, hit)
        return pool, exhausted

    def _search(
        self,
        identity: Identity,
        mode: str,
        text: str,
        vector: QueryVector,
        flt: IndexFilter,
        fetch: int,
        threshold: float | None,
    ) -> tuple[list[IndexHit], int]:
        """The visible hits of one query, and how many the index returned."""
        if mode == "browse":
            # No query: a filter-only listing, newest first, every hit scored 0.
            query = IndexQuery(account=identity.account_id, mode="recent", limit=fetch, filter=flt)
        else:
            query = IndexQuery(
                account=identity.account_id,
                mode=mode,
                limit=fetch,
                vector=None if callable(vector) else vector,
                vector_source=vector if callable(vector) else None,
                text=keyword_query(text),
                filter=flt,
                score_threshold=threshold,
            )
        try:
            hits = self.index.search(query)
        except _EmbeddingFailed as exc:
            raise exc.original from None
        except MalformedFilter as exc:  # the caller's filter; any other error is the server's
            raise InvalidFilter(str(exc)) from None
        except IndexVectorMismatch as exc:
            log.warning("retrieval refused: the embedder and the index disagree: %s", exc)
            raise Unavailable(
                f"Retrieval is misconfigured: the embedding model and the search index "
                f"disagree on the vector size ({exc}). Reindex, or configure the model the "
                "index was built with",
                {"service": "search index", "reason": str(exc)},
            ) from None
        except IndexUnsupported as exc:
            raise InvalidArgument(str(exc)) from None
        return self._visible(identity, hits), len(hits)

    @staticmethod
    def _visible(identity: Identity, hits: list[IndexHit]) -> list[IndexHit]:
        """The filter's scopes already keep to the caller's view; this second check, per hit,
        keeps a hit out even if a filter were built wrong (and hides other peers' subtrees
        below another user's space, which the filter's exclusions do not list)."""
        view = view_of(identity)
        out = []
        for hit in hits:
            try:
                uri = from_canonical(hit.record.uri)
            except InvalidURI:
                continue  # a record no read route could serve
            if view.allows(uri):
                out.append(hit)
        return out

    @staticmethod
    def _merge(pool: dict[str, Candidate], hit: IndexHit) -> None:
        rec = hit.record
        uri = rec.uri
        level = rec.level
        if rec.context_type == "skill":
            root = classify_uri(from_canonical(uri)).skill_root
            if root is None:
                return  # a skills directory's own L0/L1 lists packages: it is not a skill
            uri = str(root.child("SKILL.md"))
            level = 2
        parts = []
        if hit.dense_score is not None:
            parts.append(f"semantic {hit.dense_score:.3f}")
        if hit.lexical_score is not None and hit.lexical_score > 0:
            parts.append(f"keywords {hit.lexical_score:.3f}")
        if rec.section and rec.line_start is not None:
            parts.append(f"lines {rec.line_start}-{rec.line_end}")
        reason = "; ".join(parts) or "match"
        found = pool.get(uri)
        if found is not None:
            if hit.score > found.score:
                found.score, found.match_reason = hit.score, reason
            if rec.uri not in found.sources:
                found.sources.append(rec.uri)
            return
        pool[uri] = Candidate(
            uri,
            rec.context_type,
            level,
            hit.score,
            rec.abstract,
            list(rec.tags),
            reason,
            rec.updated_at,
            rec.created_at,
            rec.memory_type,
            rec.peer,
            sources=[rec.uri],
        )

    def _decay_protection(self, value: str | None) -> float | None:
        if value is None:
            return DEFAULT_EVENT_PROTECTION_S
        if value.strip() == "0":
            return 0.0
        if value.strip().lower() in {"off", "none", "inf"}:
            return None
        return parse_duration_s(value, "events_time_decay_protection")

    def _decay(self, cands: list[Candidate], protection: float) -> None:
        now = self.clock()
        for c in cands:
            if not _is_event(c):
                continue
            age = max(0.0, now - max(c.created_at, 0.0) - protection)
            factor = math.pow(0.5, age / EVENT_HALF_LIFE_S)
            c.origin_score, c.time_score = c.score, factor
            c.score = c.score * factor

    def _rerank(self, query: str, cands: list[Candidate]) -> list[Candidate]:
        assert self.reranker is not None
        try:
            scores = self.reranker.rerank(query, [c.abstract or c.uri for c in cands])
        except Exception as exc:  # a failed reranker leaves the first-stage order
            log.warning("reranker failed: %s", exc)
            return cands
        for c, s in zip(cands, scores, strict=True):
            c.score = float(s)
        return cands

    # ---------------------------------------------------------------- find / search

    def find(
        self, identity: Identity, req: FindRequest, *, pending: PendingVector | None = None
    ) -> Found:
        return self.find_planned(identity, req, pending=pending)[0]

    def find_planned(
        self, identity: Identity, req: FindRequest, *, pending: PendingVector | None = None
    ) -> tuple[Found, RetrievalPlan]:
        """find's result, and how it was retrieved (`retrieve`'s plan: the search mode, the
        queries, the candidates considered), which a request's telemetry reports."""
        if not req.query.strip():
            check_listing(req)
        cands, plan = self.retrieve(identity, req, pending=pending)
        return self._result(identity, req, cands[: req.limit]), plan

    def search(
        self, identity: Identity, req: FindRequest, *, pending: PendingVector | None = None
    ) -> Found:
        return self.search_planned(identity, req, pending=pending)[0]

    def search_planned(
        self, identity: Identity, req: FindRequest, *, pending: PendingVector | None = None
    ) -> tuple[Found, RetrievalPlan]:
        """search (list mode): find with the session's intent planning; its result carries
        the intent plan (`query_plan`) when there is one. The retrieval plan as find's."""
        queries, query_plan = self.plan_queries(identity, req)
        if not any(q.strip() for q in queries or [req.query]):
            check_listing(req)
        cands, plan = self.retrieve(identity, req, queries=queries, pending=pending)
        result = self._result(identity, req, cands[: req.limit])
        result.query_plan = query_plan
        return result, plan

    def _result(self, identity: Identity, req: FindRequest, cands: list[Candidate]) -> Found:
        out = Found(total=len(cands))
        groups = {"memories": out.memories, "resources": out.resources, "skills": out.skills}
        for c in cands:
            hit = c.hit()
            if req.read_content:
                hit.content = self._content(identity, c.uri)
            groups[GROUPS.get(c.context_type, "resources")].append(hit)
        if req.include_provenance:
            out.provenance = [Provenance(c.uri, c.sources, c.match_reason) for c in cands]
        return out

    def _content(self, identity: Identity, uri: str) -> str:
        try:
            return strip_memory_fields(self.fs.read_text(identity, from_canonical(uri)))
        except Exception:  # a hit removed since indexing reads as empty
            return ""

    # ---------------------------------------------------------------- intent planning

    def plan_queries(
        self, identity: Identity, req: FindRequest
    ) -> tuple[list[str] | None, QueryPlan | None]:
        # The same condition as embed_query_early's (kept inline: mypy narrows on it).
        if not req.session_id or self.llm is None or self.recent_messages is None:
            return None, None
        try:
            recent = self.recent_messages(identity, req.session_id, 10)
        except PermissionDenied:
            raise
        except Exception:
            return None, None
        if not recent:
            return None, None
        return session_intent(self.llm, recent, req.query)
