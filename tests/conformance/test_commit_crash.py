"""Commit phase 1 under crashes: a crash injected at every step of a commit, on every session
store adapter, then a "restarted" process (fresh clients on the same storage) that recovers or
retries. No message is lost or duplicated, every archive ends `done` with its memories (the
memory job is run), no task is left unfinished, and `system/wait` never reports idle while a
commit is half-done.

The blobs, the job queue and the index are the local adapters in both cases: the crash
windows are around the session store's transaction, which is what differs between backends.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from skald.adapters.local.blobs.blobstore import LocalBlobStore
from skald.adapters.local.index.searchindex import LocalSearchIndex
from skald.adapters.local.sqlite.jobqueue import SqliteJobQueue
from skald.compose.composition import Composition
from skald.compose.serve import IdleTimer
from skald.config import Settings
from skald.domain.access.identity import Identity
from skald.jobs.registry import run_job
from skald.ports import ArchiveRecord, BlobInfo
from skald.services.faults import CrashPoint, Faults
from skald.services.ingest.processing import QUEUES
from skald.services.sessions.commit import COMMIT_CRASH_POINTS
from skald.services.sessions.service import NewMessage
from tests.conformance.conftest import CommitOpener
from tests.support.compose import GivenAdapters, given_services

DIM = 16
TEXTS = (
    "I prefer dark mode in every editor.",
    "Noted: dark mode everywhere.",
    "My name is Alice and I work at Acme.",
)


class HashEmbedder:
    """Deterministic vectors: this suite checks commits, not ranking."""

    dimension = DIM
    model_id = "hash-16"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out = []
        for text in texts:
            raw = hashlib.sha256(text.encode()).digest()[:DIM]
            vec = [b - 127.5 for b in raw]
            norm = math.sqrt(sum(v * v for v in vec)) or 1.0
            out.append([v / norm for v in vec])
        return out


Build = Callable[..., Composition]


@pytest.fixture
def build(commit_backend: CommitOpener, tmp_path: Path) -> Iterator[Build]:
    """A new process on the same storage each call: fresh clients, nothing in memory."""
    built: list[GivenAdapters] = []

    def make(
        faults: Faults | None = None, blobs: object | None = None, **settings: Any
    ) -> Composition:
        sessions, state = commit_backend()
        c, factory = given_services(
            Settings(backend="local", data_dir=tmp_path, **settings),
            blobs=blobs or LocalBlobStore(tmp_path / "blobs"),
            state=state,
            sessions=sessions,
            queue=SqliteJobQueue(tmp_path / "queue.db", max_attempts=3, backoff_base_s=0.0),
            index=LocalSearchIndex(tmp_path / "index.db", dimension=DIM),
            embedder=HashEmbedder(),
            llm=None,
            reranker=None,
            scheduler=None,
        )
        if faults is not None:
            c.sessions.committer.faults = faults
        built.append(factory)
        return c

    yield make
    for factory in built:
        factory.close()


def drain(c: Composition) -> None:
    """Runs every queued job to completion, as the workers would."""
    for _ in range(50):
        leases = [lease for q in QUEUES for lease in c.queue.lease(q, max_jobs=10)]
        if not leases:
            return
        for lease in leases:
            run_job(c, lease.job.kind, lease.job.payload)
            c.queue.ack(lease)
    raise AssertionError("the queues never drained")


def me() -> Identity:
    return Identity("acct-" + uuid.uuid4().hex[:8], "alice", "user")


def add(c: Composition, who: Identity, sid: str = "s1") -> list[str]:
    _, stored = c.sessions.add_messages(
        who,
        sid,
        [NewMessage("user" if i % 2 == 0 else "assistant", text) for i, text in enumerate(TEXTS)],
    )
    return [m.message_id for m in stored]


def idle(c: Composition) -> bool:
    return c.wait_for_queues(0.05)[0]


def assert_committed_once(
    c: Composition, who: Identity, ids: list[str], *, sid: str = "s1", status: str = "done"
) -> ArchiveRecord:
    """One archive holding exactly `ids`, finished, with its task completed and its files."""
    a, u = who.account_id, who.user_id
    archives = c.session_store.list_archives(a, u, sid)
    assert [(x.number, x.status, x.outbox) for x in archives] == [(1, status, None)]
    arch = archives[0]
    rec = c.session_store.get_session(a, u, sid)
    assert rec is not None
    assert (rec.commit_count, rec.live_count, rec.archived_seq, rec.failed_archive) == (
        1,
        0,
        len(ids),
        None,
    )
    # the store holds each message once, the archive file the same ones in order
    assert [m.message_id for m in c.session_store.list_messages(a, u, sid)] == ids
    base = c.sessions.archive_uri(who, sid, arch.archive_id)
    lines = c.blobs.get(base.child("messages.jsonl").blob_key(a)).decode().splitlines()
    assert [json.loads(line)["id"] for line in lines] == ids
    assert c.blobs.head(base.child(".done").blob_key(a)) is not None
    meta = json.loads(c.blobs.get(c.sessions.session_uri(who, sid).child(".meta.json").blob_key(a)))
    assert meta["commit_count"] == 1
    # one commit task, completed; nothing else of the account is left unfinished
    tasks = c.state.list_tasks(a, include_internal=True, limit=100).items
    commits = [
        t for t in tasks if t.task_type == "session_commit" and t.meta.get("session_id") == sid
    ]
    assert [(t.task_id, t.status) for t in commits] == [(arch.task_id, "completed")]
    assert all(t.status in {"completed", "failed", "cancelled"} for t in tasks)
    return arch


def memories(c: Composition, who: Identity) -> list[str]:
    prefix = f"{who.account_id}/user/{who.user_id}/memories/"
    return [
        b.key
        for b in c.blobs.iter_all(prefix)
        if b.key.endswith(".md") and not b.key.rsplit("/", 1)[-1].startswith(".")
    ]


# --------------------------------------------------------------------------------------------


def test_every_step_of_a_commit_is_a_crash_point(build: Build) -> None:
    """The list the tests below walk is complete: a plain commit passes every point."""
    faults = Faults()
    c = build(faults)
    who = me()
    add(c, who)
    c.sessions.commit(who, "s1")
    assert faults.passed == set(COMMIT_CRASH_POINTS)
    reset = Faults()
    c.sessions.committer.faults = reset
    c.sessions.commit(who, "s1", reset_context=True)
    assert reset.passed == set(COMMIT_CRASH_POINTS)


def crash(build: Build, who: Identity, sid: str, point: str, **commit: Any) -> list[str]:
    """A process that adds messages to `sid` and dies at `point` of committing them."""
    doomed = build(Faults({point: "raise"}))
    ids = add(doomed, who, sid)
    with pytest.raises(CrashPoint):
        doomed.sessions.commit(who, sid, **commit)
    return ids


@pytest.mark.parametrize("point", COMMIT_CRASH_POINTS)
def test_a_commit_crashed_at_any_step_is_finished(build: Build, point: str) -> None:
    """Three commits die at `point` (three processes): s1's is finished by a retried commit,
    s2's and the context reset of s3 by recovery at startup."""
    who = me()
    ids = {
        sid: crash(build, who, sid, point, reset_context=sid == "s3") for sid in ("s1", "s2", "s3")
    }
    after = build()  # the restarted process, no recovery yet
    if point not in ("commit.before_reserve", "commit.after_seal"):
        # what the crash left must not look idle (the memory job may not even exist)
        assert not idle(after)

    # never "no messages" while a crashed commit holds them: it is finished and answered
    retried = after.sessions.commit(who, "s1")
    if point == "commit.after_seal":  # that commit was complete: nothing was left pending
        assert retried.status == "skipped"
    else:
        assert retried.status == "accepted" and retried.archived is True
        arch = after.session_store.get_archive(who.account_id, who.user_id, "s1", 1)
        assert arch is not None and retried.task_id == arch.task_id

    after.recover_commits(grace_s=0)  # what `skald serve` does at startup
    # no orphan is left: a commit archives only what is still pending
    res = after.sessions.commit(who, "s2")
    assert res.status == ("accepted" if point == "commit.before_reserve" else "skipped")
    if point == "commit.before_reserve":  # that reset never happened: it is made now
        after.sessions.commit(who, "s3", reset_context=True)
    drain(after)
    assert idle(after)
    assert_committed_once(after, who, ids["s1"], sid="s1")
    assert_committed_once(after, who, ids["s2"], sid="s2")
    assert memories(after, who)
    reset = after.session_store.list_archives(who.account_id, who.user_id, "s3")[0]
    assert (reset.status, reset.outbox, reset.end_seq) == ("reset", None, 3)
    base = after.sessions.archive_uri(who, "s3", reset.archive_id)
    done = json.loads(after.blobs.get(base.child(".done").blob_key(who.account_id)))
    assert done["covered_message_ids"] == ids["s3"]
    task = after.state.get_task(reset.task_id or "")
    assert task is not None and task.status == "completed"


