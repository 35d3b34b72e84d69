"""Sessions: messages in, context out; commits go through commit.py (phase 1).

The state store owns sessions and messages (transactional); the tree holds the session
directory, its `.meta.json` and the archives `history/archive_NNN/` written at commit.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from skald.catalog import JOB_AUTO_COMMIT as JOB_AUTO_COMMIT
from skald.catalog import JOB_MEMORY as JOB_MEMORY
from skald.domain.access.identity import Identity
from skald.domain.errors import AlreadyExists, InvalidArgument, NotFound, PayloadTooLarge
from skald.domain.memory.archives import ArchiveStatus
from skald.domain.memory.parts import MESSAGE_KINDS, normalize_parts, parts_text, parts_tokens
from skald.domain.ops.usage import total as usage_total
from skald.domain.paths.tags import normalize_tags
from skald.domain.paths.uri import VikingURI, parse_uri, validate_identifier
from skald.domain.text.outline import split_frontmatter
from skald.domain.text.tokens import estimate_tokens
from skald.domain.timefmt import iso_utc
from skald.ports import (
    JobQueue,
    Scheduler,
    SessionMessage,
    SessionRecord,
    SessionStore,
    StateConflict,
    StateNotFound,
)
from skald.services.audit import AuditTrail, audited
from skald.services.faults import Faults
from skald.services.fs.filesystem import VikingFS
from skald.services.ingest.processing import QUEUE_AUTOCOMMIT, identity_payload
from skald.services.plans.quotas import Quotas
from skald.services.sessions.commit import Committed, SessionCommitter
from skald.services.sessions.results import (
    Archive,
    ArchiveAbstract,
    ContextStats,
    MemoriesExtracted,
    Message,
    MessageAdded,
    MessagesAdded,
    SessionContext,
    SessionCreated,
    SessionItem,
    SessionUser,
    SessionView,
    TokenUsage,
)
from skald.services.tasks import TaskService

MAX_BATCH = 100
POLICY_KEYS = ("pending_tokens", "pending_messages", "idle_seconds")


@dataclass
class NewMessage:
    role: str
    content: str | None = None
    parts: list[Any] | None = None
    peer_id: str | None = None
    created_at: str | None = None
    turn_id: str | None = None
    message_kind: str | None = None
    source_message_ids: list[str] | None = None


def new_session_id(now: float) -> str:
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{secrets.token_hex(8)}"


def check_policy(policy: dict[str, Any] | None) -> dict[str, Any] | None:
    if policy is None:
        return None
    out: dict[str, Any] = {}
    for key, value in policy.items():
        if key not in POLICY_KEYS:
            raise InvalidArgument(
                f"Unknown auto_commit_policy field '{key}': {', '.join(POLICY_KEYS)}"
            )
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise InvalidArgument(f"auto_commit_policy.{key} must be a positive number")
        out[key] = value
    return out or None


def check_memory_policy(policy: dict[str, Any] | None) -> dict[str, Any]:
    out = {"self": {"enabled": True}, "peer": {"enabled": False}}
    for key, value in (policy or {}).items():
        if key not in out:
            raise InvalidArgument(f"Unknown memory_policy field '{key}': self or peer")
        if isinstance(value, bool):
            value = {"enabled": value}
        if not isinstance(value, dict) or not isinstance(value.get("enabled", True), bool):
            raise InvalidArgument(f"memory_policy.{key} must be {{enabled: bool}}")
        out[key] = {"enabled": value.get("enabled", True)}
    return out


def check_extraction_config(config: dict[str, Any] | None) -> dict[str, Any]:
    tags: list[str] = []
    for key, value in (config or {}).items():
        if key != "events":
            raise InvalidArgument(f"Unknown memory_extraction_config field '{key}'")
        if not isinstance(value, dict) or set(value) - {"tags"}:
            raise InvalidArgument("memory_extraction_config.events must be {tags: [...]}")
        tags = normalize_tags(value.get("tags"))
    return {"events": {"tags": tags}}


class SessionService:
    def __init__(
        self,
        store: SessionStore,
        fs: VikingFS,
        tasks: TaskService,
        queue: JobQueue,
        *,
        max_message_bytes: int,
        clock: Callable[[], float] = time.time,
        on_removed: Callable[[Identity, list[str]], None] | None = None,
        scheduler: Scheduler | None = None,
        faults: Faults | None = None,
        audit: AuditTrail | None = None,
        quotas: Quotas | None = None,
    ) -> None:
        self.audit, self.quotas = audit, quotas
        self.on_removed = on_removed
        self.scheduler = scheduler
        self.store = store
        self.fs = fs
        self.tasks = tasks
        self.queue = queue
        self.max_message_bytes = max_message_bytes
        self.clock = clock
        self.committer = SessionCommitter(self, faults=faults)

    # ---------------------------------------------------------------- addressing

    @staticmethod
    def session_uri(identity: Identity, session_id: str) -> VikingURI:
        return VikingURI("user", (identity.user_id, "sessions", session_id))

    def archive_uri(self, identity: Identity, session_id: str, archive_id: str) -> VikingURI:
        return self.session_uri(identity, session_id).child("history", archive_id)

    @staticmethod
    def _check_id(session_id: str) -> str:
        try:
            return validate_identifier(session_id, "session id")
        except InvalidArgument as exc:
            raise InvalidArgument(exc.message, {"session_id": session_id}) from None

    def _get(self, identity: Identity, session_id: str) -> SessionRecord:
        self._check_id(session_id)
        rec = self.store.get_session(identity.account_id, identity.user_id, session_id)
        if rec is None:
            raise NotFound(f"Session {session_id} not found", session_id, "session")
        return rec

    # ---------------------------------------------------------------- lifecycle

    def create(
        self,
        identity: Identity,
        session_id: str | None = None,
        *,
        memory_policy: dict[str, Any] | None = None,
        auto_commit_policy: dict[str, Any] | None = None,
        extraction_config: dict[str, Any] | None = None,
    ) -> SessionRecord:
        now = self.clock()
        sid = self._check_id(session_id) if session_id else new_session_id(now)
        rec = SessionRecord(
            identity.account_id,
            identity.user_id,
            sid,
            now,
            now,
            now,
            memory_policy=check_memory_policy(memory_policy),
            auto_commit_policy=check_policy(auto_commit_policy),
            extraction_config=check_extraction_config(extraction_config),
        )
        if self.quotas is not None:  # the plan's `sessions`, before anything is written
            self.quotas.check_sessions(identity.account_id)
        try:
            self.store.create_session(rec)
        except StateConflict:
            raise AlreadyExists(f"Session {sid} already exists", {"session_id": sid}) from None
        if self.quotas is not None:
            self.quotas.sessions_changed(identity.account_id, 1)
        uri = self.session_uri(identity, sid)
        self.fs.mkdir(identity, uri, f"Conversation session {sid}.")
        self.write_meta(identity, rec)
        return rec

    def write_meta(self, identity: Identity, rec: SessionRecord) -> None:
        meta = {
            "session_id": rec.session_id,
            "created_at": iso_utc(rec.created_at),
            "updated_at": iso_utc(rec.updated_at),
            "commit_count": rec.commit_count,
            "total_message_count": rec.last_seq,
            "memory_policy": rec.memory_policy,
            "auto_commit_policy": rec.auto_commit_policy,
            "memory_extraction_config": rec.extraction_config,
        }
        key = (
            self.session_uri(identity, rec.session_id)
            .child(".meta.json")
            .blob_key(identity.account_id)
        )
        self.fs.blobs.put(key, json.dumps(meta, indent=2).encode())

    def get(
        self, identity: Identity, session_id: str, *, auto_create: bool = False
    ) -> SessionRecord:
        try:
            return self._get(identity, session_id)
        except NotFound:
            if not auto_create:
                raise
        try:
            return self.create(identity, session_id)
        except AlreadyExists:  # created concurrently
            return self._get(identity, session_id)

    def list_sessions(self, identity: Identity) -> list[SessionRecord]:
        return self.store.list_sessions(identity.account_id, identity.user_id)

    def listing(self, identity: Identity) -> list[SessionItem]:
        """The caller's sessions as directory entries (the list route)."""
        return [
            SessionItem(
                r.session_id,
                str(self.session_uri(identity, r.session_id)),
                True,
                iso_utc(r.updated_at),
            )
            for r in self.list_sessions(identity)
        ]

    def created(self, identity: Identity, rec: SessionRecord) -> SessionCreated:
        """What the create route answers of a new session."""
        return SessionCreated(
            rec.session_id,
            str(self.session_uri(identity, rec.session_id)),
            SessionUser(rec.account_id, rec.user_id),
            rec.auto_commit_policy,
            rec.extraction_config,
            rec.memory_policy,
        )

    def delete(self, identity: Identity, session_id: str) -> list[str]:
        """Returns the URIs removed from the tree (for index cleanup). Recorded in the audit
        trail."""
        self._check_id(session_id)  # a malformed id is a bad request, not an attempt
        with audited(
            self.audit, identity, "session.delete", str(self.session_uri(identity, session_id))
        ):
            return self._delete(identity, session_id)

    def _delete(self, identity: Identity, session_id: str) -> list[str]:
        self._get(identity, session_id)
        # A half-done commit goes with the session: its task must not wait for it forever.
        for arch in self.store.open_commits(identity.account_id, identity.user_id, session_id):
            if arch.task_id is not None:
                self.tasks.abandon(arch.task_id, "the session was deleted")
        gone = self.store.delete_session(identity.account_id, identity.user_id, session_id)
        if gone and self.quotas is not None:
            self.quotas.sessions_changed(identity.account_id, -1)
        uri = self.session_uri(identity, session_id)
        if self.fs.is_dir(identity, uri):
            self.fs.rm(identity, uri, True)
        if self.on_removed is not None:
            self.on_removed(identity, [str(uri)])
        return [str(uri)]

    def update_config(
        self, identity: Identity, session_id: str, fields: dict[str, Any]
    ) -> SessionRecord:
        self._get(identity, session_id)
        changes: dict[str, Any] = {}
        if "auto_commit_policy" in fields:
            changes["auto_commit_policy"] = check_policy(fields["auto_commit_policy"])
            if changes["auto_commit_policy"] is None:
                changes["idle_deadline"] = None
        if "memory_extraction_config" in fields:
            changes["extraction_config"] = check_extraction_config(
                fields["memory_extraction_config"]
            )
        if "memory_policy" in fields:
            changes["memory_policy"] = check_memory_policy(fields["memory_policy"])
        rec = self.store.update_session(
            identity.account_id, identity.user_id, session_id, **changes
        )
        self.write_meta(identity, rec)
        return rec

    # ---------------------------------------------------------------- messages

    def _message(self, identity: Identity, msg: NewMessage) -> SessionMessage:
        if not isinstance(msg.role, str) or not msg.role.strip() or len(msg.role) > 64:
            raise InvalidArgument("role must be a non-empty string of at most 64 characters")
        if msg.message_kind is not None and msg.message_kind not in MESSAGE_KINDS:
            raise InvalidArgument(f"message_kind must be one of {', '.join(MESSAGE_KINDS)}")
        peer = validate_identifier(msg.peer_id, "peer_id") if msg.peer_id else None

        def resolve(raw: str) -> str:
            return str(parse_uri(raw, user_id=identity.user_id, privileged=identity.privileged))

        parts = normalize_parts(msg.content, msg.parts, resolve)
        size = len(json.dumps(parts, ensure_ascii=False).encode())
        if size > self.max_message_bytes:
            raise PayloadTooLarge("Message", size, self.max_message_bytes)
        created = msg.created_at or iso_utc(self.clock(), millis=True)
        if msg.created_at is not None:
            try:
                datetime.fromisoformat(msg.created_at.replace("Z", "+00:00"))
            except ValueError:
                raise InvalidArgument("created_at must be an ISO-8601 timestamp") from None
        extra = {"source_message_ids": msg.source_message_ids} if msg.source_message_ids else {}
        return SessionMessage(
            0,
            f"msg_{uuid.uuid4().hex}",
            msg.role,
            parts,
            created,
            parts_tokens(parts),
            peer,
            msg.turn_id,
            msg.message_kind,
            extra,
        )

    def add_messages(
        self, identity: Identity, session_id: str, messages: list[NewMessage]
    ) -> tuple[SessionRecord, list[SessionMessage]]:
        """Appends (auto-creating the session); returns the session after the append."""
        if not messages:
            raise InvalidArgument("messages must not be empty")
        if len(messages) > MAX_BATCH:
            raise InvalidArgument(f"At most {MAX_BATCH} messages per batch")
        self._check_id(session_id)
        stored = [self._message(identity, m) for m in messages]
        rec = self.get(identity, session_id, auto_create=True)
        now = self.clock()
        idle = (rec.auto_commit_policy or {}).get("idle_seconds")
        deadline = now + float(idle) if idle else None
        try:
            rec = self.store.append_messages(
                identity.account_id,
                identity.user_id,
                session_id,
                stored,
                now=now,
                idle_deadline=deadline,
            )
        except StateNotFound:
            raise NotFound(f"Session {session_id} not found", session_id, "session") from None
        if self.threshold_reached(rec) and rec.failed_archive is None:
            self.commit(identity, session_id)
            rec = self._get(identity, session_id)
        elif deadline is not None and self.scheduler is not None:
            # one timer per session, moved on every message (AWS: EventBridge Scheduler)
            self.scheduler.schedule_once(
                timer_name(identity.account_id, identity.user_id, session_id),
                deadline,
                {**identity_payload(identity), "session_id": session_id},
            )
        return rec, stored

    def add_message(self, identity: Identity, session_id: str, message: NewMessage) -> MessageAdded:
        rec, stored = self.add_messages(identity, session_id, [message])
        return MessageAdded(session_id, rec.live_count, rec.live_tokens, stored[0].message_id)

    def add_batch(
        self, identity: Identity, session_id: str, messages: list[NewMessage]
    ) -> MessagesAdded:
        rec, stored = self.add_messages(identity, session_id, messages)
        return MessagesAdded(
            session_id, len(stored), rec.live_count, rec.live_tokens, [m.message_id for m in stored]
        )

    def enqueue_due_commits(self, now: float) -> int:
        """Idle timer tick: one auto-commit job per session whose idle deadline passed."""
        count = 0
        for account, user, sid in self.store.due_idle_sessions(now):
            payload = {"account": account, "user": user, "role": "user", "session_id": sid}
            self.queue.enqueue(
                QUEUE_AUTOCOMMIT, JOB_AUTO_COMMIT, payload, dedup_key=f"{account}/{user}/{sid}"
            )
            count += 1
        return count

    def threshold_reached(self, rec: SessionRecord) -> bool:
        policy = rec.auto_commit_policy or {}
        tokens, count = policy.get("pending_tokens"), policy.get("pending_messages")
        return bool((tokens and rec.live_tokens >= tokens) or (count and rec.live_count >= count))

    def recent_texts(self, identity: Identity, session_id: str, limit: int) -> list[str]:
        rec = self._get(identity, session_id)
        msgs = self.store.list_messages(
            identity.account_id,
            identity.user_id,
            session_id,
            after_seq=max(rec.archived_seq, rec.last_seq - limit),
        )
        return [f"{m.role}: {parts_text(m.parts)}" for m in msgs]

    # ---------------------------------------------------------------- reading

    def message_view(self, m: SessionMessage) -> Message:
        return Message(
            m.message_id,
            m.role,
            m.parts,
            m.created_at,
            m.peer_id or None,
            m.turn_id or None,
            m.message_kind or None,
            m.extra.get("source_message_ids") or None,
        )

    def context(self, identity: Identity, session_id: str, token_budget: int) -> SessionContext:
        if token_budget < 0:
            raise InvalidArgument("token_budget must be >= 0")
        rec = self._get(identity, session_id)
        live = self.store.list_messages(
            identity.account_id, identity.user_id, session_id, after_seq=rec.archived_seq
        )
        archives = [
            a
            for a in self.store.list_archives(identity.account_id, identity.user_id, session_id)
            if a.status != ArchiveStatus.RESET
        ]
        active_tokens = sum(m.tokens for m in live)
        budget = max(token_budget - active_tokens, 0)
        latest_overview = ""
        abstracts: list[ArchiveAbstract] = []
        used = 0
        failed = sum(1 for a in archives if a.status == ArchiveStatus.FAILED)
        included = 0
        for i, arch in enumerate(reversed(archives)):
            base = self.archive_uri(identity, session_id, arch.archive_id)
            if i == 0:
                text = self._sidecar(identity, base, ".overview.md") or ""
                if estimate_tokens(text) <= budget - used:
                    latest_overview = text
                    used += estimate_tokens(text)
                    included += 1
                continue
            abstract = self._sidecar(identity, base, ".abstract.md") or ""
            cost = estimate_tokens(abstract)
            if abstract and cost <= budget - used:
                abstracts.append(ArchiveAbstract(arch.archive_id, abstract))
                used += cost
                included += 1
        abstracts.reverse()
        stats = ContextStats(
            len(archives), included, len(archives) - included - failed, failed, active_tokens, used
        )
        return SessionContext(
            latest_overview,
            abstracts,
            [self.message_view(m) for m in live],
            active_tokens + used,
            stats,
        )

    def _sidecar(self, identity: Identity, base: VikingURI, name: str) -> str | None:
        """An archive's sidecar text; None when the archive directory is not there."""
        if not self.fs.is_dir(identity, base):
            return None
        return self.fs.sidecar(identity, base, name)[1]

    def archive(self, identity: Identity, session_id: str, archive_id: str) -> Archive:
        self._get(identity, session_id)
        number = parse_archive_id(archive_id)
        arch = self.store.get_archive(identity.account_id, identity.user_id, session_id, number)
        if arch is None:
            raise NotFound(f"Archive {archive_id} not found", archive_id, "archive")
        msgs = self.store.list_messages(
            identity.account_id,
            identity.user_id,
            session_id,
            after_seq=arch.start_seq - 1,
            upto_seq=arch.end_seq,
        )
        base = self.archive_uri(identity, session_id, archive_id)
        abstract = self._sidecar(identity, base, ".abstract.md") or ""
        overview = split_frontmatter(self._sidecar(identity, base, ".overview.md") or "")[1]
        return Archive(
            archive_id, arch.status, abstract, overview, [self.message_view(m) for m in msgs]
        )

    # ---------------------------------------------------------------- commit, phase 1

    def commit(
        self,
        identity: Identity,
        session_id: str,
        *,
        keep_recent_count: int = 0,
        event_tags: list[str] | None = None,
        reset_context: bool = False,
    ) -> Committed:
        return self.committer.commit(
            identity,
            session_id,
            keep_recent_count=keep_recent_count,
            event_tags=event_tags,
            reset_context=reset_context,
        )

    def session_view(self, identity: Identity, rec: SessionRecord) -> SessionView:
        archives = self.store.list_archives(identity.account_id, identity.user_id, rec.session_id)
        last_commit = max((a.created_at for a in archives), default=None)
        # each archive's extraction, counted once with its `done`
        llm = usage_total(a.meta.get("llm_token_usage") or {} for a in archives)
        embedding = {**ZERO_USAGE, **rec.meta.get("embedding_token_usage", {})}
        return SessionView(
            session_id=rec.session_id,
            uri=str(self.session_uri(identity, rec.session_id)),
            created_at=iso_utc(rec.created_at),
            updated_at=iso_utc(rec.updated_at),
            created_by_account_id=rec.account_id,
            created_by_user_id=rec.user_id,
            user=SessionUser(rec.account_id, rec.user_id),
            message_count=rec.live_count,
            total_message_count=rec.last_seq,
            commit_count=rec.commit_count,
            memories_extracted=MemoriesExtracted(
                sum(int(a.meta.get("memories", 0)) for a in archives)
            ),
            last_commit_at=iso_utc(last_commit) if last_commit else None,
            llm_token_usage=_usage(llm),
            embedding_token_usage=_usage(embedding),
            pending_tokens=rec.live_tokens,
            keep_recent_count=0,
            retention_mode=None,
            failed_archive=rec.failed_archive,
            auto_commit_policy=rec.auto_commit_policy,
            memory_policy=rec.memory_policy,
            memory_extraction_config=rec.extraction_config,
        )


# Token counts of the models that worked for a session; zeros until one runs.
ZERO_USAGE = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}


def _usage(counts: dict[str, Any]) -> TokenUsage:
    return TokenUsage(
        int(counts["prompt_tokens"]), int(counts["completion_tokens"]), int(counts["total_tokens"])
    )


def timer_name(account: str, user: str, session_id: str) -> str:
    digest = hashlib.sha256(f"{account}/{user}/{session_id}".encode()).hexdigest()[:40]
    return f"idle-{digest}"


MAX_ARCHIVE_DIGITS = 18


def parse_archive_id(archive_id: str) -> int:
    digits = archive_id.removeprefix("archive_")
    # At most 18 digits: every number a state store keeps (a signed 64-bit integer) fits.
    if (
        not digits.isascii()
        or not digits.isdigit()
        or len(digits) > MAX_ARCHIVE_DIGITS
        or not archive_id.startswith("archive_")
        or int(digits) < 1
    ):
        raise InvalidArgument(f"Invalid archive id '{archive_id}': expected archive_NNN")
    return int(digits)
