"""search(mode="context"): one request returns a ready-to-inject, budgeted context block.

Pipeline: query understanding (optional session-aware expansion) -> retrieval (per-bucket
quotas or one global retrieval) -> filtering (navigation directories, exclusions, recall
ledger cooling, other-peer penalty) -> budgeted assembly (domain/context_budget.py) ->
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
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from skald.domain.context_budget import (
    BUCKETS,
    CATEGORIES,
    MEMORY_BUCKETS,
    RANK,
    TIERS,
    BudgetItem,
    BudgetPlan,
    TierRange,
    plan_budget,
    resolve_detail,
    tier_range,
)
from skald.domain.errors import (
    InvalidArgument,
    InvalidFilter,
    InvalidURI,
    NotFound,
    PermissionDenied,
)
from skald.domain.identity import Identity
from skald.domain.outline import memory_summary, outline_file, split_frontmatter
from skald.domain.tokens import estimate_tokens
from skald.domain.uri import (
    VikingURI,
    classify_uri,
    from_canonical,
    parse_uri,
    validate_identifier,
)
from skald.ports import LLM, ChatMessage, RecallLedger
from skald.services.filesystem import ABSTRACT, OVERVIEW, USER_PRESET, VikingFS
from skald.services.retrieval import Candidate, FindRequest, RetrievalService
from skald.services.sessions import SessionService

log = logging.getLogger("skald.context")

PURPOSES: dict[str, dict[str, int]] = {
    "chat": {"events": 3, "entities": 3, "preferences": 1, "experiences": 1, "resources": 1,
             "skills": 1},
    "coding": {"events": 1, "entities": 2, "preferences": 1, "experiences": 1, "resources": 3,
               "skills": 2},
}
MAX_QUOTA = 50
DEFAULT_PENALTY: dict[str, float] = {c: 0.1 if c in {"events", "entities"} else 0.02
                                     for c in CATEGORIES}
MEMORY_CATEGORIES = frozenset(c for c in CATEGORIES if c not in {"resources", "skills"})
MAX_EXPANSIONS = 3
RECENT_MESSAGES = 10
NO_RELEVANT = "NO_RELEVANT_MEMORY"
# Retrieval depth beyond what is selected: preset directories and stale hits are skipped
# after retrieval, and they must not starve the selection.
DEPTH_MARGIN = 8
# Fields that mean nothing in context mode; reported in stats.ignored when sent.
IGNORED_IN_CONTEXT = ("level", "include_provenance", "telemetry")
_BULLET = re.compile(r"^(?:[-*\u2022]|\d+[.)])\s+(.+)$")


@dataclass
class ContextRequest:
    base: FindRequest  # query, session, filters and limit as in list mode
    query_expansion: str = "auto"
    max_tokens: int = 1600
    quotas: dict[str, int] | None = None
    purpose: str | None = None
    detail: str | dict[str, str] | None = None
    dedup_turns: int = 0
    exclude_uris: list[str] = field(default_factory=list)
    peer_scope: str = "all"
    other_peer_penalty: float | dict[str, float] | None = None
    rewrite: bool | str = False
    rewrite_max_bullets: int = 6
    provided: frozenset[str] = frozenset()  # request fields the caller set explicitly


@dataclass
class _Hit:
    """A retrieved candidate as a context entry: what it is, where it goes, how it scores."""

    uri: str  # entry URI: a file, a directory (for sidecar hits) or a skill's SKILL.md
    key: str  # what exclusion and cooling compare: the package directory for a skill
    kind: str  # file | dir | skill
    category: str
    score: float
    abstract: str
    origin: str


def is_navigation(uri: VikingURI) -> bool:
    """Directories whose sidecars are listings, never context entries: the preset scope
    directories (viking://resources, agent/skills, a user's or peer's preset children, a
    session's directory) and every directory of a memory tree (memory types and their
    template directories such as events/2026/05: a memory's content is its file)."""
    scope, parts = uri.scope, uri.parts
    if scope is None:
        return True
    if scope == "resources":
        return not parts
    if scope == "agent":
        return len(parts) <= 1 or parts[0] == "memories"
    if scope == "system":
        return len(parts) <= 1 or classify_uri(uri).skill_namespace == uri
    if scope != "user":
        return False
    if len(parts) <= 1:
        return True
    rest = parts[1:]
    if rest[0] == "peers":
        if len(rest) <= 2:
            return True
        rest = rest[2:]
    if len(rest) == 1:
        return rest[0] in USER_PRESET
    if rest[0] == "memories":
        return True
    if rest[0] == "sessions":
        return len(rest) == 2 or (len(rest) == 3 and rest[2] == "history")
    return False


def category_of(context_type: str, memory_type: str | None) -> str:
    if context_type == "skill":
        return "skills"
    if context_type == "memory":
        return memory_type if memory_type in MEMORY_BUCKETS else "memories"
    return "resources"


def check_quotas(quotas: Mapping[str, Any] | None) -> dict[str, int] | None:
    if not quotas:
        return None
    unknown = sorted(k for k in quotas if k not in BUCKETS)
    if unknown:
        raise InvalidArgument(f"Unknown quota buckets {unknown}: {', '.join(BUCKETS)}",
                              {"buckets": unknown})
    out: dict[str, int] = {}
    for key, value in quotas.items():
        if isinstance(value, bool) or not isinstance(value, int) or \
                not 0 <= value <= MAX_QUOTA:
            raise InvalidArgument(f"quotas.{key} must be an integer from 0 to {MAX_QUOTA}")
        out[key] = value
    return out


def check_penalty(value: float | Mapping[str, Any] | None) -> dict[str, float]:
    def number(name: str, v: Any) -> float:
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0.0 <= v <= 1.0:
            raise InvalidArgument(f"{name} must be a number from 0 to 1")
        return float(v)

    out = dict(DEFAULT_PENALTY)
    if value is None:
        return out
    if not isinstance(value, Mapping):
        penalty = number("other_peer_penalty", value)
        return dict.fromkeys(CATEGORIES, penalty)
    unknown = sorted(k for k in value if k not in CATEGORIES)
    if unknown:
        raise InvalidArgument(f"Unknown other_peer_penalty categories {unknown}: "
                              f"{', '.join(CATEGORIES)}", {"categories": unknown})
    for key, v in value.items():
        out[key] = number(f"other_peer_penalty.{key}", v)
    return out


class ContextService:
    def __init__(self, retrieval: RetrievalService, fs: VikingFS, sessions: SessionService,
                 ledger: RecallLedger, *, llm: LLM | None = None,
                 expansion_timeout_s: float = 5.0, rewrite_timeout_s: float = 20.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.retrieval = retrieval
        self.fs = fs
        self.sessions = sessions
        self.ledger = ledger
        self.llm = llm
        self.expansion_timeout_s = expansion_timeout_s
        self.rewrite_timeout_s = rewrite_timeout_s
        self.clock = clock
        # LLM calls run here so a deadline can abandon them; threads start on first use.
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="skald-ctx-llm")

    # ---------------------------------------------------------------- entry point

    def assemble(self, identity: Identity, req: ContextRequest) -> dict[str, Any]:
        base = req.base
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
        if base.session_id is not None:
            validate_identifier(base.session_id, "session id")
        if req.dedup_turns and not base.session_id:
            raise InvalidArgument("dedup_turns needs a session_id")
        if not 64 <= req.max_tokens <= 32000:
            raise InvalidArgument("max_tokens must be from 64 to 32000")
        if req.query_expansion not in {"off", "auto"}:
            raise InvalidArgument("query_expansion must be off or auto")
        if req.peer_scope not in {"actor", "all"}:
            raise InvalidArgument("peer_scope must be actor or all")
        if req.rewrite not in (True, False, "auto"):
            raise InvalidArgument("rewrite must be true, false or auto")
        ranges = resolve_detail(req.detail)
        penalties = check_penalty(req.other_peer_penalty)
        excludes = self._excludes(identity, req.exclude_uris)
        self.retrieval.build_filter(identity, base)  # bad time bounds etc. answer 400 here

        queries, expansion = self._expand(identity, base, req.query_expansion)
        cooled_keys, dedup = self._cooling(identity, base.session_id, req.dedup_turns)

        # Who retrieves: "all" sweeps other peers too (demoted below), "actor" only its own.
        seer = replace(identity, actor_peer=None) if req.peer_scope == "all" else identity
        index_excludes = [str(u) for u in excludes]
        if req.peer_scope == "actor" and identity.actor_peer is None:
            index_excludes.append(str(identity.user_root.child("peers")))
        base = replace(base, exclude_uris=index_excludes, level=None, read_content=False,
                       include_provenance=False)

        want = sum(quotas.values()) if quotas is not None else base.limit
        depth = max(want, 1) + len(cooled_keys) + DEPTH_MARGIN
        raw, searched, errors = self._retrieve(seer, base, quotas, queries, depth)

        counters = {"merged": 0, "cooled": 0}
        pools = {bucket: self._eligible(identity, cands, excludes, cooled_keys, penalties,
                                        counters)
                 for bucket, cands in raw.items()}
        selected, candidates = self._select(pools, quotas, base.limit, counters)

        items: list[BudgetItem] = []
        origins: dict[str, str] = {}
        stale = 0
        for hit in selected:
            r = tier_range(ranges, hit.category, directory=hit.kind == "dir")
            texts = self._texts(seer, hit, r)
            if texts is None:
                stale += 1
                continue
            origins[hit.uri] = hit.origin
            items.append(BudgetItem(hit.uri, hit.category, round(hit.score, 4), texts,
                                    r.start, r.ceiling))
        plan = plan_budget(items, req.max_tokens)

        rewrite_status, digest, usage = self._rewrite(req, base.query, plan)
        entries = [{"uri": e.item.uri, "category": e.item.category, "score": e.item.score,
                    "detail": e.tier, "text": e.text, "origin": origins[e.item.uri],
                    "tokens": e.tokens} for e in plan.entries]
        rendered, used = plan.rendered, plan.used_tokens
        tier_counts = plan.tier_counts()
        if rewrite_status == "no_relevant":
            entries, rendered, digest, used = [], "", "", 0
            tier_counts = dict.fromkeys(TIERS, 0)
        elif req.dedup_turns and dedup["status"] == "ok":
            dedup["turn"] = self._record(identity, base.session_id, entries, dedup)

        stats: dict[str, Any] = {
            "searched": searched, "candidates": candidates, "selected": len(selected),
            "returned": len(entries), "dropped": len(plan.dropped),
            "deduped": counters["merged"], "max_tokens": req.max_tokens,
            "used_tokens": used, "per_entry_cap": plan.per_entry_cap,
            "detail": {"requested": req.detail if req.detail is not None else "auto",
                       "tiers": {c: {"start": r.start, "ceiling": r.ceiling}
                                 for c, r in ranges.items()}},
            "tier_counts": tier_counts,
            "fill": {"ratio": round(used / req.max_tokens, 4), "passes": plan.passes},
            "query_expansion": expansion, "queries": queries,
            "rewrite": rewrite_status, "rewrite_usage": usage,
            "excluded": len(excludes), "peer_scope": req.peer_scope,
            "dedup": {**dedup, "cooled": counters["cooled"]},
            "ignored": ignored,
        }
        if quotas is not None:
            stats["quotas"] = quotas
        if stale:
            stats["stale"] = stale
        if errors:
            stats["retrieval_errors"] = errors
        return {"entries": entries, "rendered": rendered, "digest": digest, "stats": stats}

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

    def _expand(self, identity: Identity, base: FindRequest, mode: str
                ) -> tuple[list[str], str]:
        """The queries to retrieve with, and what happened (stats.query_expansion): off,
        no_session, unavailable (no LLM), no_messages, used, unchanged, timeout, failed."""
        plain = [base.query]
        if mode == "off":
            return plain, "off"
        if not base.session_id:
            return plain, "no_session"
        if self.llm is None:
            return plain, "unavailable"
        try:
            recent = self.sessions.recent_texts(identity, base.session_id, RECENT_MESSAGES)
        except NotFound:
            return plain, "no_session"
        if not recent:
            return plain, "no_messages"
        schema = {"type": "object", "required": ["queries"], "properties": {"queries": {
            "type": "array", "maxItems": MAX_EXPANSIONS, "items": {"type": "string"}}}}
        prompt = [
            ChatMessage("system", "You help a retrieval system. From the recent conversation "
                        "and the current request, write at most 3 short, self-contained "
                        "search queries for what the assistant needs to know next. Answer "
                        'in JSON: {"queries": ["..."]}.'),
            ChatMessage("user", "Recent conversation:\n" + "\n".join(recent)[-6000:] +
                        f"\n\nCurrent request: {base.query}")]
        try:
            answer = self._call_llm(prompt, json_schema=schema, max_tokens=300,
                                    timeout_s=self.expansion_timeout_s)
        except TimeoutError:
            return plain, "timeout"
        except Exception as exc:  # the original query is always a valid plan
            log.warning("query expansion failed: %s", exc)
            return plain, "failed"
        original = [base.query] if base.query.strip() else []
        extra = self._parse_queries(answer, original)
        if extra is None:
            return plain, "failed"
        if not extra:
            return plain, "unchanged"
        return original + extra, "used"

    @staticmethod
    def _parse_queries(answer: str, original: list[str]) -> list[str] | None:
        text = answer.strip()
        if text.startswith("```"):  # some models fence JSON even when asked not to
            text = text.strip("`").removeprefix("json").strip()
        try:
            data = json.loads(text)
        except ValueError:
            return None
        items = data.get("queries") if isinstance(data, dict) else data
        if not isinstance(items, list):
            return None
        seen = {q.strip().lower() for q in original}
        out: list[str] = []
        for item in items:
            value = item.get("query") if isinstance(item, dict) else item
            if not isinstance(value, str) or not value.strip():
                continue
            query = " ".join(value.split())[:256]
            if query.lower() in seen:
                continue
            seen.add(query.lower())
            out.append(query)
            if len(out) == MAX_EXPANSIONS:
                break
        return out

    def _call_llm(self, messages: list[ChatMessage], *, json_schema: dict[str, Any] | None,
                  max_tokens: int, timeout_s: float) -> str:
        """The LLM under a hard deadline: its own retries must not hold the request."""
        assert self.llm is not None
        future = self._pool.submit(self.llm.complete, messages, json_schema=json_schema,
                                   max_tokens=max_tokens, timeout_s=timeout_s)
        return future.result(timeout=timeout_s)

    # ---------------------------------------------------------------- recall ledger

    def _cooling(self, identity: Identity, session_id: str | None,
                 turns: int) -> tuple[set[str], dict[str, Any]]:
        dedup: dict[str, Any] = {"turns": turns, "status": "off", "turn": None}
        if not turns or not session_id:
            return set(), dedup
        try:
            self.sessions.get(identity, session_id)
        except NotFound:
            dedup["status"] = "no_session"
            return set(), dedup
        try:
            history = self.ledger.recent(identity.account_id, identity.user_id, session_id,
                                         turns)
        except Exception as exc:  # no cooling is better than no context
            log.warning("recall ledger read failed: %s", exc)
            dedup["status"] = "error"
            return set(), dedup
        dedup["status"] = "ok"
        return {self._key(uri) for turn in history for uri in turn}, dedup

    def _record(self, identity: Identity, session_id: str | None,
                entries: list[dict[str, Any]], dedup: dict[str, Any]) -> int | None:
        assert session_id is not None
        try:
            return self.ledger.record(identity.account_id, identity.user_id, session_id,
                                      [e["uri"] for e in entries], self.clock())
        except Exception as exc:
            log.warning("recall ledger write failed: %s", exc)
            dedup["status"] = "error"
            return None

    @staticmethod
    def _key(uri: str) -> str:
        try:
            vu = from_canonical(uri)
        except Exception:
            return uri
        root = classify_uri(vu).skill_root
        return str(root) if root is not None else uri

    # ---------------------------------------------------------------- retrieval

    def _retrieve(self, identity: Identity, base: FindRequest, quotas: dict[str, int] | None,
                  queries: list[str], depth: int
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
                req = self._bucket_request(base, bucket)
                if req is not None:
                    plans[bucket] = req
        raw: dict[str, list[Candidate]] = {}
        errors: dict[str, str] = {}
        for bucket, req in plans.items():
            try:
                raw[bucket], _ = self.retrieval.retrieve(identity, req, queries=queries,
                                                         limit=depth)
            except (InvalidArgument, InvalidFilter, InvalidURI, PermissionDenied):
                raise  # the caller's request is wrong: the same in every bucket
            except Exception as exc:
                log.warning("context retrieval of %s failed: %s", bucket, exc)
                errors[bucket] = f"{type(exc).__name__}: {exc}"[:300]
                raw[bucket] = []
        if quotas is None:
            searched = dict.fromkeys(CATEGORIES, 0)
            for c in raw.get("all", []):
                searched[category_of(c.context_type, self._memory_type(c))] += 1
        else:
            searched = {b: len(raw.get(b, [])) for b in BUCKETS if quotas.get(b, 0) > 0}
        return raw, searched, errors

    @staticmethod
    def _bucket_request(base: FindRequest, bucket: str) -> FindRequest | None:
        ctype = "skill" if bucket == "skills" else "resource" if bucket == "resources" \
            else "memory"
        if base.context_type is not None and ctype not in base.context_type:
            return None  # the caller left this context type out
        flt = base.filter
        if ctype == "memory":
            must = {"op": "must", "field": "memory_type", "conds": [bucket]}
            flt = must if flt is None else {"op": "and", "conds": [flt, must]}
        return replace(base, context_type=[ctype], filter=flt)

    @staticmethod
    def _memory_type(c: Candidate) -> str | None:
        if c.memory_type:
            return c.memory_type
        for tag in c.tags:
            if tag.startswith("memory_type="):
                return tag.split("=", 1)[1]
        return None

    def _eligible(self, identity: Identity, cands: list[Candidate], excludes: list[VikingURI],
                  cooled: set[str], penalties: dict[str, float],
                  counters: dict[str, int]) -> list[_Hit]:
        """Candidates as entries: navigation directories, excluded and cooled URIs out,
        other peers demoted, duplicates (a directory's L0 and L1 hits) merged; best first."""
        by_key: dict[str, _Hit] = {}
        for c in cands:
            hit = self._hit(identity, c, penalties)
            if hit is None:
                continue
            vu = from_canonical(hit.key)
            if any(vu.is_within(ex) or from_canonical(hit.uri).is_within(ex)
                   for ex in excludes):
                continue  # the index already left most out; this catches skill packages
            if hit.key in cooled:
                counters["cooled"] += 1
                continue
            found = by_key.get(hit.key)
            if found is not None:
                counters["merged"] += 1
                if hit.score > found.score:
                    by_key[hit.key] = hit
                continue
            by_key[hit.key] = hit
        # stable: an empty query's recency order survives equal (zero) scores
        return sorted(by_key.values(), key=lambda h: -h.score)

    def _hit(self, identity: Identity, c: Candidate, penalties: dict[str, float]
             ) -> _Hit | None:
        vu = from_canonical(c.uri)
        root = classify_uri(vu).skill_root
        if c.context_type == "skill" and root is not None and root.name in (ABSTRACT, OVERVIEW):
            # retrieval folds a skill namespace's own sidecar into "<ns>/.overview.md/SKILL.md"
            vu = root
        kind = "file"
        target = vu
        if vu.name in (ABSTRACT, OVERVIEW) and vu.parent is not None:
            kind, target = "dir", vu.parent
            if is_navigation(target):
                return None
        cls = classify_uri(target)
        key = str(target)
        if c.context_type == "skill" and cls.skill_root is not None:
            kind, key = "skill", str(cls.skill_root)
        memory_type = self._memory_type(c) or cls.memory_type
        category = category_of(c.context_type, memory_type)
        score = c.score
        peer = c.peer if c.peer is not None else cls.peer
        origin = "self"
        if peer is not None and peer != identity.actor_peer:
            origin = f"peer:{peer}"
            score *= penalties[category]
        return _Hit(str(target), key, kind, category, score, c.abstract, origin)

    def _select(self, pools: dict[str, list[_Hit]], quotas: dict[str, int] | None,
                limit: int, counters: dict[str, int]) -> tuple[list[_Hit], int]:
        """The hits to assemble, best first, and how many were eligible."""
        if quotas is None:
            pool = pools.get("all", [])
            return pool[:limit], len(pool)
        chosen: dict[str, _Hit] = {}
        rest: list[_Hit] = []
        total = 0
        for bucket in BUCKETS:
            quota = quotas.get(bucket, 0)
            total += quota
            taken = 0
            for hit in pools.get(bucket, []):
                if hit.key in chosen:
                    counters["merged"] += 1
                elif taken < quota:
                    chosen[hit.key] = hit
                    taken += 1
                else:
                    rest.append(hit)
        eligible = len(chosen) + len({h.key for h in rest if h.key not in chosen})
        # places a bucket could not fill go to the best remaining hits of the others
        for hit in sorted(rest, key=lambda h: -h.score):
            if len(chosen) >= total:
                break
            if hit.key not in chosen:
                chosen[hit.key] = hit
        return sorted(chosen.values(), key=lambda h: -h.score), eligible

    # ---------------------------------------------------------------- tier texts

    def _texts(self, identity: Identity, hit: _Hit, r: TierRange) -> dict[str, str] | None:
        """The text of each tier up to the entry's ceiling; None when the hit is gone."""
        deep = RANK[r.ceiling] >= RANK["overview"]
        try:
            if hit.kind == "dir":
                return self._dir_texts(identity, hit, deep)
            if hit.kind == "skill":
                return self._skill_texts(identity, hit)
            return self._file_texts(identity, hit, deep)
        except NotFound:
            return None  # removed since it was indexed

    def _dir_texts(self, identity: Identity, hit: _Hit, deep: bool) -> dict[str, str]:
        directory = from_canonical(hit.uri)
        abstract = hit.abstract.strip()
        if not abstract:
            _, text = self.fs.sidecar(identity, directory, ABSTRACT)
            abstract = (text or "").strip()
        texts = {"abstract": abstract}
        if deep:
            _, text = self.fs.sidecar(identity, directory, OVERVIEW)
            texts["overview"] = split_frontmatter(text or "")[1].strip()
        return texts

    def _skill_texts(self, identity: Identity, hit: _Hit) -> dict[str, str]:
        uri = from_canonical(hit.uri)
        try:
            raw = self.fs.read_text(identity, uri)
        except NotFound:
            # a package without SKILL.md: only what the index knows about it
            return {"abstract": hit.abstract.strip()}
        meta, body = split_frontmatter(raw)
        outline = outline_file(uri.name, body)
        description = meta.get("description", "").strip().strip("'\"")
        return {"abstract": description or outline.abstract or hit.abstract.strip(),
                "overview": outline.overview, "full": raw.strip()}

    def _file_texts(self, identity: Identity, hit: _Hit, deep: bool) -> dict[str, str]:
        abstract = hit.abstract.strip()
        if abstract and not deep:
            return {"abstract": abstract}
        uri = from_canonical(hit.uri)
        raw = self.fs.read_text(identity, uri)  # memory fields stripped
        if "\x00" in raw[:4096]:
            return {"abstract": abstract}  # binary: nothing to inject but its summary
        text = raw.strip()
        first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
        texts = {"abstract": abstract or first, "full": text}
        summary = memory_summary(raw) if hit.category in MEMORY_CATEGORIES else None
        texts["overview"] = summary or outline_file(uri.name, raw).overview
        return texts

    # ---------------------------------------------------------------- rewrite

    def _rewrite(self, req: ContextRequest, query: str, plan: BudgetPlan
                 ) -> tuple[str, str, dict[str, Any] | None]:
        """(status, digest, usage). Statuses: off, skipped, unavailable, ok, failed,
        no_relevant."""
        if req.rewrite is False:
            return "off", "", None
        if self.llm is None:
            return ("unavailable" if req.rewrite is True else "skipped"), "", None
        rendered = plan.rendered
        if not plan.entries:
            return "skipped", "", None
        if req.rewrite == "auto" and plan.used_tokens <= req.max_tokens / 2:
            return "skipped", "", None
        n = req.rewrite_max_bullets
        system = (f"You condense retrieved context for an AI agent. Using only the <memory> "
                  f"blocks given, write at most {n} bullet points with what matters for the "
                  "query. Start each bullet with '- ' and end it with the URI it comes from "
                  "in square brackets, e.g. [viking://resources/doc.md]. If nothing in the "
                  f"blocks is relevant to the query, answer exactly {NO_RELEVANT}.")
        user = f"Query: {query}\n\n{rendered}"
        usage: dict[str, Any] = {"input_tokens": estimate_tokens(system) +
                                 estimate_tokens(user)}
        started = time.monotonic()
        try:
            answer = self._call_llm([ChatMessage("system", system), ChatMessage("user", user)],
                                    json_schema=None, max_tokens=min(req.max_tokens, 2048),
                                    timeout_s=self.rewrite_timeout_s)
        except TimeoutError:
            usage.update(elapsed_ms=int((time.monotonic() - started) * 1000),
                         error="timeout")
            return "failed", "", usage
        except Exception as exc:  # the rendered block stands on its own
            log.warning("context rewrite failed: %s", exc)
            usage.update(elapsed_ms=int((time.monotonic() - started) * 1000),
                         error=type(exc).__name__)
            return "failed", "", usage
        usage.update(elapsed_ms=int((time.monotonic() - started) * 1000),
                     output_tokens=estimate_tokens(answer))
        if answer.strip() == NO_RELEVANT:
            usage["digest_tokens"] = 0
            return "no_relevant", "", usage
        cites = {e.item.uri for e in plan.entries} | {self._key(e.item.uri)
                                                      for e in plan.entries}
        bullets: list[str] = []
        for line in answer.splitlines():
            m = _BULLET.match(line.strip())
            # a bullet that cites none of the entries is not grounded in them
            if m and any(uri in m.group(1) for uri in cites):
                bullets.append("- " + m.group(1).strip())
            if len(bullets) == n:
                break
        while bullets and estimate_tokens("\n".join(bullets)) > req.max_tokens:
            bullets.pop()  # whole bullets only: a digest is never cut mid-sentence
        if not bullets:
            usage.update(error="no cited bullets", digest_tokens=0)
            return "failed", "", usage
        digest = "\n".join(bullets)
        usage["digest_tokens"] = estimate_tokens(digest)
        return "ok", digest, usage
