"""Ports of the session store: sessions, their messages and archives (re-exported by
skald.ports)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from skald.domain.memory.archives import ArchiveStatus

if TYPE_CHECKING:
    from skald.ports.state import Task

# Sessions: one row per session, append-only ordered messages, and archives. Archives take a
# contiguous range of message sequence numbers, so committing is a single conditional update
# of the session's watermark (`archived_seq`) plus one archive row: messages are never
# rewritten, and a message appended during a commit is simply above the watermark.


@dataclass
class SessionRecord:
    account_id: str
    user_id: str
    session_id: str
    created_at: float
    updated_at: float
    last_activity: float
    last_seq: int = 0  # sequence number of the newest message (1-based; 0 = none)
    archived_seq: int = 0  # every message with seq <= archived_seq belongs to an archive
    next_archive: int = 1
    commit_count: int = 0
    live_tokens: int = 0  # estimated tokens of the live messages (seq > archived_seq)
    memories_extracted: int = 0
    failed_archive: str | None = None  # an unresolved failed archive blocks further commits
    memory_policy: dict[str, Any] = field(default_factory=dict)
    auto_commit_policy: dict[str, Any] | None = None
    extraction_config: dict[str, Any] = field(default_factory=dict)
    idle_deadline: float | None = None  # when the idle auto-commit is due
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def live_count(self) -> int:
        return self.last_seq - self.archived_seq


@dataclass
class SessionMessage:
    seq: int  # assigned by the store on append
    message_id: str
    role: str
    parts: list[dict[str, Any]]
    created_at: str  # ISO-8601 as sent or stamped
    tokens: int
    peer_id: str | None = None
    turn_id: str | None = None
    message_kind: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ArchiveRecord:
    account_id: str
    user_id: str
    session_id: str
    number: int  # archive_NNN
    start_seq: int  # first message seq, inclusive
    end_seq: int  # last message seq, inclusive
    created_at: float
    status: ArchiveStatus = ArchiveStatus.PENDING
    task_id: str | None = None
    error: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    # What phase 1 of the commit still owes (archive files, memory job, session meta): set by
    # the reservation, None once sealed. Holds what re-driving it needs (the committer's role,
    # the event tags) and the failed attempts at doing so.
    outbox: dict[str, Any] | None = None

    @property
    def archive_id(self) -> str:
        return f"archive_{self.number:03d}"


@runtime_checkable
class SessionStore(Protocol):
    def create_session(self, record: SessionRecord) -> None:
        """Raises StateConflict when the session exists."""
        ...

    def get_session(
        self, account_id: str, user_id: str, session_id: str
    ) -> SessionRecord | None: ...

    def list_sessions(self, account_id: str, user_id: str) -> list[SessionRecord]: ...

    def delete_session(self, account_id: str, user_id: str, session_id: str) -> bool:
        """Deletes the session, its messages and its archive rows."""
        ...

    def update_session(
        self, account_id: str, user_id: str, session_id: str, **changes: Any
    ) -> SessionRecord:
        """Sets the given fields (and updated_at); raises StateNotFound."""
        ...

    def append_messages(
        self,
        account_id: str,
        user_id: str,
        session_id: str,
        messages: Sequence[SessionMessage],
        *,
        now: float,
        idle_deadline: float | None,
    ) -> SessionRecord:
        """Assigns consecutive seqs after last_seq (mutating `messages`), adds their tokens to
        live_tokens, sets last_activity and idle_deadline, atomically. Raises StateNotFound."""
        ...

    def list_messages(
        self,
        account_id: str,
        user_id: str,
        session_id: str,
        *,
        after_seq: int = 0,
        upto_seq: int | None = None,
    ) -> list[SessionMessage]:
        """Messages with after_seq < seq <= upto_seq, in order."""
        ...

    def reserve_archive(
        self,
        account_id: str,
        user_id: str,
        session_id: str,
        *,
        keep_recent: int,
        now: float,
        task_id: str | None,
        reset: bool = False,
        task: Callable[[ArchiveRecord], Task] | None = None,
        outbox: Mapping[str, Any] | None = None,
    ) -> ArchiveRecord | None:
        """Atomically moves the watermark over every live message but the newest
        `keep_recent` and records archive number `next_archive` for that range, with `outbox`;
        `task(archive)` (a pure function: it may be called once per attempt) gives a task
        created in the same transaction. None when no message would be archived (and not
        `reset`). Raises StateConflict when an unresolved failed archive exists or the task
        id is taken (nothing is written), StateNotFound when the session does not exist."""
        ...

    def open_commits(self, account_id: str, user_id: str, session_id: str) -> list[ArchiveRecord]:
        """The session's archives whose outbox is set (phase 1 unfinished), in number order."""
        ...

    def stale_commits(self, before: float | None, limit: int = 100) -> list[ArchiveRecord]:
        """Archives of every account whose outbox is set, created at or before `before` (any
        time when None), oldest first. May lag behind a moment on an eventually consistent
        backend: re-read an archive before acting on it."""
        ...

    def rollback_commit(self, account_id: str, user_id: str, session_id: str, number: int) -> bool:
        """Undoes an unfinished reservation: the archive goes and the watermark moves back
        over its messages (live again, tokens counted again; the number is not reused), in
        one transaction. False, changing nothing, when the archive is sealed or a later
        archive took messages after it. Raises StateNotFound."""
        ...

    def get_archive(
        self, account_id: str, user_id: str, session_id: str, number: int
    ) -> ArchiveRecord | None: ...

    def list_archives(
        self, account_id: str, user_id: str, session_id: str
    ) -> list[ArchiveRecord]: ...

    def update_archive(
        self, account_id: str, user_id: str, session_id: str, number: int, **changes: Any
    ) -> ArchiveRecord:
        """Sets status / error / meta / task_id / outbox (None seals the commit). Setting
        status FAILED also records it as the session's failed_archive; DONE clears it
        when it was that archive."""
        ...

    def delete_account_sessions(self, account_id: str) -> int:
        """Removes every session (messages, archives) of an account; returns how many."""
        ...

    def count_sessions(self, account_id: str) -> int:
        """How many sessions the account keeps, every user's (a quota's current use; a session
        being deleted at that moment may still count)."""
        ...

    def due_idle_sessions(self, now: float, limit: int = 100) -> list[tuple[str, str, str]]:
        """(account, user, session) whose idle_deadline has passed and that have live
        messages."""
        ...
