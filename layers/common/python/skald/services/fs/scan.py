"""Every visible file of a tree, by name (glob) or with its content (grep).

VikingFS.iter_files lists a tree's files with their metadata (a stat and an etag each), for
callers that need it. A match on names needs only each file's URI, and a scan of content its
URI and bytes, so the store walks the tree itself (BlobStore.walk_keys, read_tree), and the
caller's view applies to its keys as to iter_files' (domain.access.key_view): a folder outside it is
never entered, a file outside it never read.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator

from skald.domain.access.identity import Identity
from skald.domain.access.key_view import KeyView
from skald.domain.access.visibility import View
from skald.domain.errors import NotFound
from skald.domain.ops.scan_budget import ScanBudget
from skald.domain.paths.uri import VikingURI
from skald.ports import BlobNotFound
from skald.services.fs.filesystem import VikingFS


def _walk_checks(
    view: View,
    base: VikingURI,
    enter: Callable[[VikingURI], bool],
    admit: Callable[[VikingURI], bool] | None,
) -> tuple[Callable[[str], bool], Callable[[str], bool] | None]:
    """The store's `enter` and `admit` for a walk below `base`: the view's rules on keys
    (domain.access.key_view), then the caller's. `admit` is None when every file is taken (below a
    visible root, no actor peer, no caller's check), so the store asks nothing per file."""
    keys = KeyView(view)

    def enter_key(key: str) -> bool:
        return keys.enters(key) and enter(keys.folder(key)[0])

    def admit_key(key: str) -> bool:
        return keys.shows_file(key) and (admit is None or admit(keys.file_uri(key)))

    every_file = admit is None and keys.shows_every_file_below(base)
    return enter_key, None if every_file else admit_key


def names_below(
    fs: VikingFS, identity: Identity, directory: VikingURI, *, enter: Callable[[VikingURI], bool]
) -> Iterator[str]:
    """The path below `directory` ("a/b.md") of every visible (non-dot) file under it, in
    key order, without its metadata and without building its URI (a glob over 100,000
    names builds the few it returns); `enter` as read_files'. Checks that `directory` is
    readable (403 / 404) and is a directory (404: the caller has ruled out a file)."""
    view = fs.check_readable(identity, directory)
    if not fs.is_dir(identity, directory):
        raise NotFound(f"File not found: {directory}", str(directory))
    enter_key, keep = _walk_checks(view, directory, enter, None)
    prefix = fs.key(identity, directory).rstrip("/") + "/"
    cut = len(prefix)
    for key in fs.blobs.walk_keys(prefix, enter=enter_key):
        if keep is None or keep(key):
            yield key[cut:]


def read_files(
    fs: VikingFS,
    identity: Identity,
    uri: VikingURI,
    *,
    enter: Callable[[VikingURI], bool],
    admit: Callable[[VikingURI], bool] | None = None,
    budget: ScanBudget,
) -> Generator[tuple[str, bytes], None, None]:
    """(path below `uri`, content) of every visible (non-dot) file at or below `uri`, in key
    order; the path is "" when `uri` is that file. As in names_below, no file's URI is built
    (a grep builds those of the files that match). `enter(folder)` may leave a folder's
    subtree out and `admit(file)` a file, before they are read; `budget` bounds the bytes read
    (a file too large for it is skipped). Checks that `uri` is readable (403 / 404) and holds
    something (404), with the lookups the walk needs anyway."""
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
        raise NotFound(f"File not found: {uri}", str(uri))
    enter_key, admit_key = _walk_checks(view, uri, enter, admit)
    prefix = fs.key(identity, uri).rstrip("/") + "/"
    cut = len(prefix)
    contents = fs.blobs.read_tree(prefix, enter=enter_key, admit=admit_key, budget=budget)
    try:
        for key, data in contents:
            yield key[cut:], data
    finally:
        contents.close()
