"""Every visible file of a tree, by name (glob) or with its content (grep).

VikingFS.iter_files lists a tree's files with their metadata (a stat and an etag each), for
callers that need it. A match on names needs only each file's URI, and a scan of content its
URI and bytes, so the store walks the tree itself (BlobStore.walk_keys, read_tree) and this
module keeps to the caller's view, as iter_files does: a folder outside it is never entered,
a file outside it never read.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator

from skald.domain.identity import Identity
from skald.domain.scan_budget import ScanBudget
from skald.domain.uri import VikingURI, from_blob_key
from skald.domain.visibility import View
from skald.ports import BlobNotFound
from skald.services.filesystem import VikingFS


class _TreeView:
    """The caller's view of one tree, on the store's keys: each folder's URI and whether its
    files are visible, worked out once (a tree holds thousands of files in a few folders)."""

    def __init__(self, view: View, enter: Callable[[VikingURI], bool],
                 admit: Callable[[VikingURI], bool] | None) -> None:
        self.view, self.enter, self.admit = view, enter, admit
        self.folders: dict[str, tuple[VikingURI, bool]] = {}
        self.check_peer = view.actor_peer is not None

    def folder(self, key: str) -> tuple[VikingURI, bool]:
        known = self.folders.get(key)
        if known is None:
            parent = from_blob_key(key)[1]
            known = self.folders[key] = (parent, self.view.within_roots(parent))
        return known

    def file_uri(self, key: str) -> VikingURI:
        folder_key, _, name = key.rpartition("/")
        parent = self.folder(folder_key)[0]
        return VikingURI(name) if parent.scope is None else \
            VikingURI(parent.scope, (*parent.parts, name))

    def enter_key(self, key: str) -> bool:
        # `shows`: inside the view, or a container on the way to a visible root.
        folder_uri = self.folder(key)[0]
        return self.view.shows(folder_uri) and self.enter(folder_uri)

    def admit_key(self, key: str) -> bool:
        if not self.folder(key.rpartition("/")[0])[1]:
            return False  # a file beside the visible roots (`viking://user/x`)
        if not self.check_peer and self.admit is None:
            return True
        found = self.file_uri(key)
        return (not self.check_peer or self.view.peer_allows(found)) and \
            (self.admit is None or self.admit(found))

    def per_file(self, base: VikingURI) -> Callable[[str], bool] | None:
        """admit_key, or None when every file below `base` is admitted: below a visible root
        every file is visible, unless an actor peer hides some."""
        every_file = self.view.within_roots(base) and not self.check_peer and \
            self.admit is None
        return None if every_file else self.admit_key


def names_below(fs: VikingFS, identity: Identity, directory: VikingURI, *,
                enter: Callable[[VikingURI], bool]) -> Iterator[str]:
    """The path below `directory` ("a/b.md") of every visible (non-dot) file under it, in
    key order, without its metadata and without building its URI (a glob over 100,000
    names builds the few it returns); `enter` as read_files'. Checks that `directory` is
    readable first (403 / 404)."""
    view = fs.check_readable(identity, directory)
    if not fs.is_dir(identity, directory):
        return
    tree = _TreeView(view, enter, None)
    keep = tree.per_file(directory)
    prefix = fs.key(identity, directory).rstrip("/") + "/"
    cut = len(prefix)
    for key in fs.blobs.walk_keys(prefix, enter=tree.enter_key):
        if keep is None or keep(key):
            yield key[cut:]


def read_files(fs: VikingFS, identity: Identity, uri: VikingURI, *,
               enter: Callable[[VikingURI], bool],
               admit: Callable[[VikingURI], bool] | None = None,
               budget: ScanBudget) -> Generator[tuple[str, bytes], None, None]:
    """(path below `uri`, content) of every visible (non-dot) file at or below `uri`, in key
    order; the path is "" when `uri` is that file. As in names_below, no file's URI is built
    (a grep builds those of the files that match). `enter(folder)` may leave a folder's
    subtree out and `admit(file)` a file, before they are read; `budget` bounds the bytes read
    (a file too large for it is skipped). Checks that `uri` is readable first (403 / 404)."""
    view = fs.check_readable(identity, uri)
    info = fs.file_info(identity, uri)
    if info is not None and not uri.name.startswith("."):
        if (admit is None or admit(uri)) and budget.take(info.size):
            try:
                yield "", fs.blobs.get(info.key)
            except BlobNotFound:  # deleted since it was found
                return
        return
    if not fs.is_dir(identity, uri):
        return
    tree = _TreeView(view, enter, admit)
    prefix = fs.key(identity, uri).rstrip("/") + "/"
    cut = len(prefix)
    contents = fs.blobs.read_tree(prefix, enter=tree.enter_key, admit=tree.per_file(uri),
                                  budget=budget)
    try:
        for key, data in contents:
            yield key[cut:], data
    finally:
        contents.close()
