"""Per-entry attributes of the viking:// tree: tags and creation time, kept in hidden sidecars
(`.attrs.json` for a directory, `.<name>.attrs.json` for a file) beside the entry's blobs.

A file created by its current version has no attributes file: its creation time is that
version's mtime. VikingFS builds on this class; the attributes' reads and writes are here,
the tree operations that change them (write, set_tags, rm) there.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from skald.domain.access.identity import Identity
from skald.domain.paths.names import (
    DIR_ATTRS,
    attr_created,
    attr_tags,
    attrs_bytes,
    attrs_key_of,
    is_dated,
)
from skald.domain.paths.uri import VikingURI
from skald.domain.text.parsed import sidecar_name as parsed_sidecar
from skald.ports import BlobInfo, BlobNotFound, BlobStore


class EntryAttributes:
    """The attributes of the entries of one blob store (VikingFS's base)."""

    blobs: BlobStore
    clock: Callable[[], float]

    @staticmethod
    def key(identity: Identity, uri: VikingURI) -> str:
        return uri.blob_key(identity.account_id)

    def attrs_key(self, identity: Identity, uri: VikingURI, is_dir: bool) -> str:
        if is_dir:
            return f"{self.key(identity, uri)}/{DIR_ATTRS}"
        return attrs_key_of(self.key(identity, uri))

    def read_attrs(self, identity: Identity, uri: VikingURI, is_dir: bool) -> dict[str, Any]:
        try:  # the root is no stored directory: it has no attributes
            raw = b"{}" if uri.is_root else self.blobs.get(self.attrs_key(identity, uri, is_dir))
        except BlobNotFound:
            return {}
        try:
            data = json.loads(raw)
        except json.JSONDecodeError:
            return {}
        return data if isinstance(data, dict) else {}

    def _write_attrs(
        self, identity: Identity, uri: VikingURI, is_dir: bool, attrs: dict[str, Any]
    ) -> None:
        self.blobs.put(*self._attrs_blob(identity, uri, is_dir, attrs))

    def _attrs_blob(
        self, identity: Identity, uri: VikingURI, is_dir: bool, attrs: dict[str, Any]
    ) -> tuple[str, bytes]:
        return self.attrs_key(identity, uri, is_dir), attrs_bytes(attrs)

    def _touch_created(
        self, identity: Identity, uri: VikingURI, *, is_dir: bool, tags: list[str] | None = None
    ) -> None:
        attrs = {"created_at": self.clock()}
        if tags:
            attrs["tags"] = tags  # type: ignore[assignment]
        self._write_attrs(identity, uri, is_dir, attrs)

    def tags_of(self, identity: Identity, uri: VikingURI, is_dir: bool) -> list[str]:
        return attr_tags(self.read_attrs(identity, uri, is_dir))

    def tags_and_created(
        self, identity: Identity, uri: VikingURI, is_dir: bool, modified: float
    ) -> tuple[list[str], float]:
        """Tags and creation time from one read. A file without a recorded creation time
        was created by its current version: `modified`, its mtime."""
        attrs = self.read_attrs(identity, uri, is_dir)
        return attr_tags(attrs), attr_created(attrs, modified)

    def _attrs_to_write(
        self, identity: Identity, uri: VikingURI, current: BlobInfo | None, *, tagged: bool
    ) -> dict[str, Any] | None:
        """The attributes a write of `uri` must (re)write, before its tags are applied (one
        read of them at most); None: none.

        A new file without tags gets no attributes file: its creation time is its first
        version's mtime (half the blobs, and S3 PUTs, of a bulk ingest). The first rewrite
        records that time before the mtime moves on. (A removal deletes a file's attributes
        before the file: a removal cut short leaves none to date or tag a new file of the
        name, and no lookup per new file is needed, a round trip each on S3.)"""
        if current is None:
            return {"created_at": self.clock()} if tagged else None
        attrs = self.read_attrs(identity, uri, False)
        if is_dated(attrs):
            return attrs if tagged else None
        attrs["created_at"] = current.modified
        return attrs

    def _delete_attrs(self, identity: Identity, uri: VikingURI, is_dir: bool) -> None:
        if not is_dir:
            for key in self.file_sidecars(identity, uri):
                self.blobs.delete(key)

    def file_sidecars(self, identity: Identity, uri: VikingURI) -> tuple[str, str]:
        """The keys of a file's own sidecars: its attributes and its parsed text."""
        attrs = self.attrs_key(identity, uri, False)
        return attrs, f"{attrs.rsplit('/', 1)[0]}/{parsed_sidecar(uri.name)}"
