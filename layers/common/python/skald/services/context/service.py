"""search(mode="context"): one request returns a ready-to-inject, budgeted context block.

Pipeline: query understanding (optional session-aware expansion) -> retrieval (per-bucket
quotas or one global retrieval) -> filtering (navigation directories, exclusions, recall
ledger cooling, other-peer penalty) -> budgeted assembly (domain/retrieval/context_budget.py) ->
optional LLM rewrite into a cited digest -> the ledger records this turn.

Decisions where the contract is silent (see also the report of the change):
- `origin` is "self" for the user's own space and the actor peer's subtree (full weight) and
  "peer:<id>" for another peer's (the ones `other_peer_penalty` demotes). Without an actor
  peer every peer subtree is "another peer". `peer_scope="all"` sweeps the other peers even
  for an actor (that is what the penalty is for); "actor" keeps only the actor's subtree.
- The default penalty is 0.1 for events and entities and 0.02 for every other category; a
  number sets every category, an object overrides the categories it names. Values 0..1.
- A successful rewrite fills `digest` and keeps `rendered` and `entries`; the digest is not
  part of `used_tokens` (it has its own estimate in `rewrite_usage`). A `NO_RELEVANT_MEMORY`
  answer empties entries, rendered and digest and records nothing in the ledger.
- Every request with `dedup_turns` > 0 records one turn (also an empty one), except after
  `no_relevant`. Cooling compares entry URIs; a skill package cools as a whole.
- `quotas: {}` means "no quotas" (one global retrieval of `limit`).

This module is the assembly; the request and its rules live in request.py, entries and their
selection in entries.py, tier texts in texts.py, the LLM steps in llm.py and the budget itself
in skald.domain.retrieval.context_budget.
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from skald.domain.access.identity import Identity
from skald.domain.errors import (
    InvalidArgument,
    InvalidFilter,
    InvalidURI,
    NotFound,
    PermissionDenied,
    QuotaExceeded,
)
from skald.domain.metering.subject import Purpose, purpose
from skald.domain.paths.uri import VikingURI, parse_uri, validate_identifier
from skald.domain.retrieval.context_budget import (
    BUCKETS,
    CATEGORIES,
    TIERS,
    BudgetItem,
    TierRange,
    plan_budget,
    resolve_detail,
    tier_range,
)
from skald.ports import LLM, ChatMessage, RecallLedger
from skald.services.context.entries import (
    Entry,
    bucket_request,
    eligible,
    memory_type_of,
    recall_key,
    select,
)
from skald.services.context.llm import (
    EXPANSION_SCHEMA,
    NO_RELEVANT,
    expansion_prompt,
    parse_queries,
    rewrite,
)
from skald.services.context.request import (
    DEFAULT_PENALTY,
    IGNORED_IN_CONTEXT,
    MAX_QUOTA,
    PURPOSES,
    ContextRequest,
    category_of,
    check_penalty,
    check_quotas,
    is_navigation,
)
from skald.services.context.results import (
    ContextBlock,
    ContextEntry,
    ContextStats,
    Dedup,
    DedupStatus,
    DetailStats,
    ExpansionStatus,
    Fill,
    RewriteStatus,
    TierSpan,
)
from skald.services.context.texts import TierTexts
from skald.services.fs.filesystem import VikingFS
from skald.services.retrieval.service import Candidate, FindRequest, RetrievalService
from skald.services.sessions.service import SessionService

log = logging.getLogger("skald.context")

RECENT_MESSAGES = 10
# Retrieval depth beyond what is selected: preset directories and stale hits are skipped
# after retrieval, and they must not starve the selection.
DEPTH_MARGIN = 8

__all__ = [
    "DEFAULT_PENALTY",
    "DEPTH_MARGIN",
    "IGNORED_IN_CONTEXT",
    "MAX_QUOTA",
    "NO_RELEVANT",
    "PURPOSES",
    "RECENT_MESSAGES",
    "ContextRequest",
    "ContextService",
    "category_of",
    "check_penalty",
    "check_quotas",
    "is_navigation",
]


class ContextService:
    def __init__(
        self,
        retrieval: RetrievalService,
        fs: VikingFS,
        sessions: SessionService,
        ledger: RecallLedger,
        *,
        llm: LLM | None = None,
        expansion_timeout_s: float = 5.0,
        rewrite_timeout_s: float = 20.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.retrieval = retrieval
        self.fs = fs
        self.sessions = sessions
        self.ledger = ledger
        self.llm = llm
        self.expansion_timeout_s = expansion_timeout_s
        self.rewrite_timeout_s = rewrite_timeout_s
        self.clock = clock
        self._tiers = TierTexts(fs)
        # LLM calls run here so a deadline can abandon them; threads start on first use.
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="skald-ctx-llm")

    # ---------------------------------------------------------------- entry point

    def assemble(self, identity: Identity, req: ContextRequest) -> ContextBlock:
        checked = self._check(identity, req)
        quotas = checked.quotas
        queries, expansion = self._expand(identity, req.base, req.query_expansion)
        cooled_keys, dedup = self._cooling(identity, req.base.session_id, req.dedup_turns)
        seer, base = self._scoped(identity, req, checked.excludes)

        want = sum(quotas.values()) if quotas is not None else base.limit
        depth = max(want, 1) + len(cooled_keys) + DEPTH_MARGIN
        raw, searched, errors = self._retrieve(seer, base, quotas, queries, depth)

        counters = {"merged": 0, "cooled": 0}
        pools = {
            bucket: eligible(
                identity, cands, checked.excludes, cooled_keys, checked.penalties, counters
            )
            for bucket, cands in raw.items()
        }
        selected, candidates = select(pools, quotas, base.limit, counters)
        items, origins, stale = self._budget_items(seer, selected, checked.ranges)
        plan = plan_budget(items, req.max_tokens)

        with purpose(Purpose.DIGEST):
            rewrite_status, digest, usage = rewrite(
                req,
                base.query,
                plan,
                self._call_llm if self.llm is not None else None,
                self.rewrite_timeout_s,
            )
        entries = [
            ContextEntry(
                e.item.uri,
                e.item.category,
                e.item.score,
                e.tier,
                e.text,
                origins[e.item.uri],
                e.tokens,
            )
            for e in plan.entries
        ]
        rendered, used = plan.rendered, plan.used_tokens
        tier_counts = plan.tier_counts()
        if rewrite_status == RewriteStatus.NO_RELEVANT:
            entries, rendered, digest, used = [], "", "", 0
            tier_counts = dict.fromkeys(TIERS, 0)
        elif req.dedup_turns and dedup.status == DedupStatus.OK:
            dedup.turn = self._record(identity, base.session_id, entries, dedup)
        dedup.cooled = counters["cooled"]

        stats = ContextStats(
            searched=searched,
            candidates=candidates,
            selected=len(selected),
            returned=len(entries),
            dropped=len(plan.dropped),
            deduped=counters["merged"],
            max_tokens=req.max_tokens,
            used_tokens=used,
            per_entry_cap=plan.per_entry_cap,
            detail=_detail_stats(req.detail, checked.ranges),
            tier_counts=tier_counts,
            fill=Fill(round(used / req.max_tokens, 4), plan.passes),
            query_expansion=expansion,
            queries=queries,
            rewrite=rewrite_status,
            rewrite_usage=usage,
            excluded=len(checked.excludes),
            peer_scope=req.peer_scope,
            dedup=dedup,
            ignored=checked.ignored,
            quotas=quotas,
            stale=stale or None,
            retrieval_errors=errors or None,
        )
        return ContextBlock(entries, rendered, digest, stats)

    # ---------------------------------------------------------------- assembly steps

    def _check(self, identity: Identity, req: ContextRequest) -> _Checked:
        """The request's settings, validated in the order their errors are reported."""
        quotas, ignored = _quotas(req)
        _check_fields(req)
        ranges = resolve_detail(req.detail)
        penalties = check_penalty(req.other_peer_penalty)
        excludes = self._excludes(identity, req.exclude_uris)
        self.retrieval.build_filter(identity, req.base)  # bad time bounds etc. answer 400 here
        return _Checked(quotas, ignored, ranges, penalties, excludes)

    @staticmethod
    def _scoped(
        identity: Identity, req: ContextRequest, excludes: list[VikingURI]
    ) -> tuple[Identity, FindRequest]:
        """Who retrieves, and the list-mode request it retrieves with: "all" sweeps other
        peers too (demoted later), "actor" only its own."""
        seer = replace(identity, actor_peer=None) if req.peer_scope == "all" else identity
        index_excludes = [str(u) for u in excludes]
        if req.peer_scope == "actor" and identity.actor_peer is None:
            index_excludes.append(str(identity.user_root.child("peers")))
        base = replace(
            req.base,
            exclude_uris=index_excludes,
            level=None,
            read_content=False,
            include_provenance=False,
        )
        return seer, base

    def _budget_items(
        self, seer: Identity, selected: list[Entry], ranges: dict[str, TierRange]
    ) -> tuple[list[BudgetItem], dict[str, str], int]:
        """The selected hits with their tier texts, their origins by URI, and how many were
        stale (their texts gone since they were indexed)."""
        items: list[BudgetItem] = []
        origins: dict[str, str] = {}
        stale = 0
        for hit in selected:
            r = tier_range(ranges, hit.category, directory=hit.kind == "dir")
            texts = self._tiers.texts(seer, hit, r)
            if texts is None:
                stale += 1
                continue
            origins[hit.uri] = hit.origin
            items.append(
                BudgetItem(hit.uri, hit.category, round(hit.score, 4), texts, r.start, r.ceiling)
            )
        return items, origins, stale

    # ---------------------------------------------------------------- validation helpers

    @staticmethod
    def _excludes(identity: Identity, raw: Sequence[str]) -> list[VikingURI]:
        if len(raw) > 200:
            raise InvalidArgument("exclude_uris takes at most 200 URIs")
        out: list[VikingURI] = []
        for item in raw:
            uri = parse_uri(item, user_id=identity.user_id, privileged=identity.privileged)
            if uri.is_root:
                raise InvalidURI(item, "excluding viking:// would exclude everything")
            if uri not in out:
                out.append(uri)
        return out

    # ---------------------------------------------------------------- query understanding

    def _expand(
        self, identity: Identity, base: FindRequest, mode: str
    ) -> tuple[list[str], ExpansionStatus]:
        """The queries to retrieve with, and what happened (stats.query_expansion)."""
        plain = [base.query]
        if mode == "off":
            return plain, ExpansionStatus.OFF
        if not base.session_id:
            return plain, ExpansionStatus.NO_SESSION
        if self.llm is None:
            return plain, ExpansionStatus.UNAVAILABLE
        try:
            recent = self.sessions.recent_texts(identity, base.session_id, RECENT_MESSAGES)
        except NotFound:
            return plain, ExpansionStatus.NO_SESSION
        if not recent:
            return plain, ExpansionStatus.NO_MESSAGES
        answer = self._expansion_answer(expansion_prompt(recent, base.query))
        if isinstance(answer, ExpansionStatus):
            return plain, answer
        original = [base.query] if base.query.strip() else []
        extra = parse_queries(answer, original)
        if extra is None:
            return plain, ExpansionStatus.FAILED
        if not extra:
            return plain, ExpansionStatus.UNCHANGED
        return original + extra, ExpansionStatus.USED

    def _expansion_answer(self, prompt: list[ChatMessage]) -> str | ExpansionStatus:
        """The model's answer, or why there is none (a plan limit is the caller's error)."""
        try:
            with purpose(Purpose.QUERY_REWRITE):
                return self._call_llm(
                    prompt,
                    json_schema=EXPANSION_SCHEMA,
                    max_tokens=300,
                    timeout_s=self.expansion_timeout_s,
                )
        except TimeoutError:
            return ExpansionStatus.TIMEOUT
        except QuotaExceeded:
            raise
        except Exception as exc:  # the original query is always a valid plan
            log.warning("query expansion failed: %s", exc)
            return ExpansionStatus.FAILED

    def _call_llm(
        self,
        messages: list[ChatMessage],
        *,
        json_schema: dict[str, Any] | None,
        max_tokens: int,
        timeout_s: float,
    ) -> str:
        """The LLM under a hard deadline: its own retries must not hold the request."""
        assert self.llm is not None
        # The pool's thread runs in this call's context: its account is metered and limited.
        future = self._pool.submit(
            contextvars.copy_context().run,
            self.llm.complete,
            messages,
            json_schema=json_schema,
            max_tokens=max_tokens,
            timeout_s=timeout_s,
        )
        return future.result(timeout=timeout_s)

    # ---------------------------------------------------------------- recall ledger

    def _cooling(
        self, identity: Identity, session_id: str | None, turns: int
    ) -> tuple[set[str], Dedup]:
        dedup = Dedup(turns)
        if not turns or not session_id:
            return set(), dedup
        try:
            self.sessions.get(identity, session_id)
        except NotFound:
            dedup.status = DedupStatus.NO_SESSION
            return set(), dedup
        try:
            history = self.ledger.recent(identity.account_id, identity.user_id, session_id, turns)
        except Exception as exc:  # no cooling is better than no context
            log.warning("recall ledger read failed: %s", exc)
            dedup.status = DedupStatus.ERROR
            return set(), dedup
        dedup.status = DedupStatus.OK
        return {recall_key(uri) for turn in history for uri in turn}, dedup

    def _record(
        self, identity: Identity, session_id: str | None, entries: list[ContextEntry], dedup: Dedup
    ) -> int | None:
        assert session_id is not None
        try:
            return self.ledger.record(
                identity.account_id,
                identity.user_id,
                session_id,
                [e.uri for e in entries],
                self.clock(),
            )
        except Exception as exc:
            log.warning("recall ledger write failed: %s", exc)
            dedup.status = DedupStatus.ERROR
            return None

    # ---------------------------------------------------------------- retrieval

    def _retrieve(
        self,
        identity: Identity,
        base: FindRequest,
        quotas: dict[str, int] | None,
        queries: list[str],
        depth: int,
    ) -> tuple[dict[str, list[Candidate]], dict[str, int], dict[str, str]]:
        """Candidates per bucket ("all" for the global retrieval), how many each bucket
        found, and the buckets that failed (a failing bucket does not fail the request)."""
        plans: dict[str, FindRequest] = {}
        if quotas is None:
            plans["all"] = base
        else:
            for bucket in BUCKETS:
                if quotas.get(bucket, 0) <= 0:
                    continue
                req = bucket_request(base, bucket)
                if req is not None:
                    plans[bucket] = req
        raw: dict[str, list[Candidate]] = {}
        errors: dict[str, str] = {}
        for bucket, req in plans.items():
            try:
                raw[bucket], _ = self.retrieval.retrieve(
                    identity, req, queries=queries, limit=depth
                )
            except (InvalidArgument, InvalidFilter, InvalidURI, PermissionDenied):
                raise  # the caller's request is wrong: the same in every bucket
            except Exception as exc:
                log.warning("context retrieval of %s failed: %s", bucket, exc)
                errors[bucket] = f"{type(exc).__name__}: {exc}"[:300]
                raw[bucket] = []
        if quotas is None:
            searched = dict.fromkeys(CATEGORIES, 0)
            for c in raw.get("all", []):
                searched[category_of(c.context_type, memory_type_of(c))] += 1
        else:
            searched = {b: len(raw.get(b, [])) for b in BUCKETS if quotas.get(b, 0) > 0}
        return raw, searched, errors


