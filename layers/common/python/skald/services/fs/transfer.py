"""Moving and copying a file or a subtree of the viking:// tree (VikingFS's blobs).

Blob stores have no rename: a move is a copy, then the source's removal. Every blob of a
subtree is copied (sidecars and attributes included), the directory marker last, so a crash
leaves a complete source and, at worst, an invisible partial destination.
"""

from __future__ import annotations

from skald.domain.access.identity import Identity
from skald.domain.access.visibility import check_access
from skald.domain.errors import AlreadyExists, InvalidArgument, NotFound
from skald.domain.paths.names import (
    ABSTRACT,
    attrs_bytes,
    attrs_key_of,
    is_file_sidecar,
    undated_files,
)
from skald.domain.paths.uri import VikingURI, check_storable, from_blob_key
from skald.ports import BlobInfo
from skald.services.fs.entries import FsChange
from skald.services.fs.filesystem import VikingFS


def transfer(
    fs: VikingFS,
    identity: Identity,
    src: VikingURI,
    dst: VikingURI,
    *,
    move: bool,
    recursive: bool = True,
) -> tuple[list[str], FsChange]:
    """Moves (or copies) `src` to `dst`, which must not exist; returns the file URIs
    written at the destination and the change for the semantic pipeline."""
    _check(fs, identity, src, dst, move=move)
    change = FsChange(identity.account_id, identity.user_id)
    src_is_dir = fs.is_dir(identity, src)
    src_info = None if src_is_dir else fs.file_info(identity, src)
    if not src_is_dir and src_info is None:
        raise NotFound(f"File not found: {src}", str(src))
    if src_is_dir and not move and not recursive:
        raise InvalidArgument("Cannot copy a directory without recursive", {"uri": str(src)})
    src_prefix = fs.key(identity, src) + "/"
    dst_prefix = fs.key(identity, dst) + "/"
    listed = _listed(fs, src_prefix) if src_is_dir else []
    moved = [
        str(check_storable(from_blob_key(dst_prefix + b.key[len(src_prefix) :])[1]))
        for b in listed
        if not b.key.rsplit("/", 1)[-1].startswith(".")
    ]
    change.dirs.extend(fs.make_parents(identity, dst))  # every destination fits
    if src_info is None:
        _copy_tree(fs, listed, src_prefix, dst_prefix, move=move)
        change.dirs.append(str(dst))
    else:
        _copy_file(fs, identity, src, dst, src_info, move=move)
        moved.append(str(dst))
    change.written.extend(moved)
    if move:
        change.removed.append(str(src))
    return moved, change


def _check(fs: VikingFS, identity: Identity, src: VikingURI, dst: VikingURI, *, move: bool) -> None:
    """Refuses a transfer the caller may not make, into the source itself, to a name that
    cannot be written or to a destination that exists."""
    check_access(identity, src, write=move)
    check_access(identity, dst, write=True)
    fs.check_peer(identity, src)
    if move:
        fs.check_removable(identity, src)
    if dst.is_within(src):
        raise InvalidArgument(
            f"Cannot move or copy {src} into itself ({dst})", {"from": str(src), "to": str(dst)}
        )
    fs.check_writable_name(dst)
    if fs.exists(identity, dst):
        raise AlreadyExists(f"Destination exists: {dst}", {"uri": str(dst)})


def _listed(fs: VikingFS, src_prefix: str) -> list[BlobInfo]:
    """The subtree's blobs, its own abstract last (the directory marker)."""
    depth = src_prefix.count("/")
    return sorted(
        fs.blobs.iter_all(src_prefix),
        key=lambda b: b.key.endswith("/" + ABSTRACT) and b.key.count("/") == depth,
    )


def _copy_tree(
    fs: VikingFS, listed: list[BlobInfo], src_prefix: str, dst_prefix: str, *, move: bool
) -> None:
    blobs = fs.blobs
    undated = set(undated_files(b.key for b in listed))
    for blob in listed:
        blobs.copy(blob.key, dst_prefix + blob.key[len(src_prefix) :])
        if blob.key in undated:  # the copy's mtime is new, its creation time is not
            _date(fs, dst_prefix + attrs_key_of(blob.key)[len(src_prefix) :], blob.modified)
    if move:  # a file's sidecars before it, as rm does
        for blob in sorted(listed, key=lambda b: not is_file_sidecar(b.key)):
            blobs.delete(blob.key)


def _copy_file(
    fs: VikingFS,
    identity: Identity,
    src: VikingURI,
    dst: VikingURI,
    src_info: BlobInfo,
    *,
    move: bool,
) -> None:
    blobs = fs.blobs
    blobs.copy(fs.key(identity, src), fs.key(identity, dst))
    attrs = fs.attrs_key(identity, src, False)
    for src_side, dst_side in zip(
        fs.file_sidecars(identity, src), fs.file_sidecars(identity, dst), strict=True
    ):
        if blobs.head(src_side) is not None:
            blobs.copy(src_side, dst_side)
        elif src_side == attrs:
            _date(fs, dst_side, src_info.modified)
        if move:
            blobs.delete(src_side)
    if move:
        blobs.delete(fs.key(identity, src))


def _date(fs: VikingFS, attrs_key: str, created_at: float) -> None:
    """Writes down the creation time of a copied file that had none recorded."""
    fs.blobs.put(attrs_key, attrs_bytes({"created_at": created_at}))