def test_messages_added_after_the_crash_go_into_the_next_archive(build: Build) -> None:
    who = me()
    ids = crash(build, who, "s1", "commit.after_reserve")
    after = build()
    later = add(after, who)
    res = after.sessions.commit(who, "s1")
    assert res.status == "accepted"
    drain(after)
    a, u = who.account_id, who.user_id
    archives = after.session_store.list_archives(a, u, "s1")
    assert [(x.number, x.status, x.outbox) for x in archives] == [
        (1, "done", None),
        (2, "done", None),
    ]
    assert res.archive_uri is not None and res.archive_uri.endswith("archive_002")
    for arch, want in zip(archives, (ids, later), strict=True):
        base = after.sessions.archive_uri(who, "s1", arch.archive_id)
        lines = after.blobs.get(base.child("messages.jsonl").blob_key(a)).decode().splitlines()
        assert [json.loads(line)["id"] for line in lines] == want
    tasks = after.state.list_tasks(a, task_type="session_commit", limit=10).items
    assert sorted(t.status for t in tasks) == ["completed", "completed"]


def test_periodic_recovery_leaves_young_commits_alone(build: Build) -> None:
    who = me()
    crash(build, who, "s1", "commit.after_reserve")
    after = build()
    assert after.recover_commits(grace_s=3600) == {}  # may still be in a live request
    assert not idle(after)
    assert after.recover_commits(grace_s=0) == {"finished": 1}
    drain(after)
    assert idle(after)


