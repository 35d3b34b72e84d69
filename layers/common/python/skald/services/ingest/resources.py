"""Adding resources: temp uploads, then a file or a zipped directory stored under a target.

A single uploaded file `foo.md` becomes `<target>/foo.md` with target `viking://resources/foo`
by default; a zipped directory keeps its tree under the target. As in OpenViking, a single
image, audio or video file goes under `viking://resources/{images,audio,video}/YYYY/MM/DD/`,
and a target that was not given is never reused: the same source added again gets `foo_1`,
`foo_2`, ...

An upload is the record of its add until the add's task exists: the root reserved for it is
noted in the upload's metadata, and the upload is only discarded once the task is recorded
(ContentService.add_resource). An add cut short (a crash, kill -9) leaves the upload, and the
retry with the same temp_file_id lands in the root the first attempt reserved, not in a
numbered sibling beside an orphan.
"""

from __future__ import annotations

import io
import json
import re
import secrets
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from skald.domain.access.identity import Identity
from skald.domain.errors import (
    Conflict,
    InvalidArgument,
    InvalidURI,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    SkaldError,
)
from skald.domain.paths.uri import (
    VikingURI,
    addressable_name,
    check_storable,
    from_canonical,
    parse_uri,
)
from skald.domain.text.formats import media_base_parts, media_kind
from skald.ports import BlobNotFound, BlobStore
from skald.services.faults import Faults
from skald.services.fs.entries import FsChange
from skald.services.fs.filesystem import VikingFS
from skald.services.fs.write_batch import held_writes
from skald.services.ingest.archives import ArchiveOptions, ArchiveReader, Member
from skald.services.plans.quotas import Quotas

_UPLOAD_SCOPE = "upload"
# How many numbered names (`foo_1` ... `foo_100`) are tried for a target that was not given.
MAX_NAME_ATTEMPTS = 100


@dataclass
class AddResourceRequest:
    temp_file_id: str | None = None
    path: str | None = None
    to: str | None = None
    parent: str | None = None
    source_name: str | None = None
    create_parent: bool = False
    ignore_dirs: str | None = None
    include: str | None = None
    exclude: str | None = None
    tags: list[str] | None = None
    tag_mode: str = "replace"

    @property
    def archive_options(self) -> ArchiveOptions:
        return ArchiveOptions(self.ignore_dirs, self.include, self.exclude)


@dataclass
class OpenedUpload:
    """An upload about to be added: its bytes, its metadata (the record of the add until
    its task exists), names, and a zipped directory's members (None: a single file)."""

    temp_file_id: str
    data: bytes
    meta: dict[str, Any]
    source: str
    stem: str
    media: str | None
    members: list[Member] | None

    @property
    def entries(self) -> int:
        return 1 if self.members is None else len(self.members)

    @property
    def size(self) -> int:
        """The bytes it writes (a member's size as the archive declares it)."""
        return len(self.data) if self.members is None else sum(m.size for m in self.members)


@dataclass
class AddResourceResult:
    root_uri: VikingURI
    source_path: str
    files: list[str] = field(default_factory=list)
    change: FsChange | None = None
    errors: list[str] = field(default_factory=list)


