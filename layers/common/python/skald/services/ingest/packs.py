"""Packs: export a subtree as an `.ovpack`, import one under a parent, back up and restore the
public scopes (domain/sources/packs.py holds the format and its rules).

An import or restore reads and checks the whole pack first (member headers, inflated sizes,
paths, manifest, digests, tags, every target name and the caller's write access); only then is
anything written. Imported files are indexed through the semantic queue; the L0/L1 sidecars
that came with the pack are kept and indexed as they are.
"""

from __future__ import annotations

import io
import stat
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from skald.domain.access.identity import Identity
from skald.domain.access.visibility import check_access, spans_owners
from skald.domain.errors import Conflict, InvalidArgument, PayloadTooLarge, PermissionDenied
from skald.domain.paths.names import ABSTRACT, OVERVIEW, is_managed_name
from skald.domain.paths.uri import ROOT, VikingURI, check_storable, classify_uri
from skald.domain.sources import packs as fmt
from skald.domain.text.outline import split_frontmatter
from skald.services.audit import AuditTrail, audited
from skald.services.fs.entries import FsChange
from skald.services.fs.filesystem import VikingFS
from skald.services.fs.write_batch import held_writes
from skald.services.ingest.processing import ProcessingScheduler
from skald.services.ingest.resources import ResourceService
from skald.services.ingest.results import UriResult
from skald.services.plans.quotas import Quotas

# What a corrupt archive raises while it is read (bad CRC, broken deflate stream, truncated
# member, unknown method).
_ZIP_ERRORS = (
    zipfile.BadZipFile,
    zlib.error,
    EOFError,
    NotImplementedError,
    RuntimeError,
    ValueError,
    OSError,
)
_CHUNK = 1024 * 1024


@dataclass
class _Tree:
    """A subtree gathered for a pack: directories, files and index records by rel path."""

    dirs: list[str] = field(default_factory=lambda: [""])
    files: dict[str, bytes] = field(default_factory=dict)
    records: list[dict[str, Any]] = field(default_factory=list)
    size: int = 0


def _rel(prefix: str, rel: str) -> str:
    return f"{prefix}/{rel}" if prefix and rel else prefix or rel


def _managed(uri: VikingURI) -> bool:
    """Directories whose L0/L1 the product keeps itself (scope roots, user spaces, directories
    spanning owners): a pack's sidecars for them are not written."""
    return (
        uri.is_root
        or not uri.parts
        or spans_owners(uri)
        or (uri.scope == "user" and len(uri.parts) == 1)
    )


