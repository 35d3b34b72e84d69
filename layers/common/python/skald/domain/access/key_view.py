"""A caller's view (domain.access.visibility.View) applied to one account's blob keys, for the walks
of a whole tree (listing its files, grep, glob): each folder's URI, and whether its files are
visible, worked out once per folder (a tree holds thousands of files in a few folders; no file
is itself a visible root), so a file costs a dictionary lookup, and its URI is built only when
asked for or when an actor peer's hiding must look at it."""

from __future__ import annotations

from skald.domain.access.visibility import View
from skald.domain.paths.uri import VikingURI, from_blob_key


class KeyView:
    def __init__(self, view: View) -> None:
        self.view = view
        self.check_peer = view.actor_peer is not None
        self._folders: dict[str, tuple[VikingURI, bool]] = {}

    def folder(self, key: str) -> tuple[VikingURI, bool]:
        """The URI of the folder whose key is `key`, and whether files in it are visible."""
        known = self._folders.get(key)
        if known is None:
            parent = from_blob_key(key)[1]
            known = self._folders[key] = (parent, self.view.within_roots(parent))
        return known

    def enters(self, key: str) -> bool:
        """May a walk go into the folder `key`: inside the view, or a container on the way
        to a visible root (`viking://user`), and not another peer's subtree."""
        return self.view.shows(self.folder(key)[0])

    def file_uri(self, key: str) -> VikingURI:
        folder_key, _, name = key.rpartition("/")
        parent = self.folder(folder_key)[0]
        return (
            VikingURI(name)
            if parent.scope is None
            else VikingURI(parent.scope, (*parent.parts, name))
        )

    def shows_file(self, key: str) -> bool:
        """Is the file `key` visible (not beside the visible roots, as `viking://user/x`,
        nor in another peer's subtree)?"""
        if not self.folder(key.rpartition("/")[0])[1]:
            return False
        return not self.check_peer or self.view.peer_allows(self.file_uri(key))

    def shows_every_file_below(self, base: VikingURI) -> bool:
        """Below a visible root every file is visible, unless an actor peer hides some."""
        return self.view.within_roots(base) and not self.check_peer
