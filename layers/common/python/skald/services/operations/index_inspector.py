"""`/api/v1/debug/vector/*`: counts and pages of the caller's index records, as the index
holds them (what retrieval searches), limited to what the caller may see."""

from __future__ import annotations

import json
from typing import Any

from skald.domain.access.identity import Identity
from skald.domain.access.visibility import search_scopes, view_of, visible_roots
from skald.domain.errors import InvalidArgument
from skald.domain.paths.names import record_id
from skald.domain.paths.uri import VikingURI, from_canonical
from skald.domain.retrieval.index_filter import MalformedFilter
from skald.domain.timefmt import iso_utc
from skald.ports import IndexFilter, IndexRecord, SearchIndex
from skald.services.operations.results import VectorRecord, VectorScroll


def parse_filter(raw: str | None) -> dict[str, Any] | None:
    if raw is None or not raw.strip():
        return None
    try:
        tree = json.loads(raw)
    except ValueError:
        raise InvalidArgument("Invalid filter JSON", {"field": "filter"}) from None
    if not isinstance(tree, dict):
        raise InvalidArgument("filter must be a JSON object", {"field": "filter"})
    return tree


class IndexInspector:
    def __init__(self, index: SearchIndex) -> None:
        self.index = index

    def _filter(
        self, identity: Identity, uri: VikingURI | None, tree: dict[str, Any] | None
    ) -> IndexFilter:
        targets = [uri] if uri is not None else list(visible_roots(identity))
        return IndexFilter(scopes=[str(s) for s in search_scopes(identity, targets)], tree=tree)

    def count(self, identity: Identity, uri: VikingURI | None, raw_filter: str | None) -> int:
        try:
            return self.index.count(
                identity.account_id, self._filter(identity, uri, parse_filter(raw_filter))
            )
        except MalformedFilter as exc:
            raise InvalidArgument(f"Invalid filter: {exc}", {"field": "filter"}) from None

    def scroll(
        self, identity: Identity, uri: VikingURI | None, limit: int, cursor: str | None
    ) -> VectorScroll:
        try:
            page, nxt = self.index.scroll(
                identity.account_id,
                self._filter(identity, uri, None),
                limit=limit,
                cursor=cursor or None,
            )
        except ValueError as exc:
            raise InvalidArgument(str(exc), {"field": "cursor"}) from None
        view = view_of(identity)
        return VectorScroll(
            [self._view(r) for r in page if view.allows(from_canonical(r.uri))], nxt
        )

    @staticmethod
    def _view(rec: IndexRecord) -> VectorRecord:
        return VectorRecord(
            id=record_id(rec.account, rec.uri, rec.level),
            uri=rec.uri,
            level=rec.level,
            section=rec.section,
            context_type=rec.context_type,
            parent=rec.parent,
            abstract=rec.abstract,
            tags=rec.tags,
            memory_type=rec.memory_type,
            owner=rec.owner,
            peer=rec.peer,
            created_at=iso_utc(rec.created_at),
            updated_at=iso_utc(rec.updated_at),
        )
