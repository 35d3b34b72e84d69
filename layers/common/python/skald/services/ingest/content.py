"""Content use cases: every mutation of the tree, followed by its semantic processing."""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from skald.domain.access.identity import Identity
from skald.domain.access.visibility import check_access
from skald.domain.errors import AlreadyExists, Conflict, InvalidArgument, NotFound
from skald.domain.paths.uri import VikingURI, classify_uri
from skald.domain.sources.remote import is_remote
from skald.ports import Task, TaskStatus
from skald.services.audit import AuditTrail, audited
from skald.services.fs.entries import FsChange
from skald.services.fs.filesystem import VikingFS
from skald.services.fs.transfer import transfer
from skald.services.fs.write_batch import held_writes
from skald.services.ingest.processing import ProcessingScheduler, check_processing_mode
from skald.services.ingest.resources import AddResourceRequest, ResourceService
from skald.services.ingest.results import (
    Added,
    AddStatus,
    BatchItem,
    BatchWritten,
    Copied,
    ItemStatus,
    MemoryCleanup,
    Moved,
    ProcessingStatus,
    Reindexed,
    Removed,
    Tagged,
    UriResult,
    Written,
)
from skald.services.plans.quotas import Quotas

if TYPE_CHECKING:
    from skald.services.ingest.fetch import RemoteSources
    from skald.services.ingest.imports import ArchiveImports
    from skald.services.ingest.watches import WatchService


@dataclass
class BatchOperation:
    uri: VikingURI
    content: str | None = None
    content_base64: str | None = None
    mode: str = "replace"
    expected_sha256: str | None = None
    tags: list[str] | None = None
    tag_mode: str = "replace"


def root_uri_of(uri: VikingURI) -> VikingURI:
    """The resource root a file belongs to (`viking://resources/<name>`), else its parent."""
    if uri.scope == "resources" and len(uri.parts) >= 2:
        return VikingURI("resources", uri.parts[:1])
    if uri.scope == "user" and len(uri.parts) >= 4 and uri.parts[1] == "resources":
        return VikingURI("user", uri.parts[:3])
    return uri.parent or uri