def test_the_idle_timer_sweeps_half_done_commits(build: Build) -> None:
    who = me()
    crash(build, who, "s1", "commit.after_archive_dir")
    after = build(commit_recovery_grace_s=0.04)
    timer = IdleTimer(after, interval_s=0.01)  # a sweep every other tick
    timer.start()
    deadline = time.monotonic() + 10
    while after.session_store.stale_commits(None) and time.monotonic() < deadline:
        time.sleep(0.02)
    timer.stop()
    assert after.session_store.stale_commits(None) == []
    drain(after)
    assert idle(after)


def test_deleting_a_session_with_a_crashed_commit_leaves_no_task_behind(build: Build) -> None:
    who = me()
    crash(build, who, "s1", "commit.after_reserve")
    after = build()
    after.sessions.delete(who, "s1")
    drain(after)
    tasks = after.state.list_tasks(who.account_id, task_type="session_commit", limit=10).items
    assert [(t.status, t.error) for t in tasks] == [("failed", "the session was deleted")]
    assert idle(after)


class FailingMessagesFile:
    """A blob store that cannot write archive message files (a name it refuses, a full disk):
    the crashed commit can never be finished."""

    def __init__(self, inner: LocalBlobStore) -> None:
        self.inner = inner

    def put(self, key: str, data: bytes, **kw: object) -> BlobInfo:
        if key.endswith("/messages.jsonl"):
            raise OSError("No space left on device")
        return self.inner.put(key, data, **kw)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


def test_a_commit_that_cannot_be_finished_is_rolled_back(build: Build, tmp_path: Path) -> None:
    who = me()
    ids = crash(build, who, "s1", "commit.after_reserve")
    broken = build(blobs=FailingMessagesFile(LocalBlobStore(tmp_path / "blobs")))
    assert broken.recover_commits(grace_s=0) == {"retry": 1}
    assert broken.recover_commits(grace_s=0) == {"retry": 1}
    assert not idle(broken)
    assert broken.recover_commits(grace_s=0) == {"rolled_back": 1}
    a, u = who.account_id, who.user_id
    rec = broken.session_store.get_session(a, u, "s1")
    assert rec is not None and (rec.commit_count, rec.live_count, rec.archived_seq) == (0, 3, 0)
    assert broken.session_store.list_archives(a, u, "s1") == []
    task = broken.state.list_tasks(a, task_type="session_commit", limit=10).items[0]
    assert task.status == "failed" and "No space left on device" in (task.error or "")
    history = broken.sessions.session_uri(who, "s1").child("history", "archive_001")
    assert list(broken.blobs.iter_all(history.blob_key(a) + "/")) == []
    assert idle(broken)
    # once the disk is fine, the same messages commit again, as archive 2
    healthy = build()
    res = healthy.sessions.commit(who, "s1")
    assert res.status == "accepted" and res.archive_uri is not None
    assert res.archive_uri.endswith("archive_002")
    drain(healthy)
    archives = healthy.session_store.list_archives(a, u, "s1")
    assert [(x.number, x.status) for x in archives] == [(2, "done")]
    base = healthy.sessions.archive_uri(who, "s1", "archive_002")
    lines = healthy.blobs.get(base.child("messages.jsonl").blob_key(a)).decode().splitlines()
    assert [json.loads(line)["id"] for line in lines] == ids
