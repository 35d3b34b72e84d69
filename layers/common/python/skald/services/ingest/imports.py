"""Archive imports: a zipped directory too large to write inside a request is written by the
fetch worker, as a URL import is.

The request does everything that can refuse the add (the archive read and every member
inflated once under the limits, every entry found storable, the root reserved as an inline add
reserves it), creates the task and queues an import job, and answers at once with the task.
The upload stays where `temp_upload` put it (the blob store: S3 on AWS) until the import ends.

The worker writes the members in the archive's order, a chunk of CHUNK at a time, and after
each chunk records in the task's meta how many are written (`meta.import.done`): the
checkpoint. A job that crashes or is cut off resumes at the checkpoint (the chunk it was
writing is written again with the same bytes: harmless); a job short of time stops between
two chunks and queues its continuation. Once every member is written, the files' semantic
processing is queued under the same task (one job, as the inline add queues), which that
processing completes: `wait=true` waits for it.

SQS delivers a message at least once: two deliveries of one job running at the same time
write the same bytes, and may both queue the files' processing, which is harmless (index
records have stable ids) if wasteful.

A failed import (a member that cannot be stored, the upload gone, out of attempts) ends the
task failed with the reason and removes what the request reserved: the root it made and the
files below it. A root that existed before (`to` an existing directory) is kept, with the
files written so far; the task's error says how many.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from skald import catalog
from skald.domain.access.identity import Identity
from skald.domain.access.visibility import check_access
from skald.domain.errors import NotFound, SkaldError
from skald.domain.paths.names import attrs_bytes
from skald.domain.paths.tags import apply_tag_mode
from skald.domain.paths.uri import VikingURI, from_canonical
from skald.ports import JobQueue, TaskStatus
from skald.services.faults import Faults
from skald.services.fs.entries import FsChange
from skald.services.fs.filesystem import VikingFS
from skald.services.fs.write_batch import held_writes
from skald.services.ingest.archives import Member
from skald.services.ingest.processing import (
    ProcessingScheduler,
    identity_from_payload,
    identity_payload,
)
from skald.services.ingest.resources import AddResourceRequest, OpenedUpload, ResourceService
from skald.services.tasks import FINAL, TaskService

log = logging.getLogger("skald.imports")

# Members written between two checkpoints: a crash rewrites at most this many, a checkpoint
# costs one task update (40 for the largest archive the limits allow).
CHUNK = 250
CHUNK_BYTES = 16 << 20  # ... or fewer, when they are this large (as the archive declares:
#                          the request inflated each once, so their sizes are checked)
# Time kept in hand before another chunk (beyond twice the slowest chunk so far): queueing
# the continuation and updating the task.
RESERVE_S = 5.0


@dataclass(frozen=True)
class InlineLimits:
    """Above either, an archive is imported by the worker instead of inside the request."""

    max_entries: int
    max_bytes: int


# By backend, so that an inline add answers within a few seconds. AWS: each file written
# inline costs two lookups and a PUT on S3 (and API Gateway gives up at 29 s). `skald serve`:
# a local directory still costs a few milliseconds a file (more on a busy machine).
INLINE_LIMITS = {
    "aws": InlineLimits(max_entries=200, max_bytes=16 << 20),
    "local": InlineLimits(max_entries=500, max_bytes=64 << 20),
}


@dataclass
class ImportJob:
    """The payload of an import job (and of its continuations)."""

    task_id: str
    temp_file_id: str
    root: str  # the reserved root URI
    created: list[str] = field(default_factory=list)  # dirs the request made (undone on failure)
    include: str | None = None
    exclude: str | None = None
    ignore_dirs: str | None = None
    tags: list[str] | None = None
    tag_mode: str = "replace"
    processing_mode: str = "semantic_and_vectors"

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> ImportJob:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in payload.items() if k in names})

    @property
    def request(self) -> AddResourceRequest:
        return AddResourceRequest(
            ignore_dirs=self.ignore_dirs, include=self.include, exclude=self.exclude
        )


class ArchiveImports:
    def __init__(
        self,
        fs: VikingFS,
        resources: ResourceService,
        tasks: TaskService,
        queue: JobQueue,
        scheduler: ProcessingScheduler,
        *,
        inline: InlineLimits,
        faults: Faults | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.fs = fs
        self.resources = resources
        self.tasks = tasks
        self.queue = queue
        self.scheduler = scheduler
        self.inline = inline
        self.faults = faults or Faults()
        self.monotonic = monotonic

    def takes(self, opened: OpenedUpload) -> bool:
        """Whether this upload is imported by the worker: a zipped directory above a limit."""
        return opened.members is not None and (
            opened.entries > self.inline.max_entries or opened.size > self.inline.max_bytes
        )

    # ---------------------------------------------------------------- the request

    def submit(
        self,
        identity: Identity,
        req: AddResourceRequest,
        opened: OpenedUpload,
        *,
        processing_mode: str,
    ) -> tuple[str, VikingURI]:
        """Checks the archive, reserves the root and queues the import: (task id, root). The
        same upload submitted again (a retry of a request cut short) answers the task it got
        the first time."""
        earlier = self._earlier_task(identity, opened)
        if earlier is not None:
            return earlier
        if req.tags is not None or req.tag_mode == "clear":
            apply_tag_mode([], req.tags, req.tag_mode)  # bad tags: refused before the root
        root, change = self.resources.claim_for_import(identity, req, opened)
        assert opened.members is not None
        task = self.tasks.create(
            identity,
            "add_resource",
            resource_id=str(root),
            meta={
                "source": opened.source,
                "processing_mode": processing_mode,
                "import": {"entries": len(opened.members), "done": 0},
            },
        )
        job = ImportJob(
            task.task_id,
            opened.temp_file_id,
            str(root),
            created=list(change.dirs),
            include=req.include,
            exclude=req.exclude,
            ignore_dirs=req.ignore_dirs,
            tags=req.tags,
            tag_mode=req.tag_mode,
            processing_mode=processing_mode,
        )
        self.resources.note_upload(identity, opened, import_job=asdict(job))
        try:
            self._enqueue(identity, job)
        except Exception:  # the upload stays: the add may be retried with it
            self._undo(identity, job)
            self.tasks.abandon(task.task_id, "The import could not be queued")
            raise
        return task.task_id, root

    def _earlier_task(
        self, identity: Identity, opened: OpenedUpload
    ) -> tuple[str, VikingURI] | None:
        """The import an earlier request of this upload queued; its job queued again when
        it has not started (that request may have ended before queueing it)."""
        raw = opened.meta.get("import_job")
        if not isinstance(raw, dict):
            return None
        job = ImportJob.from_payload(raw)
        task = self.tasks.store.get_task(job.task_id)
        if task is None or task.status in FINAL:
            return None
        if task.status == TaskStatus.PENDING:
            self._enqueue(identity, job)
        return job.task_id, from_canonical(job.root)

    def _enqueue(self, identity: Identity, job: ImportJob) -> None:
        self.queue.enqueue(
            catalog.QUEUE_FETCH, catalog.JOB_IMPORT, {**asdict(job), **identity_payload(identity)}
        )

    # ---------------------------------------------------------------- the worker

    def run(self, payload: dict[str, Any], deadline: float | None) -> None:
        """Writes the members from the checkpoint on; short of time, queues the rest."""
        job = ImportJob.from_payload(payload)
        identity = identity_from_payload(payload)
        task = self.tasks.store.get_task(job.task_id)
        if task is None:
            return  # its owner is gone
        meta = dict(task.meta)
        progress = dict(meta.get("import") or {})
        if progress.get("queued") or progress.get("ended"):
            return  # its processing is queued (and ends the task), or it was undone
        if task.status in FINAL or not self.tasks.start(job.task_id, "importing"):
            self._cancelled(identity, job, meta, progress)  # failed ones are undone already
            return
        done = int(progress.get("done", 0))
        try:
            data = self.resources.read_upload(identity, job.temp_file_id)
        except NotFound:
            self._fail(identity, job, done, "the uploaded archive is gone")
            return
        try:
            members = self.resources.archives.members(data, job.request.archive_options)
            root = from_canonical(job.root)
            progress.update(entries=len(members), runs=int(progress.get("runs", 0)) + 1)
            progress["resumed_from"] = done
            slowest, first = 0.0, True
            while done < len(members):
                now = self.monotonic()
                if _short_of_time(now, deadline, slowest) and not first:
                    self._enqueue(identity, job)
                    log.info("import %s continues in a new job at %d", job.task_id, done)
                    return
                chunk = _chunk(members, done)
                self._write(identity, job, root, self.resources.archives.read(data, chunk))
                self.faults.hit("import.after_chunk")
                done += len(chunk)
                progress["done"] = done
                meta["import"] = progress
                updated = self.tasks.store.update_task(
                    job.task_id, stage=f"importing {done}/{len(members)}", meta=meta
                )
                self.faults.hit("import.after_checkpoint")
                if updated.status in {TaskStatus.CANCELLING, TaskStatus.CANCELLED}:
                    self._cancelled(identity, job, meta, progress)
                    return
                slowest, first = max(slowest, self.monotonic() - now), False
        except SkaldError as exc:  # the same member fails the same way again: no retry
            self._fail(identity, job, done, exc.message)
            return
        self._queue_processing(identity, job, root, members, meta, progress)

    def _write(
        self,
        identity: Identity,
        job: ImportJob,
        root: VikingURI,
        files: list[tuple[str, bytes]],
    ) -> None:
        fresh = job.root in job.created  # the import made its root: nothing else was there
        tagged = job.tags is not None or job.tag_mode == "clear"
        with held_writes(self.fs.blobs) as held:  # written in groups, durable at the end
            for rel, content in files:
                uri = root.child(rel)
                if not fresh:  # an existing directory: every file looked up as a write does
                    self.fs.write(
                        identity,
                        uri,
                        content,
                        "replace",
                        tags=job.tags,
                        tag_mode=job.tag_mode,
                        held=held,
                    )
                    continue
                # A new file of the import's own root (or its own, written again on resume):
                # no lookup of what is there, a round trip or two per file on S3.
                check_access(identity, uri, write=True)
                self.fs.check_writable_name(uri)
                self.fs.make_parents(identity, uri, held)
                blobs = [(self.fs.key(identity, uri), content)]
                if tagged:
                    attrs = {
                        "created_at": self.fs.clock(),
                        "tags": apply_tag_mode([], job.tags, job.tag_mode),
                    }
                    blobs.append((self.fs.attrs_key(identity, uri, False), attrs_bytes(attrs)))
                held.add(blobs)

    def _queue_processing(
        self,
        identity: Identity,
        job: ImportJob,
        root: VikingURI,
        members: list[Member],
        meta: dict[str, Any],
        progress: dict[str, Any],
    ) -> None:
        """One semantic job for every file, under the import's task, as the inline add
        queues it. Its list is the archive's, so a resumed import names every file once."""
        dirs = dict.fromkeys(job.created)
        for m in members:
            parts = m.rel.split("/")[:-1]
            for depth in range(len(parts)):
                dirs.setdefault(str(root.child("/".join(parts[: depth + 1]))), None)
        change = FsChange(
            identity.account_id,
            identity.user_id,
            written=[str(root.child(m.rel)) for m in members],
            dirs=list(dirs),
            processing_mode=job.processing_mode,
        )
        self.faults.hit("import.before_processing")
        self.scheduler.follow(identity, job.task_id, change)
        progress["queued"] = True
        meta["import"] = progress
        self.tasks.store.update_task(job.task_id, meta=meta)
        self.resources.discard_upload(identity, job.temp_file_id)

    def _cancelled(
        self, identity: Identity, job: ImportJob, meta: dict[str, Any], progress: dict[str, Any]
    ) -> None:
        """Undoes a cancelled import once (noted in the task: a later delivery must not
        remove a root that a new add may have reserved since)."""
        task = self.tasks.store.get_task(job.task_id)
        if task is None or task.status not in {TaskStatus.CANCELLING, TaskStatus.CANCELLED}:
            return
        self._end(identity, job)
        meta["import"] = {**progress, "ended": True}
        self.tasks.store.update_task(
            job.task_id, status=TaskStatus.CANCELLED, stage="cancelled", meta=meta
        )

    def on_dead(self, payload: dict[str, Any], error: str) -> None:
        job = ImportJob.from_payload(payload)
        identity = identity_from_payload(payload)
        task = self.tasks.store.get_task(job.task_id)
        done = int(((task.meta if task else {}).get("import") or {}).get("done", 0))
        self._fail(identity, job, done, error)

    def _fail(self, identity: Identity, job: ImportJob, done: int, reason: str) -> None:
        kept = self._end(identity, job)
        note = f" ({done} file(s) were written below the existing {job.root})" if kept else ""
        self.tasks.abandon(job.task_id, f"The import failed: {reason}{note}")

    def _end(self, identity: Identity, job: ImportJob) -> bool:
        """Removes what the import reserved and its upload; True when the root existed
        before the import (it is kept)."""
        self._undo(identity, job)
        try:
            self.resources.discard_upload(identity, job.temp_file_id)
        except Exception:
            log.warning("could not discard the upload of import %s", job.task_id)
        return job.root not in job.created

    def _undo(self, identity: Identity, job: ImportJob) -> None:
        """Removes the directories the request made (deepest first): the root with every
        file written below it."""
        for uri_text in sorted(set(job.created), key=len, reverse=True):
            uri = from_canonical(uri_text)
            try:
                if self.fs.is_dir(identity, uri):
                    self.fs.rm(identity, uri, True)
            except SkaldError:
                log.warning("could not remove %s after a failed import", uri_text)


def _chunk(members: list[Member], start: int) -> list[Member]:
    """The members written together from `start`: CHUNK, or fewer when they hold
    CHUNK_BYTES (at least one). The same every time: the checkpoint is a position."""
    size, end = 0, start
    while end < len(members) and end - start < CHUNK and (end == start or size < CHUNK_BYTES):
        size += members[end].size
        end += 1
    return members[start:end]


def _short_of_time(now: float, deadline: float | None, slowest_chunk_s: float) -> bool:
    """Another chunk might not end in time: twice the slowest so far, and the reserve."""
    return deadline is not None and deadline - now < RESERVE_S + 2 * slowest_chunk_s
