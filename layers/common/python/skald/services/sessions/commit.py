"""Commit phase 1: archive a session's pending messages and queue their memory extraction,
crash-safe.

One state-store transaction reserves the archive: it moves the session's watermark over the
pending messages, records the archive with an *outbox* (what phase 1 still owes) and creates
the commit's task. Everything after it is idempotent and re-drivable from stored records
alone: the archive files are rewritten from the stored messages, the memory job is enqueued
under the archive's dedup key, the session's `.meta.json` is rewritten, and sealing clears the
outbox. So a crash leaves either nothing (before the transaction) or an archive whose outbox
says what remains, which a retried commit of the session, recovery at startup or the sweeper
(recovery.py) finishes, or rolls back when it cannot be finished.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Protocol

from skald.catalog import JOB_MEMORY
from skald.domain.access.identity import Identity
from skald.domain.errors import FailedPrecondition, InvalidArgument, NotFound
from skald.domain.memory.archives import ArchiveStatus
from skald.domain.paths.tags import normalize_tags
from skald.domain.paths.uri import VikingURI
from skald.domain.timefmt import iso_utc
from skald.domain.wire import OMIT_NONE, WireUri
from skald.ports import (
    ArchiveRecord,
    JobQueue,
    SessionMessage,
    SessionRecord,
    SessionStore,
    StateConflict,
    StateNotFound,
    Task,
)
from skald.services.faults import Faults
from skald.services.fs.filesystem import VikingFS
from skald.services.ingest.processing import QUEUE_MEMORY, identity_payload
from skald.services.sessions.results import Message
from skald.services.tasks import TaskService

# Every point between two steps of phase 1, in order (the fault-injection tests walk them all).
COMMIT_CRASH_POINTS = (
    "commit.before_reserve",
    "commit.after_reserve",
    "commit.after_archive_dir",
    "commit.after_messages_file",
    "commit.after_archive_files",
    "commit.after_enqueue",
    "commit.after_session_meta",
    "commit.after_seal",
)


class CommitStatus(StrEnum):
    ACCEPTED = "accepted"  # archived; extraction runs as task `task_id`
    SKIPPED = "skipped"  # nothing to archive (`reason`)


@dataclass(frozen=True, slots=True)
class Committed:
    """A commit's answer. A skipped one carries `reason` and none of the archive's keys."""

    session_id: str
    status: CommitStatus
    task_id: str | None
    archived: bool
    archive_uri: Annotated[WireUri | None, OMIT_NONE] = None
    reason: Annotated[str | None, OMIT_NONE] = None
    effective_enable_working_memory: Annotated[bool | None, OMIT_NONE] = None
    trace_id: Annotated[str | None, OMIT_NONE] = None
    estimated_active_tokens: Annotated[int | None, OMIT_NONE] = None
    budget_exceeded: Annotated[bool | None, OMIT_NONE] = None


class Sessions(Protocol):
    """What the committer uses of the session service that owns it (sessions/service.py),
    named here so that the committer does not import its owner."""

    store: SessionStore
    fs: VikingFS
    tasks: TaskService
    queue: JobQueue
    clock: Callable[[], float]

    def get(
        self, identity: Identity, session_id: str, *, auto_create: bool = False
    ) -> SessionRecord: ...

    def archive_uri(self, identity: Identity, session_id: str, archive_id: str) -> VikingURI: ...

    def write_meta(self, identity: Identity, rec: SessionRecord) -> None: ...

    def message_view(self, m: SessionMessage) -> Message: ...


class SessionCommitter:
    def __init__(self, sessions: Sessions, *, faults: Faults | None = None) -> None:
        self.sessions = sessions
        self.store = sessions.store
        self.faults = faults or Faults()

    def commit(
        self,
        identity: Identity,
        session_id: str,
        *,
        keep_recent_count: int = 0,
        event_tags: list[str] | None = None,
        reset_context: bool = False,
    ) -> Committed:
        if not 0 <= keep_recent_count <= 10000:
            raise InvalidArgument("keep_recent_count must be between 0 and 10000")
        tags = normalize_tags(event_tags)
        self.sessions.get(identity, session_id)
        # A commit that crashed half-way owns the messages it reserved: finish it first, so
        # that this one never answers "no messages" while they are stuck in it.
        finished = self.finish_open(identity, session_id)
        task_id = str(uuid.uuid4())
        self.faults.hit("commit.before_reserve")
        a, u = identity.account_id, identity.user_id
        try:
            arch = self.store.reserve_archive(
                a,
                u,
                session_id,
                keep_recent=0 if reset_context else keep_recent_count,
                now=self.sessions.clock(),
                task_id=task_id,
                reset=reset_context,
                task=lambda archive: self._task(identity, archive, task_id),
                outbox={"role": identity.role, "event_tags": tags, "attempts": 0},
            )
        except StateConflict:
            rec = self.store.get_session(a, u, session_id)
            failed = rec.failed_archive if rec is not None else None
            raise FailedPrecondition(
                f"Session {session_id} has an unresolved failed archive ({failed}); resolve "
                f"it before committing again",
                {"failed_archive": failed},
            ) from None
        except StateNotFound:
            raise NotFound(f"Session {session_id} not found", session_id, "session") from None
        if arch is None:
            if finished:  # this request's messages went into the commit it just finished
                return self._accepted(identity, finished[-1])
            return Committed(session_id, CommitStatus.SKIPPED, None, False, reason="no_messages")
        self.faults.hit("commit.after_reserve")
        self.finish(identity, arch)
        return self._accepted(identity, arch)

    def _task(self, identity: Identity, arch: ArchiveRecord, task_id: str) -> Task:
        uri = self.sessions.archive_uri(identity, arch.session_id, arch.archive_id)
        return self.sessions.tasks.new(
            identity,
            "session_commit",
            resource_id=str(uri),
            meta={"session_id": arch.session_id, "archive_id": arch.archive_id},
            task_id=task_id,
        )

    def _accepted(self, identity: Identity, arch: ArchiveRecord) -> Committed:
        after = self.sessions.get(identity, arch.session_id)
        uri = self.sessions.archive_uri(identity, arch.session_id, arch.archive_id)
        return Committed(
            arch.session_id,
            CommitStatus.ACCEPTED,
            arch.task_id,
            True,
            archive_uri=str(uri),
            effective_enable_working_memory=False,
            trace_id=arch.task_id,
            estimated_active_tokens=after.live_tokens,
            budget_exceeded=False,
        )

    # ---------------------------------------------------------------- the re-drivable rest

    def finish_open(self, identity: Identity, session_id: str) -> list[ArchiveRecord]:
        """Finishes the session's unsealed commits; returns them."""
        found = self.store.open_commits(identity.account_id, identity.user_id, session_id)
        for arch in found:
            self.finish(identity, arch)
        return found

    def finish(self, identity: Identity, arch: ArchiveRecord) -> None:
        """Phase 1 after the reservation. Idempotent: safe to run again after a crash at any
        point of it, or twice at once."""
        self.write_archive_files(identity, arch)
        self.faults.hit("commit.after_archive_files")
        uri = self.sessions.archive_uri(identity, arch.session_id, arch.archive_id)
        if arch.task_id is not None and arch.status == ArchiveStatus.RESET:
            self.sessions.tasks.complete(
                arch.task_id, {"context_reset": True, "archive_uri": str(uri)}
            )
        elif arch.status == ArchiveStatus.PENDING:  # done / failed: phase 2 ran already
            self.sessions.queue.enqueue(
                QUEUE_MEMORY,
                JOB_MEMORY,
                self.job_payload(identity, arch),
                dedup_key=memory_dedup_key(arch),
            )
        self.faults.hit("commit.after_enqueue")
        rec = self.store.get_session(identity.account_id, identity.user_id, arch.session_id)
        if rec is not None:
            self.sessions.write_meta(identity, rec)
        self.faults.hit("commit.after_session_meta")
        with suppress(StateNotFound):  # the session was deleted meanwhile: nothing to seal
            self.store.update_archive(
                identity.account_id, identity.user_id, arch.session_id, arch.number, outbox=None
            )
        self.faults.hit("commit.after_seal")

    @staticmethod
    def job_payload(identity: Identity, arch: ArchiveRecord) -> dict[str, Any]:
        tags = (arch.outbox or {}).get("event_tags") or []
        return {
            "task_id": arch.task_id,
            **identity_payload(identity),
            "session_id": arch.session_id,
            "archive": arch.number,
            "event_tags": tags,
        }

    def write_archive_files(self, identity: Identity, arch: ArchiveRecord) -> None:
        """messages.jsonl and .meta.json of an archive, from the stored messages."""
        sessions, fs = self.sessions, self.sessions.fs
        base = sessions.archive_uri(identity, arch.session_id, arch.archive_id)
        msgs = self.store.list_messages(
            identity.account_id,
            identity.user_id,
            arch.session_id,
            after_seq=arch.start_seq - 1,
            upto_seq=arch.end_seq,
        )
        # mkdir would overwrite the L0 that phase 2 writes: only when the directory is new
        if not fs.is_dir(identity, base):
            fs.mkdir(identity, base, f"Archive {arch.archive_id} of session {arch.session_id}.")
        self.faults.hit("commit.after_archive_dir")
        lines = "".join(
            json.dumps(sessions.message_view(m).as_dict(), ensure_ascii=False) + "\n" for m in msgs
        )
        meta = {
            "archive_id": arch.archive_id,
            "session_id": arch.session_id,
            "created_at": iso_utc(arch.created_at),
            "message_count": len(msgs),
            "start_message_id": msgs[0].message_id if msgs else None,
            "end_message_id": msgs[-1].message_id if msgs else None,
            "context_reset": arch.status == ArchiveStatus.RESET,
        }
        blobs, account = fs.blobs, identity.account_id
        blobs.put(base.child("messages.jsonl").blob_key(account), lines.encode())
        self.faults.hit("commit.after_messages_file")
        blobs.put(base.child(".meta.json").blob_key(account), json.dumps(meta, indent=2).encode())
        if arch.status == ArchiveStatus.RESET:
            done = {
                "context_reset": True,
                "archive_id": arch.archive_id,
                "covered_message_ids": [m.message_id for m in msgs],
            }
            blobs.put(base.child(".done").blob_key(account), json.dumps(done, indent=2).encode())

    # ---------------------------------------------------------------- giving up

    def roll_back(self, identity: Identity, arch: ArchiveRecord, error: str) -> str:
        """For a commit that cannot be finished: its messages go back to pending and its files
        go ("rolled_back"), or, when a later archive took messages after it, the archive is
        marked failed ("failed": further commits are refused until it is resolved). Its task
        fails either way, first, so that no crash on the way leaves it pending."""
        a, u, sid = identity.account_id, identity.user_id, arch.session_id
        if arch.task_id is not None:
            self.sessions.tasks.abandon(arch.task_id, f"commit rolled back: {error}")
        if self.store.rollback_commit(a, u, sid, arch.number):
            # A crash before this leaves the directory of an archive that no longer exists;
            # its number is never reused, so nothing else is written there.
            prefix = self.sessions.archive_uri(identity, sid, arch.archive_id).blob_key(a)
            blobs = self.sessions.fs.blobs
            for blob in list(blobs.iter_all(prefix + "/")):
                blobs.delete(blob.key)
            rec = self.store.get_session(a, u, sid)
            if rec is not None:
                self.sessions.write_meta(identity, rec)
            return "rolled_back"
        now = self.store.get_archive(a, u, sid, arch.number)
        if now is None or now.outbox is None:
            return "finished"  # finished (or deleted) by someone else meanwhile
        self.store.update_archive(
            a, u, sid, arch.number, status=ArchiveStatus.FAILED, error=error, outbox=None
        )
        return "failed"


def memory_dedup_key(arch: ArchiveRecord) -> str:
    return f"{arch.account_id}/{arch.user_id}/{arch.session_id}/{arch.archive_id}"
