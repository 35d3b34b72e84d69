"""Commit phase 2: summarise the archive, extract memories, apply them with an audit diff.

Crash safety: the extraction result is saved as the archive's `memory_diff.json` plan before
any memory file is touched, and re-runs reuse that plan (a second LLM call could answer
differently). Every planned write records its `after` text, so a re-run skips files that
already hold it; add-only memories carry the extraction id in their MEMORY_FIELDS, so they are
never added twice. `.done` is written last, once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from skald.domain.access.identity import Identity
from skald.domain.errors import QuotaExceeded
from skald.domain.memory.archives import ArchiveStatus
from skald.domain.memory.parts import parts_text
from skald.domain.memory.types import (
    MEMORY_TYPES,
    MemoryOperation,
    Retraction,
    earlier_name,
    memory_path,
    render_memory,
)
from skald.domain.metering.subject import Purpose, purpose
from skald.domain.ops.usage import metering
from skald.domain.paths.uri import VikingURI
from skald.domain.text.memoryfile import (
    memory_body,
    split_memory_fields,
    split_provenance,
    with_memory_fields,
    with_provenance,
)
from skald.domain.text.outline import clip
from skald.domain.timefmt import iso_utc
from skald.ports import LLM, ArchiveRecord, BlobNotFound, ChatMessage, SessionMessage, SessionStore
from skald.services.extraction import ExtractionContext, Extractor
from skald.services.fs.filesystem import VikingFS
from skald.services.ingest.processing import identity_from_payload
from skald.services.ingest.semantic import SemanticService
from skald.services.sessions.memory_diff import (
    ExistingMemories,
    Planning,
    op_date,
    plan_retraction,
    plan_write,
    provenance,
)
from skald.services.sessions.service import SessionService
from skald.services.tasks import TaskService

log = logging.getLogger("skald.memory")
ADD_ONLY = frozenset(k for k, v in MEMORY_TYPES.items() if getattr(v, "mode", "") == "add_only")
# The memories an archive may update or retract: facts about the user and their world.
REVISABLE = ("profile.md", "identity.md", "preferences/", "entities/")
MAX_EXISTING = 300  # files read per memory root; the newest writes win beyond that


def _read(fs: VikingFS, identity: Identity, uri: VikingURI) -> str | None:
    try:
        return fs.blobs.get(uri.blob_key(identity.account_id)).decode("utf-8")
    except BlobNotFound:
        return None


def _put(fs: VikingFS, identity: Identity, uri: VikingURI, text: str) -> None:
    fs.blobs.put(uri.blob_key(identity.account_id), text.encode("utf-8"))


class MemoryCommitService:
    def __init__(
        self,
        store: SessionStore,
        sessions: SessionService,
        fs: VikingFS,
        semantic: SemanticService,
        tasks: TaskService,
        extractor: Extractor,
        llm: LLM | None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.sessions = sessions
        self.fs = fs
        self.semantic = semantic
        self.tasks = tasks
        self.extractor = extractor
        self.llm = llm
        self.clock = clock

    def _archive(self, identity: Identity, payload: dict[str, Any]) -> ArchiveRecord | None:
        return self.store.get_archive(
            identity.account_id, identity.user_id, payload["session_id"], int(payload["archive"])
        )

    def run(self, payload: dict[str, Any]) -> dict[str, Any] | None:
        identity = identity_from_payload(payload)
        task_id = payload.get("task_id")
        arch = self._archive(identity, payload)
        if arch is None:  # the session was deleted: its task must not wait forever
            if task_id:
                self.tasks.abandon(task_id, "the session was deleted")
            return None
        if arch.status.settled:
            return None  # a redelivery of finished work
        if task_id:
            self.tasks.start(task_id, "extracting")
        sid = arch.session_id
        base = self.sessions.archive_uri(identity, sid, arch.archive_id)
        if (
            not self.fs.is_dir(identity, base)
            or _read(self.fs, identity, base.child("messages.jsonl")) is None
        ):
            # phase 1 writes them before it queues this job; an older archive may lack them
            self.sessions.committer.write_archive_files(identity, arch)
        msgs = self.store.list_messages(
            identity.account_id,
            identity.user_id,
            sid,
            after_seq=arch.start_seq - 1,
            upto_seq=arch.end_seq,
        )
        session = self.store.get_session(identity.account_id, identity.user_id, sid)
        if session is None:
            return None
        with metering() as usage:  # the language model's tokens for this archive
            self._summarise(identity, base, msgs)
            diff = self._plan(
                identity, arch, base, msgs, session.memory_policy, payload.get("event_tags") or []
            )
        written, removed = self._apply(identity, diff)
        done: dict[str, Any] = {
            "archive_id": arch.archive_id,
            "starting_message_id": msgs[0].message_id if msgs else None,
            "ending_message_id": msgs[-1].message_id if msgs else None,
            "enable_working_memory": False,
            "coverage_start_archive": arch.archive_id,
            "coverage_end_archive": arch.archive_id,
            "covered_failed_archives": [],
            "completed_memory_steps": {"long_term": [m.message_id for m in msgs]},
            "completed_at": iso_utc(self.clock()),
        }
        # index the memories and the archive before declaring the archive done
        self.semantic.process(
            {
                "account": identity.account_id,
                "user": identity.user_id,
                "role": identity.role,
                "written": written,
                "removed": removed,
                "dirs": [str(base)],
                "processing_mode": "semantic_and_vectors",
            }
        )
        if _read(self.fs, identity, base.child(".done")) is None:
            _put(self.fs, identity, base.child(".done"), json.dumps(done, indent=2))
        failed = _read(self.fs, identity, base.child(".failed.json"))
        if failed is not None:
            self.fs.blobs.delete(base.child(".failed.json").blob_key(identity.account_id))
        summary = diff["summary"]
        added = summary["total_adds"] + summary["total_updates"]
        # the count lives on the archive, set together with `done`: a re-run cannot count twice
        self.store.update_archive(
            identity.account_id,
            identity.user_id,
            sid,
            arch.number,
            status=ArchiveStatus.DONE,
            error=None,
            meta={"memories": added, "llm_token_usage": usage.as_dict()},
        )
        result = {
            "archive_uri": str(base),
            "memory_diff": str(base.child("memory_diff.json")),
            **summary,
        }
        if task_id:
            self.tasks.complete(task_id, result)
        return result

    def fail(self, payload: dict[str, Any], error: str) -> None:
        """The job is out of retries: `.failed.json`, archive failed, task failed."""
        identity = identity_from_payload(payload)
        arch = self._archive(identity, payload)
        if arch is not None and not arch.status.settled:
            base = self.sessions.archive_uri(identity, arch.session_id, arch.archive_id)
            if self.fs.is_dir(identity, base):
                _put(
                    self.fs,
                    identity,
                    base.child(".failed.json"),
                    json.dumps(
                        {
                            "archive_id": arch.archive_id,
                            "error": error,
                            "failed_at": iso_utc(self.clock()),
                        },
                        indent=2,
                    ),
                )
            self.store.update_archive(
                identity.account_id,
                identity.user_id,
                arch.session_id,
                arch.number,
                status=ArchiveStatus.FAILED,
                error=error,
            )
        if payload.get("task_id"):
            self.tasks.fail(payload["task_id"], error)

    # ---------------------------------------------------------------- steps

    def _summarise(
        self, identity: Identity, base: VikingURI, msgs: Sequence[SessionMessage]
    ) -> None:
        lines = [f"{m.role}: {parts_text(m.parts)}" for m in msgs]
        overview = ""
        if self.llm is not None and lines:
            try:
                with purpose(Purpose.SUMMARY):
                    overview = self.llm.complete(
                        [
                            ChatMessage(
                                "system",
                                "Summarise this conversation for later recall: "
                                "who said what, decisions, facts, open questions. At most "
                                "15 short bullet points.",
                            ),
                            ChatMessage("user", "\n".join(lines)[:24000]),
                        ],
                        max_tokens=600,
                    )
            except QuotaExceeded:
                raise
            except Exception as exc:  # the deterministic summary below always works
                log.warning("LLM archive summary failed: %s", exc)
        if not overview:
            first_user = next(
                (ln for ln in lines if ln.startswith("user:")), lines[0] if lines else ""
            )
            bullets = [f"- {clip(ln, 200)}" for ln in lines[:12]]
            more = [f"- ... {len(lines) - 12} more messages"] if len(lines) > 12 else []
            overview = (
                f"Conversation of {len(msgs)} messages. Started with: "
                f"{clip(first_user, 200)}\n\n" + "\n".join(bullets + more)
            )
        abstract = clip(" ".join(overview.split()), 256)
        self.fs.write_sidecar(identity, base, ".overview.md", overview)
        self.fs.write_sidecar(identity, base, ".abstract.md", abstract)

    def _memory_root(self, identity: Identity, peer: str | None) -> VikingURI:
        root = identity.user_root
        if peer:
            root = root.child("peers", peer)
        return root.child("memories")

    def _plan(
        self,
        identity: Identity,
        arch: ArchiveRecord,
        base: VikingURI,
        msgs: Sequence[SessionMessage],
        policy: dict[str, Any],
        event_tags: list[str],
    ) -> dict[str, Any]:
        saved = _read(self.fs, identity, base.child("memory_diff.json"))
        if saved is not None:
            plan: dict[str, Any] = json.loads(saved)
            if plan.get("archive_uri") == str(base):
                return plan
        extraction_id = hashlib.sha256(
            f"{identity.account_id}/{identity.user_id}/{arch.session_id}/{arch.archive_id}".encode()
        ).hexdigest()[:32]
        now_iso = iso_utc(self.clock())
        self_on = bool(policy.get("self", {}).get("enabled", True))
        peer_on = bool(policy.get("peer", {}).get("enabled", False))
        ctx = ExtractionContext(
            user_id=identity.user_id,
            session_id=arch.session_id,
            archive_id=arch.archive_id,
            peer_memories=peer_on,
            event_tags=event_tags,
            now_iso=now_iso,
        )
        current = self._existing(identity, None)
        if getattr(self.extractor, "reads_existing", False):
            ctx.existing = [(rel, memory_body(current.text(rel))) for rel in current.paths]
        result = self.extractor.extract(msgs, ctx)
        p = Planning(
            identity, arch, base, extraction_id, now_iso, current, skipped=list(result.skipped)
        )
        self._plan_retractions(p, result.retractions, self_on)
        session_ts = datetime.fromtimestamp(arch.created_at, UTC).strftime("%Y%m%d%H%M%S")
        for op in result.operations:
            if op.peer_id is None and not self_on:
                p.skipped.append({"reason": "self_memory_disabled", "detail": op.memory_type})
                continue
            self._plan_operation(p, op, msgs, session_ts)
        plan = {
            "archive_uri": str(base),
            "trace_id": None,
            "extraction_id": extraction_id,
            "extracted_at": now_iso,
            "retractions": [
                {
                    "phrase": r.phrase,
                    "peer_id": r.peer_id,
                    "source_message_ids": r.source_message_ids,
                }
                for r in result.retractions
            ],
            "operations": {"adds": p.adds, "updates": p.updates, "deletes": p.deletes},
            "skipped_operations": p.skipped,
            "summary": {
                "total_adds": len(p.adds),
                "total_updates": len(p.updates),
                "total_deletes": len(p.deletes),
                "total_skipped": len(p.skipped),
            },
            "usage": result.usage,
        }
        _put(
            self.fs,
            identity,
            base.child("memory_diff.json"),
            json.dumps(plan, indent=2, ensure_ascii=False),
        )
        return plan

    def _plan_retractions(
        self, p: Planning, retractions: Sequence[Retraction], self_on: bool
    ) -> None:
        """Each root's memories revised by the phrases retracted for it: updated, or deleted
        when nothing remains of them."""
        for peer in dict.fromkeys(r.peer_id for r in retractions):
            if peer is None and not self_on:
                continue
            roots = p.current if peer is None else self._existing(p.identity, peer)
            root = self._memory_root(p.identity, peer)
            phrases = [r.phrase for r in retractions if r.peer_id == peer]
            ids = [i for r in retractions if r.peer_id == peer for i in r.source_message_ids]
            for rel in roots.paths:
                plan_retraction(p, rel, roots.text(rel), root, phrases, ids)

    def _plan_operation(
        self, p: Planning, op: MemoryOperation, msgs: Sequence[SessionMessage], session_ts: str
    ) -> None:
        """One extracted operation as an add, an update or a skip."""
        rel = memory_path(
            op,
            session_ts=session_ts,
            archive_suffix=f"_{p.arch.number:03d}",
            when=op_date(op, msgs),
        )
        target = self._memory_root(p.identity, op.peer_id).child(rel)
        uri = str(target)
        before_raw = self._before(p, op, rel, target)
        before_text, before_fields = split_memory_fields(before_raw or "")
        before_body = split_provenance(before_text)[1]
        if op.memory_type in ADD_ONLY and before_raw is not None:
            same = (before_fields or {}).get("source_extraction_id") == p.extraction_id
            p.skipped.append(
                {"reason": "already_applied" if same else "add_only_exists", "detail": uri}
            )
            return
        body = render_memory(op, existing=before_text if before_raw is not None else None)
        tags = [f"memory_type={op.memory_type}", *op.tags]
        version = int((before_fields or {}).get("version", 0)) + 1
        fields = {
            **op.fields,
            "memory_type": op.memory_type,
            "version": version,
            "source_extraction_id": p.extraction_id,
            "tags": tags,
            "source_message_ids": op.source_message_ids,
        }
        if before_raw is not None and body.strip() == before_body.strip():
            p.skipped.append(
                {"reason": "unchanged", "detail": uri, "source_message_ids": op.source_message_ids}
            )
            return
        prov = provenance(before_raw, op, p.base, p.arch.session_id, p.now_iso)
        after_raw = with_memory_fields(with_provenance(body, prov), fields)
        p.planned[uri] = after_raw
        entry = {
            "uri": uri,
            "memory_type": op.memory_type,
            "after": body,
            "after_raw": after_raw,
            "tags": tags,
            "source_message_ids": op.source_message_ids,
        }
        plan_write(p, entry, before_raw is not None, before_body, body)

    def _before(self, p: Planning, op: MemoryOperation, rel: str, target: VikingURI) -> str | None:
        """The text `target` holds before the operation: as planned so far, as stored, or,
        for a memory stored under an earlier name, that file's (whose deletion is planned)."""
        uri = str(target)
        if uri in p.planned:
            return p.planned[uri]
        before_raw = _read(self.fs, p.identity, target)
        old_name = (
            earlier_name(rel, p.current.paths)
            if before_raw is None and op.peer_id is None
            else None
        )
        if old_name is None:
            return before_raw
        old_uri = str(self._memory_root(p.identity, None).child(*old_name.split("/")))
        if old_uri in p.planned:
            return before_raw
        before_raw = p.current.text(old_name)
        p.planned[old_uri] = None
        p.deletes.append(
            {
                "uri": old_uri,
                "memory_type": op.memory_type,
                "before": memory_body(before_raw),
                "reason": "renamed",
                "renamed_to": uri,
                "archive": str(p.base),
                "source_message_ids": op.source_message_ids,
            }
        )
        return before_raw

    def _apply(self, identity: Identity, plan: dict[str, Any]) -> tuple[list[str], list[str]]:
        written: list[str] = []
        removed: list[str] = []
        ops = plan["operations"]
        for entry in [*ops["adds"], *ops["updates"]]:
            uri = _user_uri(entry["uri"])
            if _read(self.fs, identity, uri) != entry["after_raw"]:
                self.fs.write(
                    identity,
                    uri,
                    entry["after_raw"].encode("utf-8"),
                    "replace",
                    tags=entry["tags"],
                    tag_mode="replace",
                )
            written.append(entry["uri"])
        for entry in ops.get("deletes", []):
            uri = _user_uri(entry["uri"])
            if self.fs.file_info(identity, uri) is not None:
                self.fs.rm(identity, uri, False)
            removed.append(entry["uri"])
        return written, removed

    def _existing(self, identity: Identity, peer: str | None) -> ExistingMemories:
        """The revisable memories of a root, newest last, at most MAX_EXISTING of them; their
        texts are read only when asked for (one listing per commit otherwise)."""
        root = self._memory_root(identity, peer)
        prefix = root.blob_key(identity.account_id).rstrip("/") + "/"
        found: list[tuple[float, str, str]] = []
        for blob in self.fs.blobs.iter_all(prefix):
            rel = blob.key[len(prefix) :]
            if (
                rel.startswith(".")
                or "/." in rel
                or not rel.endswith(".md")
                or not rel.startswith(REVISABLE)
            ):
                continue
            found.append((blob.modified, rel, blob.key))
        found.sort()
        return ExistingMemories(self.fs, {rel: key for _, rel, key in found[-MAX_EXISTING:]})


def _user_uri(uri: str) -> VikingURI:
    return VikingURI("user", tuple(uri.removeprefix("viking://user/").split("/")))
