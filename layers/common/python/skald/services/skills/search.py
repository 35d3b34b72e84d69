"""Finding skills by meaning: retrieval over the skill namespaces, one hit per package."""

from __future__ import annotations

from typing import Any

from skald.domain.access.identity import Identity
from skald.domain.errors import NotFound
from skald.domain.paths.uri import VikingURI, classify_uri, from_canonical
from skald.domain.sources.skills import SKILL_FILE, skill_header
from skald.services.fs.filesystem import VikingFS
from skald.services.retrieval.request import parse_levels
from skald.services.retrieval.service import FindRequest, RetrievalService
from skald.services.skills.results import SkillHit, SkillsFound
from skald.services.skills.service import (
    _namespaces_head,
    _package_keys,
    default_namespaces,
    namespace_of,
)


class SkillSearch:
    """Finding skills by meaning: retrieval over the skill namespaces, one hit per package."""

    def __init__(self, fs: VikingFS, retrieval: RetrievalService) -> None:
        self.fs = fs
        self.retrieval = retrieval

    def find(
        self,
        identity: Identity,
        query: str,
        *,
        limit: int,
        score_threshold: float | None,
        level: list[int] | None,
        target_uri: str | None,
    ) -> SkillsFound:
        spaces = (
            [namespace_of(identity, target_uri)] if target_uri else default_namespaces(identity)
        )
        req = FindRequest(
            query=query,
            target_uri=[str(s) for s in spaces],
            context_type=["skill"],
            limit=limit,
            score_threshold=score_threshold,
            level=parse_levels(level),
        )
        found = self.retrieval.find(identity, req)
        hits: list[SkillHit] = []
        for hit in found.skills:
            root = classify_uri(from_canonical(hit.uri)).skill_root
            if root is None:
                continue  # a namespace's own summary, not a package
            header = self._header(identity, root) or {"description": hit.abstract}
            hits.append(
                SkillHit(
                    **_package_keys(root, root.name, header),
                    score=hit.score,
                    match_reason=hit.match_reason,
                    level=hit.level,
                    abstract=hit.abstract,
                )
            )
        return SkillsFound(
            **_namespaces_head(spaces, bool(target_uri)), skills=hits, total=len(hits)
        )

    def _header(self, identity: Identity, root: VikingURI) -> dict[str, Any] | None:
        try:
            data = self.fs.read_bytes(identity, root.child(SKILL_FILE))
        except NotFound:
            return None
        return skill_header(data.decode("utf-8", errors="replace"))
