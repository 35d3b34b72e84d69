"""Reading every visible file of a tree, for a scan of its content (grep).

VikingFS.iter_files lists a tree's files with their metadata, for callers that need it; a
scan needs only each file's URI and content, so the store reads the tree directly
(BlobStore.read_tree) and this module keeps to the caller's view, as iter_files does: a
folder outside it is never entered, a file outside it never read.
"""

from __future__ import annotations

from collections.abc import Callable, Generator

from skald.domain.identity import Identity
from skald.domain.scan_budget import ScanBudget
from skald.domain.uri import VikingURI, from_blob_key
from skald.services.filesystem import VikingFS


def read_files(fs: VikingFS, identity: Identity, uri: VikingURI, *,
               enter: Callable[[VikingURI], bool],
               admit: Callable[[VikingURI], bool] | None = None,
               budget: ScanBudget) -> Generator[tuple[VikingURI, bytes], None, None]:
    """(URI, content) of every visible (non-dot) file at or below `uri`, in key order.
    `enter(folder)` may leave a folder's subtree out and `admit(file)` a file, before they
    are read; `budget` bounds the bytes read (a file too large for it is skipped). Checks
    that `uri` is readable first (403 / 404)."""
    view = fs.check_readable(identity, uri)
    info = fs.file_info(identity, uri)
    if info is not None and not uri.name.startswith("."):
        if (admit is None or admit(uri)) and budget.take(info.size):
            try:
                yield uri, fs.blobs.get(info.key)
            except KeyError:  # BlobNotFound: deleted since
                return
        return
    if not fs.is_dir(identity, uri):
        return
    prefix = fs.key(identity, uri).rstrip("/") + "/"
    # Each folder's URI, and whether its files are visible, worked out once: a grep reads
    # thousands of files from a few folders.
    folders: dict[str, tuple[VikingURI, bool]] = {}
    check_peer = view.actor_peer is not None

    def folder(key: str) -> tuple[VikingURI, bool]:
        known = folders.get(key)
        if known is None:
            parent = from_blob_key(key)[1]
            known = folders[key] = (parent, view.within_roots(parent))
        return known

    def file_uri(key: str) -> VikingURI:
        folder_key, _, name = key.rpartition("/")
        parent = folder(folder_key)[0]
        return VikingURI(name) if parent.scope is None else \
            VikingURI(parent.scope, (*parent.parts, name))

    def enter_key(key: str) -> bool:
        # `shows`: inside the view, or a container on the way to a visible root.
        folder_uri = folder(key)[0]
        return view.shows(folder_uri) and enter(folder_uri)

    def admit_key(key: str) -> bool:
        if not folder(key.rpartition("/")[0])[1]:
            return False  # a file beside the visible roots (`viking://user/x`)
        if not check_peer and admit is None:
            return True
        found = file_uri(key)
        return (not check_peer or view.peer_allows(found)) and (admit is None or admit(found))

    # Below a visible root every file is visible, unless an actor peer hides some.
    every_file = view.within_roots(uri) and not check_peer and admit is None
    contents = fs.blobs.read_tree(prefix, enter=enter_key,
                                  admit=None if every_file else admit_key, budget=budget)
    try:
        for key, data in contents:
            yield file_uri(key), data
    finally:
        contents.close()