class ContentService:
    def __init__(
        self,
        fs: VikingFS,
        resources: ResourceService,
        scheduler: ProcessingScheduler,
        *,
        wait_timeout_s: float,
        remote: Callable[[], RemoteSources] | None = None,
        watches: Callable[[], WatchService] | None = None,
        audit: AuditTrail | None = None,
        quotas: Quotas | None = None,
        imports: Callable[[], ArchiveImports] | None = None,
    ) -> None:
        self.quotas = quotas
        self._remote = remote
        self._imports = imports
        self.audit = audit
        self._watches = watches
        self.fs = fs
        self.resources = resources
        self.scheduler = scheduler
        self.wait_timeout_s = wait_timeout_s

    def _process(
        self,
        identity: Identity,
        change: FsChange,
        task_type: str,
        wait: bool,
        resource_id: str | None = None,
        internal: bool = True,
        forget: bool = True,
        submitted: Callable[[], None] | None = None,
    ) -> tuple[Task, ProcessingStatus]:
        """Submits the change's processing as a task (`submitted` runs once it is recorded)
        and, with `wait`, waits for it."""
        task = self.scheduler.submit(
            identity,
            change,
            task_type=task_type,
            resource_id=resource_id,
            internal=internal,
            forget=forget,
        )
        if submitted is not None:
            submitted()
        if not wait:
            return task, ProcessingStatus.QUEUED
        task = self.scheduler.wait_task(identity, task.task_id, self.wait_timeout_s)
        return task, ProcessingStatus.of_task(task.status)

    def write(
        self,
        identity: Identity,
        uri: VikingURI,
        content: str,
        *,
        mode: str,
        wait: bool,
        processing_mode: str,
        tags: list[str] | None,
        tag_mode: str,
    ) -> Written:
        check_processing_mode(processing_mode)
        data = content.encode("utf-8")
        self.fs.check_size(len(data))
        added = self._check_records(identity, lambda: 0 if self.fs.file_info(identity, uri) else 1)
        result, change = self.fs.write(identity, uri, data, mode, tags=tags, tag_mode=tag_mode)
        self._records_added(identity, added)
        change.processing_mode = processing_mode
        task, status = self._process(identity, change, "write", wait, str(uri))
        semantic = status if processing_mode == "semantic_and_vectors" else ProcessingStatus.SKIPPED
        return Written(
            uri=str(uri),
            root_uri=str(root_uri_of(uri)),
            context_type=classify_uri(uri).context_type,
            mode=mode,
            written_bytes=result.written_bytes,
            created=result.created,
            content_updated=result.content_updated,
            sha256=result.sha256,
            semantic_status=semantic,
            vector_status=status,
            task_id=task.task_id,
        )

    def batch_write(
        self,
        identity: Identity,
        root: VikingURI,
        ops: list[BatchOperation],
        *,
        wait: bool,
        skip_conflicts: bool,
        defer_processing: bool,
        processing_mode: str,
    ) -> BatchWritten:
        check_processing_mode(processing_mode)
        check_access(identity, root, write=True)
        if not self.fs.is_dir(identity, root):
            raise NotFound(f"Directory not found: {root}", str(root), "directory")
        if not ops:
            raise InvalidArgument("operations must not be empty")
        payloads = self._payloads(root, ops)
        # Every precondition is checked before anything is written.
        conflicting = self._conflicts(identity, ops, skip_conflicts)
        added = self._check_records(
            identity,
            lambda: sum(
                1
                for op in ops
                if str(op.uri) not in conflicting and self.fs.file_info(identity, op.uri) is None
            ),
        )
        change = FsChange(identity.account_id, identity.user_id, processing_mode=processing_mode)
        results = self._write_all(identity, ops, payloads, conflicting, change, skip_conflicts)
        self._records_added(identity, added)
        written = sum(1 for r in results if r.status == ItemStatus.WRITTEN)
        if change.written and not defer_processing:
            task, status = self._process(identity, change, "batch_write", wait, str(root))
            return BatchWritten(
                str(root), results, written, len(results) - written, task.task_id, status
            )
        return BatchWritten(
            str(root),
            results,
            written,
            len(results) - written,
            None,
            ProcessingStatus.DEFERRED if change.written else ProcessingStatus.NONE,
        )

    def _check_records(self, identity: Identity, new_files: Callable[[], int]) -> int:
        """The plan's `index_records` before a write: one record asked per new file (counted
        only when the account is limited)."""
        if self.quotas is None:
            return 0
        return self.quotas.check_index_records(identity.account_id, new_files)

    def _records_added(self, identity: Identity, added: int) -> None:
        if added and self.quotas is not None:
            self.quotas.index_records_added(identity.account_id, added)

    def _payloads(self, root: VikingURI, ops: list[BatchOperation]) -> list[bytes]:
        """Each operation's bytes, once every operation is found valid (a bad one fails the
        batch, not half of it)."""
        payloads: list[bytes] = []
        seen: set[VikingURI] = set()
        for i, op in enumerate(ops):
            if not op.uri.is_within(root) or op.uri == root:
                raise InvalidArgument(f"operations[{i}].uri {op.uri} is not below {root}")
            if op.uri in seen:
                raise InvalidArgument(f"operations[{i}].uri {op.uri} appears twice")
            seen.add(op.uri)
            self.fs.check_writable_name(op.uri)
            data = self._payload(i, op)
            self.fs.check_size(len(data))
            payloads.append(data)
        return payloads

    @staticmethod
    def _payload(i: int, op: BatchOperation) -> bytes:
        if (op.content is None) == (op.content_base64 is None):
            raise InvalidArgument(
                f"operations[{i}]: exactly one of content and content_base64 is required"
            )
        if op.mode not in ("replace", "append", "create", "upsert"):
            raise InvalidArgument(
                f"operations[{i}].mode '{op.mode}' is not one of replace, append, create, upsert"
            )
        if op.content is not None:
            return op.content.encode("utf-8")
        try:
            return base64.b64decode(op.content_base64 or "", validate=True)
        except (binascii.Error, ValueError):
            raise InvalidArgument(f"operations[{i}].content_base64 is not valid base64") from None

    def _conflicts(
        self, identity: Identity, ops: list[BatchOperation], skip_conflicts: bool
    ) -> set[str]:
        """The URIs whose precondition fails; without `skip_conflicts`, a Conflict."""
        conflicts: list[dict[str, Any]] = []
        for op in ops:
            reason = self._precondition(identity, op)
            if reason:
                conflicts.append({"uri": str(op.uri), "reason": reason})
        if conflicts and not skip_conflicts:
            raise Conflict(
                f"{len(conflicts)} operation(s) conflict; nothing was written",
                {"conflicts": conflicts},
            )
        return {c["uri"] for c in conflicts}

    def _write_all(
        self,
        identity: Identity,
        ops: list[BatchOperation],
        payloads: list[bytes],
        conflicting: set[str],
        change: FsChange,
        skip_conflicts: bool,
    ) -> list[BatchItem]:
        """Writes the operations (durable as a whole before the answer and the job; the files
        written in groups) into `change`; one item per operation."""
        results: list[BatchItem] = []
        with held_writes(self.fs.blobs, skip_blocked=skip_conflicts) as held:
            for op, data in zip(ops, payloads, strict=True):
                if str(op.uri) in conflicting:
                    results.append(BatchItem(str(op.uri), ItemStatus.SKIPPED, reason="conflict"))
                    continue
                mode = "replace" if op.mode == "upsert" else op.mode
                try:
                    res, ch = self.fs.write(
                        identity,
                        op.uri,
                        data,
                        mode,
                        tags=op.tags,
                        tag_mode=op.tag_mode,
                        expected_sha256=op.expected_sha256,
                        held=held,
                    )
                except (Conflict, AlreadyExists) as exc:
                    if not skip_conflicts:
                        raise
                    results.append(BatchItem(str(op.uri), ItemStatus.SKIPPED, reason=exc.message))
                    continue
                change.dirs.extend(ch.dirs)
                change.written.extend(ch.written)
                results.append(
                    BatchItem(
                        str(op.uri),
                        ItemStatus.WRITTEN,
                        written_bytes=res.written_bytes,
                        sha256=res.sha256,
                    )
                )
        if held.blocked:  # paths another request changed meanwhile
            self._skip_blocked(
                {str(op.uri) for op in ops if self.fs.key(identity, op.uri) in held.blocked},
                results,
                change,
            )
        return results

    @staticmethod
    def _skip_blocked(blocked: set[str], results: list[BatchItem], change: FsChange) -> None:
        """Reports as skipped the files (URIs) that another request kept from being written
        after they were checked (a directory made at a file's path, or a file at its
        folder's)."""
        for r in results:
            if r.status == ItemStatus.WRITTEN and r.uri in blocked:
                r.written_bytes = r.sha256 = None
                r.status = ItemStatus.SKIPPED
                r.reason = "conflict: another request changed this path meanwhile"
        change.written = [u for u in change.written if u not in blocked]

    def _precondition(self, identity: Identity, op: BatchOperation) -> str | None:
        info = self.fs.file_info(identity, op.uri)
        if op.mode == "create" and info is not None:
            return "exists"
        if op.expected_sha256 is not None:
            actual = (
                ""
                if info is None
                else hashlib.sha256(self.fs.read_bytes(identity, op.uri)).hexdigest()
            )
            if actual != op.expected_sha256:
                return "sha256_mismatch"
        return None

    def mkdir(self, identity: Identity, uri: VikingURI, description: str | None) -> UriResult:
        change = self.fs.mkdir(identity, uri, description)
        if change.dirs:
            self._process(identity, change, "mkdir", False)
        return UriResult(str(uri))

    def rm(self, identity: Identity, uri: VikingURI, *, recursive: bool, wait: bool) -> Removed:
        """Recorded in the audit trail (a memory's removal as `memory.forget`), the failed
        attempts too."""
        action = "memory.forget" if classify_uri(uri).memory_root is not None else "fs.rm"
        with audited(
            self.audit, identity, action, str(uri), detail={"recursive": recursive}
        ) as note:
            count, change = self.fs.rm(identity, uri, recursive)
            note.detail["deleted"] = count
        task, status = self._process(identity, change, "rm", wait, str(uri))
        # Gone from the index before this answer (ProcessingScheduler.submit), unless that
        # failed: then the job removes them, and they are only queued.
        removed = task.meta.get("removed_records")
        return Removed(
            uri=str(uri),
            estimated_deleted_count=count,
            memory_cleanup=MemoryCleanup(removed if isinstance(removed, int) else status),
            semantic_root_uri=str(uri.parent or uri),
            semantic_status=status,
            task_id=task.task_id,
        )

    def mv(self, identity: Identity, src: VikingURI, dst: VikingURI) -> Moved:
        """Recorded in the audit trail: the source goes away (a destination that exists is
        refused, never overwritten, and the refusal is recorded too)."""
        with audited(self.audit, identity, "fs.mv", str(src), detail={"to": str(dst)}):
            change = transfer(self.fs, identity, src, dst, move=True)[1]
        task, _ = self._process(identity, change, "mv", False, str(dst))
        return Moved(str(src), str(dst), task.task_id)

    def cp(self, identity: Identity, src: VikingURI, dst: VikingURI, recursive: bool) -> Copied:
        copied, change = transfer(self.fs, identity, src, dst, move=False, recursive=recursive)
        task, _ = self._process(identity, change, "cp", False, str(dst))
        return Copied(str(src), str(dst), recursive, len(copied), task.task_id)

    def set_tags(
        self, identity: Identity, uri: VikingURI, tags: list[str] | None, mode: str, recursive: bool
    ) -> Tagged:
        if uri.is_root:
            raise InvalidArgument(
                "viking:// itself takes no tags: tag a scope or an entry below it",
                {"uri": str(uri)},
            )
        changed = self.fs.set_tags(identity, uri, tags, mode, recursive)
        if changed:
            change = FsChange(identity.account_id, identity.user_id, processing_mode="vectors_only")
            change.written.extend(u for u in changed)
            self._process(identity, change, "set_tags", False)
        return Tagged(
            str(uri), self.fs.tags_of(identity, uri, self.fs.is_dir(identity, uri)), len(changed)
        )

    def add_resource(
        self,
        identity: Identity,
        req: AddResourceRequest,
        *,
        wait: bool,
        processing_mode: str,
        watch_interval: float = 0,
        reason: str = "",
        instruction: str = "",
    ) -> Added:
        check_processing_mode(processing_mode)
        remote = bool(
            req.path and is_remote(req.path) and self._remote is not None and not req.temp_file_id
        )
        if not watch_interval >= 0 or (watch_interval > 0 and not remote):
            raise InvalidArgument(
                "watch_interval (minutes, > 0) applies to remote sources "
                "(http(s) pages and git repositories) only"
            )
        if remote:
            return self._add_remote(
                identity,
                req,
                wait=wait,
                processing_mode=processing_mode,
                watch=(watch_interval, reason, instruction),
            )
        opened = self.resources.open_add(identity, req)
        imports = self._imports() if self._imports is not None else None
        if imports is not None and imports.takes(opened):
            # Too large to write inside the request: the fetch worker imports it.
            task_id, root = imports.submit(identity, req, opened, processing_mode=processing_mode)
            out = Added(AddStatus.SUCCESS, task_id, opened.source, str(root))
            return self._awaited(identity, out) if wait else out
        result = self.resources.add(identity, req, opened)
        assert result.change is not None
        result.change.processing_mode = processing_mode
        # The upload stays until the task records the add: an add cut short before that is
        # retried with the same upload, into the same root.
        assert req.temp_file_id is not None
        temp_file_id = req.temp_file_id
        task, status = self._process(
            identity,
            result.change,
            "add_resource",
            wait,
            str(result.root_uri),
            internal=False,
            submitted=lambda: self.resources.discard_upload(identity, temp_file_id),
        )
        out = Added(AddStatus.SUCCESS, task.task_id, result.source_path, str(result.root_uri))
        if wait:
            self._outcome(identity, out, task, len(result.files), status)
        return out

    def _outcome(
        self, identity: Identity, out: Added, task: Task, count: int, status: ProcessingStatus
    ) -> None:
        """What an add waited for came to: errors, the files stored without text
        (unparseable or binary, with the reason), how many files, the queues."""
        marked = (task.result or {}).get("not_indexed")
        out.errors = [task.error] if task.error else []
        out.meta = {"not_indexed": marked} if marked else {}
        out.context_count = count
        out.semantic_status = status
        out.queue_status = self.scheduler.queue_status(identity)

    def _add_remote(
        self,
        identity: Identity,
        req: AddResourceRequest,
        *,
        wait: bool,
        processing_mode: str,
        watch: tuple[float, str, str],
    ) -> Added:
        """Queues the fetch (and, with an interval, the watch that repeats it)."""
        assert self._remote is not None
        interval, reason, instruction = watch
        watches = self._watches() if interval > 0 and self._watches is not None else None
        if watches is not None:  # a watch that cannot be made refuses the add before it runs
            watches.check_new(identity, interval, req.to)
        self._check_records(identity, lambda: 1)  # how many files it brings is not known yet
        task_id, root, source = self._remote().submit(
            identity, req, processing_mode=processing_mode
        )
        out = Added(AddStatus.SUCCESS, task_id, source, str(root))
        if watches is not None:
            out.watch_task_id = watches.create(
                identity,
                source,
                str(root),
                interval,
                reason=reason,
                instruction=instruction,
                options={
                    "include": req.include,
                    "exclude": req.exclude,
                    "ignore_dirs": req.ignore_dirs,
                    "processing_mode": processing_mode,
                },
            ).task_id
        return self._awaited(identity, out) if wait else out

    def _awaited(self, identity: Identity, out: Added) -> Added:
        """An add a worker does (a fetch, an import), waited for: its task's outcome."""
        task = self.scheduler.wait_task(identity, out.task_id, self.wait_timeout_s)
        if task.status == TaskStatus.FAILED:
            out.status = AddStatus.ERROR
        done = task.result or {}
        count = int(done.get("indexed_files", 0)) + len(done.get("not_indexed") or [])
        self._outcome(identity, out, task, count, ProcessingStatus.of_task(task.status))
        return out

    def reindex(
        self,
        identity: Identity,
        uri: VikingURI,
        *,
        mode: str,
        wait: bool,
        recursive: bool,
        tags: list[str] | None,
        tag_mode: str,
    ) -> Reindexed:
        """Rebuilds the index records (and, in semantic mode, the sidecars) from the blobs."""
        check_processing_mode(mode)
        check_access(identity, uri, write=True)
        if not self.fs.exists(identity, uri):
            raise NotFound(f"File not found: {uri}", str(uri))
        is_dir = self.fs.is_dir(identity, uri)
        if is_dir and recursive:
            files = [e.uri for e in self.fs.iter_files(identity, uri)]
            dirs = [uri, *(e.uri for e in self.fs.walk(identity, uri) if e.is_dir)]
        elif is_dir:
            kids = self.fs.children(identity, uri, show_hidden=False)
            files = [e.uri for e in kids if not e.is_dir]
            dirs = [uri]
        else:
            files, dirs = [uri], []
        if tags is not None or tag_mode == "clear":
            for f in files:
                self.fs.set_tags(identity, f, tags, tag_mode, False)
        change = FsChange(identity.account_id, identity.user_id, processing_mode=mode)
        change.written.extend(str(f) for f in files)
        # Vectors only: the directories' records are rebuilt from their sidecars as they are.
        change.dirs.extend(str(d) for d in dirs)
        if is_dir and recursive:
            change.removed.append(str(uri))  # drop stale records first, then rebuild
        # Its paths stay: they are rebuilt by the job, not forgotten before it.
        task, status = self._process(
            identity, change, "reindex", wait, str(uri), internal=False, forget=False
        )
        return Reindexed(
            uri=str(uri),
            files=len(files),
            directories=len(dirs),
            mode=mode,
            task_id=task.task_id,
            status=status,
        )