class PackService:
    def __init__(
        self,
        fs: VikingFS,
        resources: ResourceService,
        scheduler: ProcessingScheduler,
        *,
        limits: fmt.PackLimits,
        audit: AuditTrail | None = None,
        quotas: Quotas | None = None,
    ) -> None:
        self.audit = audit
        self.quotas = quotas
        self.fs = fs
        self.resources = resources
        self.scheduler = scheduler
        self.limits = limits

    # ---------------------------------------------------------------- export and backup

    def export(self, identity: Identity, uri: VikingURI, include_vectors: bool) -> bytes:
        self._no_vectors(include_vectors)
        if uri.is_root:
            raise InvalidArgument(
                "Export a scope or a directory below it; back up the whole "
                "tree with the backup API",
                {"uri": str(uri)},
            )
        fmt.check_pack_scope(uri, "export")
        self._check_directory(identity, uri)
        tree = _Tree()
        self._gather(identity, uri, "", tree)
        return self._zip(fmt.build_members(uri.name, str(uri), tree.dirs, tree.files, tree.records))

    def backup(self, identity: Identity, include_vectors: bool) -> bytes:
        self._check_admin(identity, "back up")
        self._no_vectors(include_vectors)
        tree = _Tree()
        for scope in fmt.PACK_SCOPES:
            tree.dirs.append(scope)
            if self.fs.is_dir(identity, VikingURI(scope)):
                self._gather(identity, VikingURI(scope), scope, tree)
        return self._zip(
            fmt.build_members(
                fmt.BACKUP_NAME, str(ROOT), tree.dirs, tree.files, tree.records, backup=True
            )
        )

    @staticmethod
    def _no_vectors(include_vectors: bool) -> None:
        if include_vectors:
            raise InvalidArgument(
                "This server does not export vector snapshots: vectors are "
                "recomputed on import; export without include_vectors"
            )

    def _check_directory(self, identity: Identity, uri: VikingURI) -> None:
        self.fs.check_readable(identity, uri)
        if not self.fs.is_dir(identity, uri):
            if self.fs.file_info(identity, uri) is not None:
                raise InvalidArgument(f"Only directories can be exported: {uri}", {"uri": str(uri)})
            self.fs.stat(identity, uri)  # the usual 404

    def _gather(self, identity: Identity, root: VikingURI, prefix: str, tree: _Tree) -> None:
        self._dir_records(identity, root, prefix, tree)
        for entry in self.fs.walk(identity, root, show_hidden=True):
            rel = _rel(prefix, entry.rel_path)
            if entry.is_dir:
                tree.dirs.append(rel)
                self._dir_records(identity, entry.uri, rel, tree)
                continue
            name = entry.uri.name
            if name not in fmt.SIDECAR_NAMES and is_managed_name(name):
                continue  # attributes, parsed views, a commit's files: the product's own
            data = self.fs.blobs.get(self.fs.key(identity, entry.uri))
            if name == OVERVIEW:
                data = split_frontmatter(data.decode("utf-8", errors="replace"))[1].encode()
            tree.size += len(data)
            if tree.size > self.limits.max_total_bytes:
                raise PayloadTooLarge("Export", tree.size, self.limits.max_total_bytes)
            # this file, and the four members a pack adds (top folder, _ovpack/, index, manifest)
            if len(tree.files) + len(tree.dirs) + 5 > self.limits.max_entries:
                raise PayloadTooLarge(
                    "Export entry count",
                    len(tree.files) + len(tree.dirs) + 5,
                    self.limits.max_entries,
                )
            tree.files[rel] = data
            if name not in fmt.SIDECAR_NAMES:
                scalars: dict[str, Any] = {
                    "name": name,
                    "level": 2,
                    "context_type": classify_uri(entry.uri).context_type,
                }
                tags = self.fs.tags_of(identity, entry.uri, False)
                if tags:
                    scalars["tags"] = tags
                tree.records.append({"path": rel, "kind": "file", "level": 2, "scalars": scalars})

    def _dir_records(self, identity: Identity, uri: VikingURI, rel: str, tree: _Tree) -> None:
        if _managed(uri):
            return
        tags = self.fs.tags_of(identity, uri, True)
        context_type = classify_uri(uri).context_type
        _, abstract = self.fs.sidecar(identity, uri, ABSTRACT)
        _, overview = self.fs.sidecar(identity, uri, OVERVIEW)
        texts = {0: abstract or "", 1: split_frontmatter(overview or "")[1]}
        for level, text in texts.items():
            scalars: dict[str, Any] = {
                "level": level,
                "context_type": context_type,
                "abstract": texts[0],
            }
            if tags:
                scalars["tags"] = tags
            record: dict[str, Any] = {
                "path": rel,
                "kind": "directory",
                "level": level,
                "scalars": scalars,
            }
            if text:
                record["text"] = text
            tree.records.append(record)

    @staticmethod
    def _zip(members: list[tuple[str, bytes]]) -> bytes:
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
            for name, data in members:
                zf.writestr(name, data)
        return out.getvalue()

    # ---------------------------------------------------------------- reading a pack

    def read(self, data: bytes) -> fmt.Pack:
        """Checks every member header, inflates within the limits (sizes a zip declares are
        not trusted) and checks the pack against its manifest."""
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as zf:
                infos = zf.infolist()
                base = fmt.check_members(
                    [
                        fmt.MemberInfo(
                            i.filename,
                            i.file_size,
                            i.compress_size,
                            is_symlink=stat.S_ISLNK(i.external_attr >> 16),
                            encrypted=bool(i.flag_bits & 0x1),
                        )
                        for i in infos
                    ],
                    self.limits,
                )
                members: dict[str, bytes] = {}
                total = 0
                for info in infos:
                    content = b"" if info.is_dir() else self._inflate(zf, info, total)
                    total += len(content)
                    members[info.filename] = content
        except _ZIP_ERRORS as exc:
            raise InvalidArgument(
                f"The pack cannot be read: {exc}", {"reason": type(exc).__name__}
            ) from None
        return fmt.parse_pack(base, members)

    def _inflate(self, zf: zipfile.ZipFile, info: zipfile.ZipInfo, total: int) -> bytes:
        chunks: list[bytes] = []
        size = 0
        with zf.open(info) as member:
            while chunk := member.read(_CHUNK):
                size += len(chunk)
                if size > max(info.file_size, 0) or size > self.limits.max_file_bytes:
                    raise PayloadTooLarge(
                        f"Pack member {info.filename[:200]}",
                        size,
                        min(info.file_size, self.limits.max_file_bytes),
                    )
                if total + size > self.limits.max_total_bytes:
                    raise PayloadTooLarge("Pack content", total + size, self.limits.max_total_bytes)
                chunks.append(chunk)
        return b"".join(chunks)

    # ---------------------------------------------------------------- import and restore

    def import_pack(
        self,
        identity: Identity,
        temp_file_id: str,
        parent: VikingURI,
        *,
        on_conflict: str | None,
        vector_mode: str | None,
    ) -> UriResult:
        """Imports the caller's uploaded pack below `parent`. The upload is consumed by an
        import that is done; a refused one keeps it, so that a corrected retry (another
        parent, on_conflict) needs no new upload. Recorded in the audit trail (an import may
        replace what is there)."""
        with audited(
            self.audit,
            identity,
            "pack.import",
            str(parent),
            detail={"on_conflict": on_conflict, "vector_mode": vector_mode},
        ) as note:
            data = self.resources.read_upload(identity, temp_file_id)
            out = self._import(identity, data, parent, on_conflict, vector_mode)
            self.resources.discard_upload(identity, temp_file_id)
            note.detail["uri"] = out.uri
            return out

    def _import(
        self,
        identity: Identity,
        data: bytes,
        parent: VikingURI,
        on_conflict: str | None,
        vector_mode: str | None,
    ) -> UriResult:
        policy = fmt.check_on_conflict(on_conflict)
        if not parent.is_root:
            fmt.check_pack_scope(parent, "import")
        pack = self.read(data)
        fmt.check_vector_mode(vector_mode, pack)
        root = fmt.import_root(parent, pack)
        check_access(identity, root, write=True)
        self._plan(identity, pack, lambda rel: fmt.target_of(root, rel))
        exists = self.fs.is_dir(identity, root) or self.fs.file_info(identity, root) is not None
        if exists and policy == "fail":
            raise Conflict(
                f"Resource already exists at {root}. Use on_conflict='overwrite' to replace it.",
                {"uri": str(root)},
            )
        if exists and policy == "skip":
            return UriResult(str(root))
        added = self._check_records(identity, _content_files(pack))
        change = FsChange(identity.account_id, identity.user_id, processing_mode="vectors_only")
        if not parent.is_root and not self.fs.is_dir(identity, parent):
            change.dirs.extend(self.fs.mkdir(identity, parent, None).dirs)
        if exists:
            self._replace(identity, root, change)
        self._write(identity, pack, lambda rel: fmt.target_of(root, rel), change)
        self._records_added(identity, added)
        self._submit(identity, change, root, "import_ovpack")
        return UriResult(str(root))

    def restore(
        self,
        identity: Identity,
        temp_file_id: str,
        *,
        on_conflict: str | None,
        vector_mode: str | None,
    ) -> UriResult:
        """Restores a backup where it came from. As for an import, the upload is consumed once
        the restore is done and kept for a retry when it is refused. Recorded in the audit
        trail, a refused attempt too."""
        with audited(
            self.audit,
            identity,
            "pack.restore",
            str(ROOT),
            detail={"on_conflict": on_conflict, "vector_mode": vector_mode},
        ):
            self._check_admin(identity, "restore")
            data = self.resources.read_upload(identity, temp_file_id)
            out = self._restore(identity, data, on_conflict, vector_mode)
            self.resources.discard_upload(identity, temp_file_id)
            return out

    def _restore(
        self, identity: Identity, data: bytes, on_conflict: str | None, vector_mode: str | None
    ) -> UriResult:
        policy = fmt.check_on_conflict(on_conflict)
        pack = self.read(data)
        if not pack.is_backup:
            raise InvalidArgument(
                "Only backup packs can be restored (ov backup makes them); "
                "import other packs with the import API"
            )
        scopes = pack.manifest.get("scopes")
        if not isinstance(scopes, list) or not set(map(str, scopes)) <= set(fmt.PACK_SCOPES):
            raise InvalidArgument("Invalid backup scopes", {"scopes": str(scopes)[:200]})
        fmt.check_vector_mode(vector_mode, pack)
        self._plan(identity, pack, fmt.backup_target)
        existing = [
            str(fmt.backup_target(rel))
            for rel in sorted(pack.files)
            if rel.rsplit("/", 1)[-1] not in fmt.SIDECAR_NAMES
            and self.fs.file_info(identity, fmt.backup_target(rel)) is not None
        ]
        if existing and policy == "fail":
            raise Conflict(
                f"{len(existing)} file(s) of the backup already exist. Use "
                "on_conflict='overwrite' to replace them.",
                {"existing": existing[:20]},
            )
        if existing and policy == "skip":
            return UriResult(str(ROOT))
        added = self._check_records(identity, _content_files(pack) - len(existing))
        change = FsChange(identity.account_id, identity.user_id, processing_mode="vectors_only")
        self._write(identity, pack, fmt.backup_target, change)
        self._records_added(identity, added)
        self._submit(identity, change, ROOT, "restore_ovpack")
        return UriResult(str(ROOT))

    def _check_records(self, identity: Identity, files: int) -> int:
        """The plan's index records, one per file the pack brings, before anything is written."""
        if self.quotas is None:
            return 0
        return self.quotas.check_index_records(identity.account_id, files)

    def _records_added(self, identity: Identity, added: int) -> None:
        if added and self.quotas is not None:
            self.quotas.index_records_added(identity.account_id, added)

    @staticmethod
    def _check_admin(identity: Identity, what: str) -> None:
        if identity.role not in {"root", "admin"}:
            raise PermissionDenied(f"Only an account admin may {what} the whole tree")

    def _plan(self, identity: Identity, pack: fmt.Pack, target: Callable[[str], VikingURI]) -> None:
        """Every target is a name this server can store and the caller may write; a file
        never lands on an existing directory nor a directory on an existing file."""
        for rel in pack.dirs:
            uri = target(rel)
            if uri.is_root:
                continue
            self.fs.check_new_names(uri)
            check_storable(uri)
            check_access(identity, uri, write=True)
            if self.fs.file_info(identity, uri) is not None:
                raise Conflict(
                    f"A file exists where the pack has a directory: {uri}", {"uri": str(uri)}
                )
        for rel in pack.files:
            uri = target(rel)
            if uri.name in fmt.SIDECAR_NAMES:
                check_storable(uri)
                continue
            self.fs.check_writable_name(uri)
            check_access(identity, uri, write=True)
            if self.fs.is_dir(identity, uri):
                raise Conflict(
                    f"A directory exists where the pack has a file: {uri}", {"uri": str(uri)}
                )

    def _replace(self, identity: Identity, root: VikingURI, change: FsChange) -> None:
        """Overwrite: the existing root goes; a root the product keeps (a scope, a preset
        directory) stays and loses its content instead."""
        try:
            _, removed = self.fs.rm(identity, root, True)
            change.removed.extend(removed.removed)
        except PermissionDenied:
            for child in self.fs.children(identity, root, show_hidden=False):
                _, removed = self.fs.rm(identity, child.uri, True)
                change.removed.extend(removed.removed)

    def _write(
        self,
        identity: Identity,
        pack: fmt.Pack,
        target: Callable[[str], VikingURI],
        change: FsChange,
    ) -> None:
        for rel in pack.dirs:
            uri = target(rel)
            if uri.is_root:
                continue
            if not self.fs.is_dir(identity, uri):
                change.dirs.extend(self.fs.mkdir(identity, uri, None).dirs)
            tags = pack.tags_of(rel)
            if tags is not None:
                self.fs.set_tags(identity, uri, tags, "replace", False)
            if _managed(uri):
                continue
            for name in (ABSTRACT, OVERVIEW):
                text = pack.files.get(_rel(rel, name))
                if text is not None:
                    self.fs.write_sidecar(
                        identity, uri, name, text.decode("utf-8", errors="replace")
                    )
            change.indexed_dirs.append(str(uri))
        with held_writes(self.fs.blobs) as held:  # written in groups, durable at the end
            for rel, data in pack.files.items():
                uri = target(rel)
                if uri.name in fmt.SIDECAR_NAMES:
                    continue
                _, written = self.fs.write(
                    identity, uri, data, "replace", tags=pack.tags_of(rel), held=held
                )
                change.written.extend(written.written)
                change.dirs.extend(written.dirs)

    def _submit(
        self, identity: Identity, change: FsChange, root: VikingURI, task_type: str
    ) -> None:
        """Indexes the files and the imported L0/L1; the directory above the new root
        refreshes its own summary (it lists one more entry)."""
        self.scheduler.submit(
            identity, change, task_type=task_type, resource_id=str(root), internal=True
        )
        above = root.parent
        if above is not None and not above.is_root:
            refresh = FsChange(identity.account_id, identity.user_id, dirs=[str(above)])
            self.scheduler.submit(
                identity, refresh, task_type=task_type, resource_id=str(root), internal=True
            )


def _content_files(pack: fmt.Pack) -> int:
    return sum(1 for rel in pack.files if rel.rsplit("/", 1)[-1] not in fmt.SIDECAR_NAMES)
