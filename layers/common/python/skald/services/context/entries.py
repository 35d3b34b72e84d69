"""Retrieved candidates as context entries: what each is (file, directory, skill package),
its category and origin, the other-peer penalty, exclusions, cooling and duplicate merging,
and the selection under per-bucket quotas."""

from __future__ import annotations

from dataclasses import dataclass, replace

from skald.domain.access.identity import Identity
from skald.domain.paths.names import ABSTRACT, OVERVIEW
from skald.domain.paths.uri import VikingURI, classify_uri, from_canonical
from skald.domain.retrieval.context_budget import BUCKETS
from skald.services.context.request import category_of, is_navigation
from skald.services.retrieval.service import Candidate, FindRequest


@dataclass
class Entry:
    """A retrieved candidate as a context entry: what it is, where it goes, how it scores."""

    uri: str  # entry URI: a file, a directory (for sidecar hits) or a skill's SKILL.md
    key: str  # what exclusion and cooling compare: the package directory for a skill
    kind: str  # file | dir | skill
    category: str
    score: float
    abstract: str
    origin: str


def memory_type_of(c: Candidate) -> str | None:
    if c.memory_type:
        return c.memory_type
    for tag in c.tags:
        if tag.startswith("memory_type="):
            return tag.split("=", 1)[1]
    return None


def recall_key(uri: str) -> str:
    """What cooling and citations compare: a skill's files count as its package."""
    try:
        vu = from_canonical(uri)
    except Exception:
        return uri
    root = classify_uri(vu).skill_root
    return str(root) if root is not None else uri


def bucket_request(base: FindRequest, bucket: str) -> FindRequest | None:
    ctype = "skill" if bucket == "skills" else "resource" if bucket == "resources" else "memory"
    if base.context_type is not None and ctype not in base.context_type:
        return None  # the caller left this context type out
    flt = base.filter
    if ctype == "memory":
        must = {"op": "must", "field": "memory_type", "conds": [bucket]}
        flt = must if flt is None else {"op": "and", "conds": [flt, must]}
    return replace(base, context_type=[ctype], filter=flt)


def to_entry(identity: Identity, c: Candidate, penalties: dict[str, float]) -> Entry | None:
    """A candidate as an entry; None for a navigation directory."""
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
    memory_type = memory_type_of(c) or cls.memory_type
    category = category_of(c.context_type, memory_type)
    score = c.score
    peer = c.peer if c.peer is not None else cls.peer
    origin = "self"
    if peer is not None and peer != identity.actor_peer:
        origin = f"peer:{peer}"
        score *= penalties[category]
    return Entry(str(target), key, kind, category, score, c.abstract, origin)


def eligible(
    identity: Identity,
    cands: list[Candidate],
    excludes: list[VikingURI],
    cooled: set[str],
    penalties: dict[str, float],
    counters: dict[str, int],
) -> list[Entry]:
    """Candidates as entries: navigation directories, excluded and cooled URIs out,
    other peers demoted, duplicates (a directory's L0 and L1 hits) merged; best first."""
    by_key: dict[str, Entry] = {}
    for c in cands:
        hit = to_entry(identity, c, penalties)
        if hit is None:
            continue
        vu = from_canonical(hit.key)
        if any(vu.is_within(ex) or from_canonical(hit.uri).is_within(ex) for ex in excludes):
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


def select(
    pools: dict[str, list[Entry]],
    quotas: dict[str, int] | None,
    limit: int,
    counters: dict[str, int],
) -> tuple[list[Entry], int]:
    """The hits to assemble, best first, and how many were eligible."""
    if quotas is None:
        pool = pools.get("all", [])
        return pool[:limit], len(pool)
    chosen: dict[str, Entry] = {}
    rest: list[Entry] = []
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
