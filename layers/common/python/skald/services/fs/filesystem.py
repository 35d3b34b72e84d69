"""VikingFS: the viking:// tree of one account on top of a BlobStore.

A directory exists iff its `.abstract.md` exists. Per-entry attributes (tags, creation time)
live in hidden sidecars, read and written by the base class (attributes.py). Every method
takes the caller's Identity; every key is inside its account's partition.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from skald.domain.access.identity import Identity
from skald.domain.access.key_view import KeyView
from skald.domain.access.visibility import View, check_access, peer_visible, view_of
from skald.domain.errors import (
    AlreadyExists,
    Conflict,
    InvalidArgument,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
)
from skald.domain.paths.names import (
    ABSTRACT,
    OVERVIEW,
    is_dated,
    is_file_sidecar,
    is_managed_name,
    is_reserved_name,
)
from skald.domain.paths.presets import PRESET_DESCRIPTIONS, USER_PRESET
from skald.domain.paths.tags import apply_tag_mode
from skald.domain.paths.uri import ROOT, VikingURI, check_storable, classify_uri
from skald.domain.text.memoryfile import strip_memory_fields
from skald.ports import BlobInfo, BlobNotFound, BlobPreconditionFailed, BlobStore
from skald.services.fs.attributes import EntryAttributes
from skald.services.fs.entries import Entry, FsChange, WriteResult
from skald.services.fs.write_batch import HeldWrites

WRITE_MODES = ("replace", "append", "create")
SIDECAR_BYTES = 4096  # what a directory's L0 is expected to weigh, for a bounded read-ahead
# What `read` shows of a file's bytes (a parsed document's Markdown); plain UTF-8 without it.
TextView = Callable[[Identity, VikingURI, bytes, bool], str]


class VikingFS(EntryAttributes):
    def __init__(
        self,
        blobs: BlobStore,
        *,
        max_write_bytes: int,
        clock: Callable[[], float] = time.time,
        text_view: TextView | None = None,
    ) -> None:
        self.blobs = blobs
        self.text_view = text_view
        self.max_write_bytes = max_write_bytes
        self.clock = clock
        # Per (account, user, generation): a user registered again under a removed user's id
        # gets its presets again (the purge removed them).
        self._ensured: set[tuple[str, str, str | None]] = set()
        self._ensure_lock = threading.Lock()

    # ---------------------------------------------------------------- keys and existence

    def _sidecar_key(self, identity: Identity, directory: VikingURI, name: str) -> str:
        root = directory.is_root
        return f"{identity.account_id if root else self.key(identity, directory)}/{name}"

    def _dir_marker(self, identity: Identity, uri: VikingURI) -> str:
        return self._sidecar_key(identity, uri, ABSTRACT)

    def is_dir(self, identity: Identity, uri: VikingURI) -> bool:
        if uri.is_root:
            return True
        return self.blobs.head(self._dir_marker(identity, uri)) is not None

    def file_info(self, identity: Identity, uri: VikingURI) -> BlobInfo | None:
        if (
            uri.is_root
            or is_reserved_name(uri.name)
            and uri.name != ABSTRACT
            and uri.name != OVERVIEW
        ):
            return None
        return self.blobs.head(self.key(identity, uri))

    def exists(self, identity: Identity, uri: VikingURI) -> bool:
        return self.is_dir(identity, uri) or self.file_info(identity, uri) is not None

    # ---------------------------------------------------------------- preset tree

    def preset_ensured(self, identity: Identity) -> bool:
        """True once `ensure_preset` has run for this caller (no I/O)."""
        return (identity.account_id, identity.user_id, identity.generation) in self._ensured

    def ensure_preset(self, identity: Identity) -> None:
        """Creates the account's and the caller's preset directories once (lazily)."""
        marker = (identity.account_id, identity.user_id, identity.generation)
        if marker in self._ensured:
            return
        with self._ensure_lock:
            if marker in self._ensured:
                return
            account_dirs: list[tuple[VikingURI, str]] = [
                (VikingURI("resources"), PRESET_DESCRIPTIONS["resources"]),
                (VikingURI("agent"), PRESET_DESCRIPTIONS["agent"]),
                (VikingURI("agent", ("skills",)), PRESET_DESCRIPTIONS["agent/skills"]),
                (VikingURI("user"), PRESET_DESCRIPTIONS["user"]),
            ]
            user_root = VikingURI("user", (identity.user_id,))
            user_dirs = [(user_root, f"Space of user {identity.user_id}.")]
            for name in USER_PRESET:
                desc_key = "user-resources" if name == "resources" else name
                user_dirs.append((user_root.child(name), PRESET_DESCRIPTIONS[desc_key]))
            for uri, description in [*account_dirs, *user_dirs]:
                self._make_dir(identity, uri, description)
            self._ensured.add(marker)

    def _make_dir(self, identity: Identity, uri: VikingURI, description: str) -> bool:
        """Writes the L0 marker if missing; True when the directory was created."""
        if uri.is_root:
            return False
        try:
            self.blobs.put(
                self._dir_marker(identity, uri), description.encode("utf-8"), if_none_match=True
            )
        except BlobPreconditionFailed:
            return False
        self._touch_created(identity, uri, is_dir=True)
        return True

    def make_parents(
        self, identity: Identity, uri: VikingURI, held: HeldWrites | None = None
    ) -> list[str]:
        """mkdir -p of every ancestor of `uri`; a file in the way (held ones too) is a
        conflict. An existing directory is looked up, not re-created: a refused conditional
        write costs a lock here and a PUT on S3. A batch (`held`) checks each directory once."""
        created: list[str] = []
        parent = uri.parent
        chain: list[VikingURI] = []
        while parent is not None and not parent.is_root:
            chain.append(parent)
            parent = parent.parent
        for d in reversed(chain):
            key = self.key(identity, d)
            if held is not None:
                if key in held.dirs:
                    continue
                if held.holds(key):
                    held.flush()
            if self.blobs.head(key) is not None:
                raise Conflict(f"A file exists where a directory is needed: {d}", {"uri": str(d)})
            if not self.is_dir(identity, d) and self._make_dir(identity, d, f"Directory {d.name}."):
                created.append(str(d))
            if held is not None:
                held.dirs.add(key)
        return created

    # ---------------------------------------------------------------- tags

    def set_tags(
        self, identity: Identity, uri: VikingURI, tags: list[str] | None, mode: str, recursive: bool
    ) -> list[str]:
        """Returns the URIs whose tags changed."""
        check_access(identity, uri, write=True)
        is_dir = self.is_dir(identity, uri)
        if not is_dir and self.file_info(identity, uri) is None:
            raise NotFound(f"File not found: {uri}", str(uri))
        apply_tag_mode([], tags, mode)  # validates before anything is written
        targets: list[tuple[VikingURI, bool]] = [(uri, is_dir)]
        if is_dir and recursive:
            targets.extend((e.uri, e.is_dir) for e in self.walk(identity, uri))
        changed: list[str] = []
        for target, target_is_dir in targets:
            attrs = self.read_attrs(identity, target, target_is_dir)
            new = apply_tag_mode(list(attrs.get("tags") or []), tags, mode)
            if new != attrs.get("tags", []):
                attrs["tags"] = new
                if not is_dated(attrs):  # a file created by its current version
                    info = None if target_is_dir else self.file_info(identity, target)
                    attrs["created_at"] = info.modified if info else self.clock()
                self._write_attrs(identity, target, target_is_dir, attrs)
                changed.append(str(target))
        return changed

    # ---------------------------------------------------------------- browsing

    def check_readable(self, identity: Identity, uri: VikingURI) -> View:
        """403 outside the caller's view; 404 in a peer subtree the actor peer hides."""
        view = view_of(identity)
        view.check_reaches(uri)
        if not view.peer_allows(uri):
            raise NotFound(f"File not found: {uri}", str(uri))
        return view

    def stat(self, identity: Identity, uri: VikingURI) -> Entry:
        self.check_readable(identity, uri)
        if self.is_dir(identity, uri):
            info = None if uri.is_root else self.blobs.head(self._dir_marker(identity, uri))
            return Entry(uri, True, 0, info.modified if info else self.clock())
        info = self.file_info(identity, uri)
        if info is None:
            raise NotFound(f"File not found: {uri}", str(uri))
        return Entry(uri, False, info.size, info.modified, etag=info.etag)

    def children(self, identity: Identity, uri: VikingURI, *, show_hidden: bool) -> list[Entry]:
        """Direct children of a directory the caller may read, sorted by name: only what the
        caller's view shows (a user listing `viking://user` sees their own space)."""
        self.check_readable(identity, uri)
        if not self.is_dir(identity, uri):
            if self.file_info(identity, uri) is not None:
                raise InvalidArgument(f"Not a directory: {uri}", {"uri": str(uri)})
            raise NotFound(f"Directory not found: {uri}", str(uri), "directory")
        return self.listed_children(identity, uri, show_hidden=show_hidden)

    def listed_children(
        self, identity: Identity, uri: VikingURI, *, show_hidden: bool
    ) -> list[Entry]:
        """`children` of a directory the caller has just found (its marker not looked up
        again: a directory refresh lists each directory it walks up through)."""
        view = self.check_readable(identity, uri)
        # Below a visible root only the actor peer can still hide a child.
        shows = view.peer_allows if view.within_roots(uri) else view.shows
        prefix = self.key(identity, uri).rstrip("/") + "/"
        listing = self.blobs.list(prefix, delimiter="/")
        out: list[Entry] = []
        for info in listing.blobs:
            name = info.key[len(prefix) :]
            if name.startswith(".") and not show_hidden:
                continue
            child = uri.child(name)
            if shows(child):
                out.append(Entry(child, False, info.size, info.modified, etag=info.etag))
        # Not another user's space, a hidden peer, an internal scope.
        subs = [
            (sub, child)
            for sub in listing.prefixes
            if shows(child := uri.child(sub[len(prefix) :].rstrip("/")))
        ]
        markers = self.blobs.head_many([f"{sub}{ABSTRACT}" for sub, _ in subs]) if subs else []
        for (_, child), marker in zip(subs, markers, strict=True):
            if marker is not None:  # else not a directory (only stray sidecars left)
                out.append(Entry(child, True, 0, marker.modified))
        out.sort(key=lambda e: e.uri.name)
        return out

    def check_peer(self, identity: Identity, uri: VikingURI) -> None:
        if not peer_visible(identity, uri):
            raise NotFound(f"File not found: {uri}", str(uri))

    def walk(
        self,
        identity: Identity,
        uri: VikingURI,
        *,
        show_hidden: bool = False,
        max_depth: int | None = None,
    ) -> Iterator[Entry]:
        """Every entry below a directory (depth-first, sorted), with `rel_path`."""
        stack: list[tuple[VikingURI, int]] = [(uri, 0)]
        while stack:
            current, depth = stack.pop()
            kids = self.children(identity, current, show_hidden=show_hidden)
            for entry in kids:
                rel = entry.uri.relative_to(uri)
                yield Entry(entry.uri, entry.is_dir, entry.size, entry.modified, rel, entry.etag)
                if entry.is_dir and (max_depth is None or depth + 1 < max_depth):
                    stack.append((entry.uri, depth + 1))

    def iter_files(self, identity: Identity, uri: VikingURI) -> Iterator[Entry]:
        """Every visible (non-dot) file at or below `uri`, in key order; cheap (one listing)."""
        view = self.check_readable(identity, uri)
        info = self.file_info(identity, uri)
        if info is not None and not uri.name.startswith("."):
            yield Entry(uri, False, info.size, info.modified, etag=info.etag, key=info.key)
            return
        if not self.is_dir(identity, uri):
            return
        prefix = self.key(identity, uri).rstrip("/") + "/"
        keys = KeyView(view)
        # No dot segment below the prefix: sidecars and hidden entries are left out.
        for blob in self.blobs.iter_all(prefix, hidden=False):
            if keys.shows_file(blob.key):
                yield Entry(
                    keys.file_uri(blob.key),
                    False,
                    blob.size,
                    blob.modified,
                    blob.key[len(prefix) :],
                    blob.etag,
                    blob.key,
                )

    def read_bytes(self, identity: Identity, uri: VikingURI) -> bytes:
        self.check_readable(identity, uri)
        if self.is_dir(identity, uri):
            raise InvalidArgument(f"Is a directory: {uri}", {"uri": str(uri)})
        try:
            return self.blobs.get(self.key(identity, uri))
        except BlobNotFound:
            raise NotFound(f"File not found: {uri}", str(uri)) from None

    def read_text(
        self,
        identity: Identity,
        uri: VikingURI,
        *,
        offset: int = 0,
        limit: int = -1,
        raw: bool = False,
    ) -> str:
        data = self.read_bytes(identity, uri)
        text = (
            self.text_view(identity, uri, data, raw)
            if self.text_view is not None
            else data.decode("utf-8", errors="replace")
        )
        if not raw:
            text = strip_memory_fields(text)
        if offset == 0 and limit < 0:
            return text
        lines = text.splitlines(keepends=True)
        end = None if limit < 0 else offset + limit
        return "".join(lines[offset:end])

    def sidecar(
        self, identity: Identity, uri: VikingURI, name: str
    ) -> tuple[VikingURI, str | None]:
        """The directory's sidecar text (a file falls back to its parent directory)."""
        self.check_readable(identity, uri)
        directory = uri
        if not self.is_dir(identity, uri):
            if self.file_info(identity, uri) is None:
                raise NotFound(f"File not found: {uri}", str(uri))
            directory = uri.parent or ROOT
        return directory, self.dir_sidecar(identity, directory, name)

    def dir_sidecar(self, identity: Identity, directory: VikingURI, name: str) -> str | None:
        """Internal: a directory's L0 or L1 text in one read, None when it has none (a
        directory removed meanwhile). The caller checked the directory."""
        try:
            return self.blobs.get(self._sidecar_key(identity, directory, name)).decode(
                "utf-8", errors="replace"
            )
        except BlobNotFound:
            return None

    def dir_sidecars(
        self, identity: Identity, directories: Sequence[VikingURI], name: str
    ) -> list[str | None]:
        """`dir_sidecar` of each directory, several read at once on a remote store."""
        if not directories:
            return []
        keys = [(self._sidecar_key(identity, d, name), SIDECAR_BYTES) for d in directories]
        return [
            None if raw is None else raw.decode("utf-8", errors="replace")
            for raw in self.blobs.get_many(keys)
        ]

    def write_sidecars(
        self, identity: Identity, directory: VikingURI, abstract: str, overview: str
    ) -> bool:
        """`write_sidecar` of the L0, then the L1 without a second lookup of the marker."""
        if not self.write_sidecar(identity, directory, ABSTRACT, abstract):
            return False
        self.blobs.put(self._sidecar_key(identity, directory, OVERVIEW), overview.encode())
        return True

    def write_sidecar(self, identity: Identity, directory: VikingURI, name: str, text: str) -> bool:
        """Internal: the semantic pipeline writes L0/L1 here. Never resurrects a directory
        removed meanwhile: the L0 is a compare-and-swap on the existing marker."""
        if name not in {ABSTRACT, OVERVIEW}:
            raise ValueError(name)
        marker = self.blobs.head(self._dir_marker(identity, directory))
        if marker is None:
            return False
        try:
            if name == ABSTRACT:
                self.blobs.put(marker.key, text.encode("utf-8"), if_match=marker.etag)
            else:
                self.blobs.put(f"{self.key(identity, directory)}/{name}", text.encode("utf-8"))
        except BlobPreconditionFailed:
            return False
        return True

    # ---------------------------------------------------------------- mutation

    @staticmethod
    def check_new_names(uri: VikingURI) -> None:
        """Refuses a name the product manages anywhere in a path about to be created (the
        entry and the directories made above it)."""
        for name in uri.parts:
            if is_managed_name(name):
                raise InvalidArgument(
                    f"'{name}' is a name Skald manages itself: no file or "
                    "directory can be created by it",
                    {"uri": str(uri), "name": name},
                )

    def check_writable_name(self, uri: VikingURI) -> None:
        if uri.scope is None or not uri.parts:
            raise InvalidArgument(f"Cannot write a file at {uri}", {"uri": str(uri)})
        self.check_new_names(uri)
        if classify_uri(uri).scope == "user" and len(uri.parts) < 2:
            raise InvalidArgument(f"Cannot write a file at {uri}", {"uri": str(uri)})
        check_storable(uri)

    def check_size(self, size: int) -> None:
        if size > self.max_write_bytes:
            raise PayloadTooLarge("Content", size, self.max_write_bytes)

    def mkdir(self, identity: Identity, uri: VikingURI, description: str | None) -> FsChange:
        check_access(identity, uri, write=True)
        if uri.is_root or uri.scope is None:
            raise InvalidArgument("Cannot create the root", {"uri": str(uri)})
        self.check_new_names(uri)
        check_storable(uri)
        if self.blobs.head(self.key(identity, uri)) is not None:
            raise AlreadyExists(f"A file exists at {uri}", {"uri": str(uri)})
        change = FsChange(identity.account_id, identity.user_id)
        change.dirs.extend(self.make_parents(identity, uri))
        text = (description or "").strip() or f"Directory {uri.name}."
        if self._make_dir(identity, uri, text):
            change.dirs.append(str(uri))
        elif description:
            self.blobs.put(self._dir_marker(identity, uri), text.encode("utf-8"))
        if description and description.strip():
            # kept so that refreshing the L0 never loses what the user said
            attrs = self.read_attrs(identity, uri, True)
            attrs["description"] = description.strip()
            self._write_attrs(identity, uri, True, attrs)
        return change

    def write(
        self,
        identity: Identity,
        uri: VikingURI,
        data: bytes,
        mode: str,
        *,
        tags: list[str] | None = None,
        tag_mode: str = "replace",
        expected_sha256: str | None = None,
        held: HeldWrites | None = None,
    ) -> tuple[WriteResult, FsChange]:
        """With `held`, an unconditional write is only held there (written with its group)."""
        check_access(identity, uri, write=True)
        self.check_writable_name(uri)
        if mode not in (*WRITE_MODES, "upsert"):
            raise InvalidArgument(f"Invalid mode '{mode}': replace, append or create")
        if self.is_dir(identity, uri):
            raise Conflict(f"A directory exists at {uri}", {"uri": str(uri)})
        tagged = tags is not None or tag_mode == "clear"
        if tagged:  # bad tags are refused before anything is written
            apply_tag_mode([], tags, tag_mode)
        key = self.key(identity, uri)
        change = FsChange(identity.account_id, identity.user_id)
        change.dirs.extend(self.make_parents(identity, uri, held))
        current = self.blobs.head(key)
        conditional = current is not None and (mode == "append" or expected_sha256 is not None)
        old = self._previous(uri, key, expected_sha256) if conditional else None
        if expected_sha256 is not None and current is None:
            self._check_sha(uri, None, expected_sha256)
        payload = (old or b"") + data if mode == "append" else data
        self.check_size(len(payload))
        attrs = self._attrs_to_write(identity, uri, current, tagged=tagged)
        if attrs is not None and tagged:
            attrs["tags"] = apply_tag_mode(list(attrs.get("tags") or []), tags, tag_mode)
        try:
            attrs = self._put(
                identity, uri, payload, mode, current if conditional else None, attrs, held
            )
        except BlobPreconditionFailed:
            if mode == "create":
                raise AlreadyExists(f"File already exists: {uri}", {"uri": str(uri)}) from None
            raise Conflict(f"{uri} was changed concurrently; retry", {"uri": str(uri)}) from None
        if attrs is not None:
            self._write_attrs(identity, uri, False, attrs)
        change.written.append(str(uri))
        digest = hashlib.sha256(payload).hexdigest()
        return WriteResult(uri, mode, len(data), current is None, True, digest), change

    def _previous(self, uri: VikingURI, key: str, expected_sha256: str | None) -> bytes:
        """The content a conditional write (an append, a write with `expected_sha256`)
        builds on, checked against the hash expected."""
        old = self.blobs.get(key)
        if expected_sha256 is not None:
            self._check_sha(uri, old, expected_sha256)
        return old

    @staticmethod
    def _check_sha(uri: VikingURI, old: bytes | None, expected_sha256: str) -> None:
        actual = hashlib.sha256(old).hexdigest() if old is not None else ""
        if actual != expected_sha256:
            raise Conflict(
                f"Content of {uri} changed (sha256 mismatch)",
                {
                    "uri": str(uri),
                    "expected_sha256": expected_sha256,
                    "actual_sha256": actual or None,
                },
            )

    def _put(
        self,
        identity: Identity,
        uri: VikingURI,
        payload: bytes,
        mode: str,
        based_on: BlobInfo | None,
        attrs: dict[str, Any] | None,
        held: HeldWrites | None,
    ) -> dict[str, Any] | None:
        """Stores the content: created only if absent, replaced only if still `based_on`,
        else with its attributes in one flush (or held for the group's). Returns the
        attributes still to write."""
        key = self.key(identity, uri)
        if mode == "create":
            self.blobs.put(key, payload, if_none_match=True)
        elif based_on is not None:
            self.blobs.put(key, payload, if_match=based_on.etag)
        elif attrs is not None or held is not None:  # flushed together: one disk flush
            blobs = [(key, payload)]
            if attrs is not None:
                blobs.append(self._attrs_blob(identity, uri, False, attrs))
            if held is None:
                self.blobs.put_many(blobs)
            else:
                held.add(blobs)
            return None
        else:
            self.blobs.put(key, payload)
        return attrs

    def rm(self, identity: Identity, uri: VikingURI, recursive: bool) -> tuple[int, FsChange]:
        check_access(identity, uri, write=True)
        self.check_peer(identity, uri)
        self.check_removable(identity, uri)
        change = FsChange(identity.account_id, identity.user_id)
        if self.is_dir(identity, uri):
            if not recursive:
                raise InvalidArgument(
                    "Cannot remove directory without --recursive", {"uri": str(uri)}
                )
            prefix = self.key(identity, uri) + "/"
            count = 0
            for blob in sorted(
                self.blobs.iter_all(prefix), key=lambda b: not is_file_sidecar(b.key)
            ):
                name = blob.key.rsplit("/", 1)[-1]
                if not name.startswith("."):
                    count += 1
                self.blobs.delete(blob.key)
            self._delete_attrs(identity, uri, True)
            change.removed.append(str(uri))
            return count, change
        if self.file_info(identity, uri) is None:
            raise NotFound(f"File not found: {uri}", str(uri))
        self._delete_attrs(identity, uri, False)  # first: see _attrs_to_write
        self.blobs.delete(self.key(identity, uri))
        change.removed.append(str(uri))
        return 1, change

    def check_removable(self, identity: Identity, uri: VikingURI) -> None:
        if uri.is_root or not uri.parts:
            raise PermissionDenied(f"Cannot remove scope root {uri}", {"uri": str(uri)})
        if uri.scope == "user" and len(uri.parts) == 1:
            raise PermissionDenied(f"Cannot remove user space {uri}", {"uri": str(uri)})
        if uri.scope == "agent" and uri.parts == ("skills",):
            raise PermissionDenied(f"Cannot remove preset directory {uri}", {"uri": str(uri)})
        if uri.scope == "user" and len(uri.parts) == 2 and uri.parts[1] in USER_PRESET:
            raise PermissionDenied(f"Cannot remove preset directory {uri}", {"uri": str(uri)})