class ResourceService:
    def __init__(
        self,
        blobs: BlobStore,
        fs: VikingFS,
        *,
        max_upload_bytes: int,
        max_zip_entries: int,
        max_zip_bytes: int,
        clock: Callable[[], float] = time.time,
        faults: Faults | None = None,
        quotas: Quotas | None = None,
    ) -> None:
        self.quotas = quotas
        self.blobs = blobs
        self.fs = fs
        self.faults = faults or Faults()
        self.max_upload_bytes = max_upload_bytes
        self.max_zip_entries = max_zip_entries
        self.max_zip_bytes = max_zip_bytes
        self.clock = clock
        self.archives = ArchiveReader(
            max_entries=max_zip_entries, max_bytes=max_zip_bytes, max_file_bytes=fs.max_write_bytes
        )

    # ---------------------------------------------------------------- temp uploads

    def _upload_key(self, identity: Identity, temp_file_id: str) -> str:
        return f"{identity.account_id}/{_UPLOAD_SCOPE}/{temp_file_id}"

    def temp_upload(self, identity: Identity, filename: str, data: bytes) -> str:
        if len(data) > self.max_upload_bytes:
            raise PayloadTooLarge("Upload", len(data), self.max_upload_bytes)
        suffix = PurePosixPath(filename or "").suffix.lower()
        if not suffix or len(suffix) > 16 or not suffix[1:].isalnum():
            suffix = ".bin"
        temp_file_id = f"upload_{secrets.token_hex(16)}{suffix}"
        meta = {
            "filename": PurePosixPath(filename or "upload").name,
            "user": identity.user_id,
            "created_at": self.clock(),
            "size": len(data),
        }
        key = self._upload_key(identity, temp_file_id)
        self.blobs.put(key, data, if_none_match=True)
        self.blobs.put(key + ".meta", json.dumps(meta).encode())
        return temp_file_id

    def remove_uploads(self, account_id: str, user_id: str) -> int:
        """Removes the temp uploads `user_id` made and has not used yet (their owner is being
        deleted); returns how many."""
        removed = 0
        for blob in list(self.blobs.iter_all(f"{account_id}/{_UPLOAD_SCOPE}/")):
            if not blob.key.endswith(".meta"):
                continue
            try:
                owner = json.loads(self.blobs.get(blob.key)).get("user")
            except (BlobNotFound, ValueError, AttributeError):
                continue
            if owner == user_id:
                self.blobs.delete(blob.key.removesuffix(".meta"))
                self.blobs.delete(blob.key)
                removed += 1
        return removed

    def _take_upload(self, identity: Identity, temp_file_id: str) -> tuple[bytes, dict[str, Any]]:
        """An upload is bound to the user who made it: anyone else, an admin of the account
        included, gets the same 404 as for an id that never existed."""
        name = PurePosixPath(temp_file_id).name
        if name != temp_file_id or not name.startswith("upload_") or name.endswith(".meta"):
            raise InvalidArgument(f"Invalid temp_file_id '{temp_file_id}'")
        key = self._upload_key(identity, name)
        missing = NotFound(f"Temp file not found: {temp_file_id}", temp_file_id, "temp_file")
        try:
            meta = json.loads(self.blobs.get(key + ".meta"))
        except BlobNotFound:
            raise missing from None
        if not isinstance(meta, dict) or meta.get("user") != identity.user_id:
            raise missing
        try:
            data = self.blobs.get(key)
        except BlobNotFound:
            raise missing from None
        return data, meta

    def open_upload(self, identity: Identity, temp_file_id: str) -> tuple[str, bytes, bool]:
        """An upload's file name, bytes and whether it is a zip archive (kept until
        `discard_upload`)."""
        data, meta = self._take_upload(identity, temp_file_id)
        name = PurePosixPath(str(meta.get("filename") or temp_file_id)).name
        return name, data, zipfile.is_zipfile(io.BytesIO(data))

    def unpack(self, data: bytes) -> list[tuple[str, bytes]]:
        """A zip archive's files (relative path, bytes) under the archive limits, a single top
        folder unwrapped; version-control and cache folders left out."""
        return self.archives.files(data, ArchiveOptions())

    def read_upload(self, identity: Identity, temp_file_id: str) -> bytes:
        """The bytes of the caller's own temp upload (404 for anyone else's)."""
        return self._take_upload(identity, temp_file_id)[0]

    def note_upload(self, identity: Identity, opened: OpenedUpload, **notes: Any) -> None:
        """Records in the upload's metadata what its add has done so far (a retry reads it)."""
        opened.meta.update(notes)
        key = self._upload_key(identity, opened.temp_file_id) + ".meta"
        self.blobs.put(key, json.dumps(opened.meta).encode())

    def discard_upload(self, identity: Identity, temp_file_id: str) -> None:
        """Drops a temp upload that will not be added (its add failed)."""
        self._discard_upload(identity, temp_file_id)

    def _discard_upload(self, identity: Identity, temp_file_id: str) -> None:
        key = self._upload_key(identity, temp_file_id)
        self.blobs.delete(key)
        self.blobs.delete(key + ".meta")

    # ---------------------------------------------------------------- add

    def _target(
        self,
        identity: Identity,
        req: AddResourceRequest,
        stem: str,
        media: str | None = None,
        base_parts: tuple[str, ...] = (),
    ) -> VikingURI:
        if req.to and req.parent:
            raise InvalidArgument("'to' and 'parent' cannot be combined")
        if req.to:
            target = parse_uri(req.to, user_id=identity.user_id, privileged=identity.privileged)
            if not _may_add_at(identity, target) or target in (
                VikingURI("resources"),
                _own_resources(identity),
            ):
                raise InvalidURI(
                    req.to,
                    "target must be below viking://resources/ or viking://user/{uid}/resources/",
                )
            return target
        if req.parent:
            base = self._parent(identity, req.parent, req.create_parent)
        elif media is not None:
            day = time.strftime("%Y/%m/%d", time.gmtime(self.clock()))
            base = VikingURI("resources", media_base_parts(media, day))
        else:
            base = VikingURI("resources", base_parts)
        return base.child(addressable_name(stem))

    def _parent(self, identity: Identity, parent: str, create: bool) -> VikingURI:
        """The directory an add names as its parent, made when `create`."""
        base = parse_uri(parent, user_id=identity.user_id, privileged=identity.privileged)
        if not _may_add_at(identity, base):
            raise InvalidURI(
                parent,
                "parent must be viking://resources or below, or "
                "viking://user/{uid}/resources or below",
            )
        if not self.fs.is_dir(identity, base):
            if not create:
                raise NotFound(f"Parent directory not found: {base}", str(base), "directory")
            self.fs.mkdir(identity, base, None)
        return base

    def open_add(self, identity: Identity, req: AddResourceRequest) -> OpenedUpload:
        """The upload an add names, and a zipped directory's members (from the archive's
        directory: nothing is inflated yet)."""
        if bool(req.temp_file_id) == bool(req.path):
            raise InvalidArgument("Exactly one of 'path' and 'temp_file_id' is required")
        if req.path:
            raise self._path_error(req.path)
        assert req.temp_file_id is not None
        data, meta = self._take_upload(identity, req.temp_file_id)
        source = req.source_name or meta.get("filename") or req.temp_file_id
        source = PurePosixPath(source).name or "resource"
        if req.temp_file_id.endswith(".zip") and zipfile.is_zipfile(io.BytesIO(data)):
            stem = source[:-4] if source.lower().endswith(".zip") else source
            members = self.archives.members(data, req.archive_options)
            if not members:
                raise InvalidArgument("The upload contains no files to add")
            return OpenedUpload(req.temp_file_id, data, meta, source, stem, None, members)
        stem = PurePosixPath(source).stem or source
        return OpenedUpload(req.temp_file_id, data, meta, source, stem, media_kind(source), None)

    def claim_for_import(
        self, identity: Identity, req: AddResourceRequest, opened: OpenedUpload
    ) -> tuple[VikingURI, FsChange]:
        """A zipped directory that a worker writes: every member inflated once (all the
        checks of an add run now), then its root reserved as an add reserves it."""
        assert opened.members is not None
        self.archives.check(opened.data, opened.members)
        # The plan's index records, one per file, before the root is made; counted now, as
        # the worker that writes them may not count them.
        added = self._check_records(identity, len(opened.members))
        claimed = self._claim(identity, req, opened, [m.rel for m in opened.members])
        self._records_added(identity, added)
        return claimed

    def add(
        self, identity: Identity, req: AddResourceRequest, opened: OpenedUpload | None = None
    ) -> AddResourceResult:
        opened = opened or self.open_add(identity, req)
        if opened.members is None:
            files = [(addressable_name(opened.source), opened.data)]
        else:
            files = self.archives.read(opened.data, opened.members)
        # The plan's index records, one per file, before anything (the root included) is made.
        added = self._check_records(identity, len(files))
        target, change = self._claim(identity, req, opened, [rel for rel, _ in files])
        self.faults.hit("resources.after_root")
        result = AddResourceResult(target, opened.source)
        with held_writes(self.fs.blobs) as held:  # written in groups, durable at the end
            for rel, content in files:
                uri = target.child(rel)
                _, fchange = self.fs.write(
                    identity,
                    uri,
                    content,
                    "replace",
                    tags=req.tags,
                    tag_mode=req.tag_mode,
                    held=held,
                )
                change.dirs.extend(fchange.dirs)
                change.written.extend(fchange.written)
                result.files.append(str(uri))
        self.faults.hit("resources.after_files")
        self._records_added(identity, added)
        result.change = change
        return result  # the caller discards the upload once the add's task is recorded

    def _check_records(self, identity: Identity, files: int) -> int:
        if self.quotas is None:
            return 0
        return self.quotas.check_index_records(identity.account_id, files)

    def _records_added(self, identity: Identity, added: int) -> None:
        if added and self.quotas is not None:
            self.quotas.index_records_added(identity.account_id, added)

    def _claim(
        self, identity: Identity, req: AddResourceRequest, opened: OpenedUpload, rels: list[str]
    ) -> tuple[VikingURI, FsChange]:
        """The add's root, made (or reused: `to`, or the root an interrupted add of the same
        upload reserved), once every entry is found storable below it."""
        target = self._target(identity, req, opened.stem, opened.media)
        # Every entry must be storable before anything is written (with the longest numbered
        # name the root may get when the target was not given).
        root = (
            target
            if req.to or target.parent is None
            else target.parent.child(f"{target.name}_{MAX_NAME_ATTEMPTS}")
        )
        for rel in rels:
            check_storable(root.child(rel))
        change = FsChange(identity.account_id, identity.user_id)
        if req.to:
            if self.fs.file_info(identity, target) is not None:
                raise InvalidArgument(f"A file exists at the target {target}", {"uri": str(target)})
            change.dirs.extend(self.fs.mkdir(identity, target, None).dirs)
            return target, change
        resumed = self._reserved_before(identity, opened.meta, target)
        if resumed is not None:
            change.dirs.append(str(resumed))
            return resumed, change
        note = self._noter(identity, opened.temp_file_id, opened.meta)
        return self._reserve(identity, target, change, note), change

    def _noter(
        self, identity: Identity, temp_file_id: str, meta: dict[str, Any]
    ) -> Callable[[VikingURI, bool], None]:
        """Notes in the upload's metadata the root being reserved for it (`made`: created)."""
        key = self._upload_key(identity, temp_file_id) + ".meta"

        def note(root: VikingURI, made: bool) -> None:
            meta.update(root=str(root), root_made=made)
            self.blobs.put(key, json.dumps(meta).encode())

        return note

    def _reserved_before(
        self, identity: Identity, meta: dict[str, Any], candidate: VikingURI
    ) -> VikingURI | None:
        """The root an earlier, interrupted add of this upload reserved, when it is still a
        directory and the one this request would reserve (`candidate` or a numbered sibling
        of it). Only noted as about to be made, the root is taken when it is empty: made then
        by that attempt just before it ended (or, at worst, by another add of the same name
        at that instant, which shares it)."""
        raw = meta.get("root")
        if not isinstance(raw, str):
            return None
        try:
            root = from_canonical(raw)
        except InvalidURI:
            return None
        numbered = re.fullmatch(re.escape(candidate.name) + r"(_\d+)?", root.name)
        if (
            root.parent != candidate.parent
            or numbered is None
            or not self.fs.is_dir(identity, root)
        ):
            return None
        if meta.get("root_made") is True or not self.fs.children(identity, root, show_hidden=False):
            return root
        return None

    def reserve_root(
        self,
        identity: Identity,
        req: AddResourceRequest,
        stem: str,
        base_parts: tuple[str, ...] = (),
    ) -> tuple[VikingURI, FsChange]:
        """The root a source fetched later lands in, created now (so the answer can name it):
        `req.to` as given, else the first free numbered name below `base_parts`."""
        target = self._target(identity, req, stem, base_parts=base_parts)
        change = FsChange(identity.account_id, identity.user_id)
        if req.to:
            if self.fs.file_info(identity, target) is not None:
                raise InvalidArgument(f"A file exists at the target {target}", {"uri": str(target)})
            change.dirs.extend(self.fs.mkdir(identity, target, None).dirs)
            return target, change
        return self._reserve(identity, target, change), change

    def _reserve(
        self,
        identity: Identity,
        candidate: VikingURI,
        change: FsChange,
        note: Callable[[VikingURI, bool], None] | None = None,
    ) -> VikingURI:
        """The first of `name`, `name_1`, `name_2`, ... that is free, created as the root:
        creating its directory marker is the reservation, so two adds of the same source at
        once still get different roots. `note` hears of the root before and after it is
        made."""
        parent = candidate.parent or candidate
        for attempt in range(MAX_NAME_ATTEMPTS + 1):
            uri = candidate if attempt == 0 else parent.child(f"{candidate.name}_{attempt}")
            if self.fs.file_info(identity, uri) is not None or self.fs.is_dir(identity, uri):
                continue
            if note is not None:
                note(uri, False)
            made = self.fs.mkdir(identity, uri, None)
            if str(uri) in made.dirs:
                if note is not None:
                    note(uri, True)
                change.dirs.extend(made.dirs)
                return uri
        raise Conflict(
            f"No free name for {candidate} after {MAX_NAME_ATTEMPTS} numbered "
            "attempts; pass 'to' or remove older copies",
            {"uri": str(candidate)},
        )

    @staticmethod
    def _path_error(path: str) -> SkaldError:
        lowered = path.lower()
        if lowered.startswith(("http://", "https://", "git@", "ssh://", "git://", "tos://")):
            return PermissionDenied(
                "This server does not fetch remote sources; upload the file with "
                "temp_upload and pass temp_file_id",
                {"path": path},
            )
        return PermissionDenied(
            "HTTP server only accepts remote resource URLs or temp-uploaded files; "
            "upload the local file first",
            {"path": path},
        )


def _own_resources(identity: Identity) -> VikingURI:
    return VikingURI("user", (identity.user_id, "resources"))


def _may_add_at(identity: Identity, uri: VikingURI) -> bool:
    """Below the shared resources, or a user's own (an admin's: any user's)."""
    if uri.scope == "user" and len(uri.parts) >= 2 and uri.parts[1] == "resources":
        return identity.role in {"root", "admin"} or uri.is_within(_own_resources(identity))
    return uri.is_within(VikingURI("resources"))