@dataclass(frozen=True, slots=True)
class _Checked:
    quotas: dict[str, int] | None  # None: one global retrieval
    ignored: list[str]  # sent fields that mean nothing here (stats.ignored)
    ranges: dict[str, TierRange]
    penalties: dict[str, float]
    excludes: list[VikingURI]


def _quotas(req: ContextRequest) -> tuple[dict[str, int] | None, list[str]]:
    """The quotas (explicit, or the purpose's preset) and the fields they make ignored."""
    quotas = check_quotas(req.quotas)
    ignored = [f for f in IGNORED_IN_CONTEXT if f in req.provided]
    if quotas is None and req.purpose is not None:
        if req.purpose not in PURPOSES:
            raise InvalidArgument(f"Invalid purpose '{req.purpose}': chat or coding")
        quotas = dict(PURPOSES[req.purpose])
    elif quotas is not None and req.purpose is not None:
        ignored.append("purpose")  # explicit quotas win over the preset
    if quotas is not None:
        ignored += [f for f in ("limit", "node_limit") if f in req.provided]
    return quotas, ignored


def _check_fields(req: ContextRequest) -> None:
    session_id = req.base.session_id
    if session_id is not None:
        validate_identifier(session_id, "session id")
    if req.dedup_turns and not session_id:
        raise InvalidArgument("dedup_turns needs a session_id")
    if not 64 <= req.max_tokens <= 32000:
        raise InvalidArgument("max_tokens must be from 64 to 32000")
    if req.query_expansion not in {"off", "auto"}:
        raise InvalidArgument("query_expansion must be off or auto")
    if req.peer_scope not in {"actor", "all"}:
        raise InvalidArgument("peer_scope must be actor or all")
    if req.rewrite not in (True, False, "auto"):
        raise InvalidArgument("rewrite must be true, false or auto")


def _detail_stats(
    requested: str | dict[str, str] | None, ranges: dict[str, TierRange]
) -> DetailStats:
    return DetailStats(
        requested if requested is not None else "auto",
        {c: TierSpan(r.start, r.ceiling) for c, r in ranges.items()},
    )
