"""Checks a subtree's index records against its stored files and directories (the drift
rule lives in skald.domain.ops.consistency)."""

from __future__ import annotations

from collections.abc import Iterator

from skald.domain.access.identity import Identity
from skald.domain.access.visibility import search_scopes, view_of
from skald.domain.ops.consistency import Consistency, check
from skald.domain.paths.uri import VikingURI, from_canonical
from skald.ports import IndexFilter, SearchIndex
from skald.services.fs.filesystem import VikingFS

PAGE = 1000


class ConsistencyService:
    def __init__(self, fs: VikingFS, index: SearchIndex) -> None:
        self.fs = fs
        self.index = index

    def check(self, identity: Identity, uri: VikingURI) -> Consistency:
        """What the caller may see of `uri`'s subtree, in storage and in the index."""
        self.fs.check_readable(identity, uri)
        is_dir = self.fs.is_dir(identity, uri)
        files = [str(e.uri) for e in self.fs.iter_files(identity, uri)]
        dirs = [str(uri)] if is_dir and not uri.is_root else []
        if is_dir:
            dirs += [str(e.uri) for e in self.fs.walk(identity, uri) if e.is_dir]
        return check(str(uri), files, dirs, self._records(identity, uri))

    def _records(self, identity: Identity, uri: VikingURI) -> Iterator[tuple[str, int]]:
        view = view_of(identity)
        flt = IndexFilter(scopes=[str(s) for s in search_scopes(identity, [uri])])
        cursor: str | None = None
        while True:
            page, cursor = self.index.scroll(identity.account_id, flt, limit=PAGE, cursor=cursor)
            for rec in page:
                # Another peer's records stay hidden from an actor peer, as in search.
                if view.allows(from_canonical(rec.uri)):
                    yield rec.uri, rec.level
            if cursor is None:
                return
