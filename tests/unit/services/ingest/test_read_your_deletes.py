"""Read your deletes, through the services over the local adapters: a removal drops its
records and hides the summaries above it before it answers; its semantic job brings those
summaries back refreshed (a large directory's too, whatever its ledger), also when it runs
short of time, and never drops the records of a path written again since."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skald.compose.composition import Composition
from skald.config import Settings
from skald.domain.access.identity import Identity
from skald.domain.paths.summaries import namespace_root, summarised_by, summary_chain
from skald.domain.paths.uri import VikingURI, parse_uri
from skald.jobs import semantic as semantic_job
from skald.ports import IndexFilter, IndexQuery, Job
from skald.services.fs.entries import FsChange
from skald.services.ingest import directory_summaries, semantic_files
from skald.services.ingest.processing import QUEUE_SEMANTIC, ProcessingScheduler
from skald.services.ingest.semantic import Continuation
from skald.services.tasks import TaskService
from tests.support.compose import local_services
from tests.support.semantic_jobs import written_job

ME = Identity("acme", "ann", "user")


def u(text: str) -> VikingURI:
    return parse_uri(text, user_id="ann")


@pytest.fixture
def c(tmp_path: Path) -> Iterator[Composition]:
    services = local_services(Settings(backend="local", data_dir=tmp_path / "data"))
    yield services
    services.close()


def seed(c: Composition, files: dict[str, str]) -> None:
    """Writes the files and processes their job at once (no worker runs here)."""
    c.semantic.process(written_job(c, ME, [(uri, text.encode()) for uri, text in files.items()]))


def run_queued(c: Composition) -> list[dict[str, Any]]:
    """Runs every queued semantic job, oldest first; their payloads."""
    done: list[dict[str, Any]] = []
    while leases := c.queue.lease(QUEUE_SEMANTIC, max_jobs=1):
        semantic_job.handle(c, leases[0].job.payload)
        assert c.queue.ack(leases[0])
        done.append(leases[0].job.payload)
    return done


def found(c: Composition, text: str, *, files: bool = False) -> list[str]:
    """What keyword search finds for `text`; with `files`, files only (no summaries)."""
    flt = IndexFilter(scopes=["viking://resources"], levels=[2] if files else None)
    hits = c.index.search(IndexQuery(ME.account_id, "lexical", 50, text=text, filter=flt))
    return sorted({h.record.uri for h in hits})


def summaries_of(c: Composition, directory: str) -> list[str]:
    return sorted(
        {
            r.uri
            for uri in (f"{directory}/.abstract.md", f"{directory}/.overview.md")
            for r in c.index.get(ME.account_id, uri)
        }
    )


def test_the_summary_chain_climbs_to_the_namespace_root() -> None:
    assert summary_chain(u("viking://resources/a/b/c.md")) == [
        u("viking://resources/a/b"),
        u("viking://resources/a"),
        u("viking://resources"),
    ]
    assert summary_chain(u("viking://resources/a")) == [u("viking://resources")]
    assert summary_chain(u("viking://resources")) == []
    mem = u("viking://user/ann/memories/preferences/tea.md")
    # A user's memories are a namespace of their own.
    assert summary_chain(mem) == [
        u("viking://user/ann/memories/preferences"),
        u("viking://user/ann/memories"),
    ]
    # So are a peer's.
    peer = u("viking://user/ann/peers/bob/memories/x.md")
    assert namespace_root(peer) == u("viking://user/ann/peers/bob/memories")
    assert summary_chain(peer) == [u("viking://user/ann/peers/bob/memories")]
    assert summarised_by(u("viking://user/ann/memories")) is None
    assert summarised_by(u("viking://user/ann/memories/events")) == u("viking://user/ann/memories")


def test_rm_forgets_before_it_answers_and_its_job_brings_the_summaries_back(c: Composition) -> None:
    seed(
        c,
        {
            "viking://resources/proj/b/own.md": "# Own\n\nTeam Alpha owns the pipeline.\n",
            "viking://resources/proj/other.md": "# Other\n\nNothing else.\n",
        },
    )
    assert "viking://resources/proj/.abstract.md" in found(c, "alpha pipeline")
    gone = c.content.rm(ME, u("viking://resources/proj/b"), recursive=True, wait=False)
    # The file's record and the folder's own summaries: 3 records.
    assert gone.memory_cleanup.removed_records == 3
    assert found(c, "alpha pipeline") == []
    assert summaries_of(c, "viking://resources/proj") == []
    assert summaries_of(c, "viking://resources") == []
    [job] = run_queued(c)
    assert job["removed"] == ["viking://resources/proj/b"]
    assert summaries_of(c, "viking://resources/proj") == [
        "viking://resources/proj/.abstract.md",
        "viking://resources/proj/.overview.md",
    ]
    assert summaries_of(c, "viking://resources") != []
    assert found(c, "alpha pipeline") == []
    assert "viking://resources/proj/other.md" in found(c, "nothing else")


def test_mv_and_a_session_delete_forget_the_old_path(c: Composition) -> None:
    seed(c, {"viking://resources/box/old/n.md": "# N\n\nMoved words here.\n"})
    c.content.mv(ME, u("viking://resources/box/old"), u("viking://resources/box/new"))
    assert found(c, "moved words") == []
    run_queued(c)
    assert "viking://resources/box/new/n.md" in found(c, "moved words")

    c.sessions.create(ME, "s1")
    base = "viking://user/ann/sessions/s1"
    c.fs.write(ME, u(f"{base}/note.md"), b"# Note\n\nSession words.\n", "replace")
    c.semantic.process(written_job(c, ME, [(f"{base}/note.md", b"# Note\n\nSession words.\n")]))
    assert c.index.count(ME.account_id, IndexFilter(scopes=[base])) > 0
    c.sessions.delete(ME, "s1")
    assert c.index.count(ME.account_id, IndexFilter(scopes=[base])) == 0
    assert summaries_of(c, "viking://user/ann/sessions") == []


def test_a_reindex_does_not_hide_what_it_rebuilds(c: Composition) -> None:
    seed(c, {"viking://resources/kept/a.md": "# A\n\nKept words.\n"})
    c.content.reindex(
        ME,
        u("viking://resources/kept"),
        mode="vectors_only",
        wait=False,
        recursive=True,
        tags=None,
        tag_mode="replace",
    )
    assert found(c, "kept words", files=True) == ["viking://resources/kept/a.md"]
    assert summaries_of(c, "viking://resources/kept") != []
    run_queued(c)
    assert found(c, "kept words", files=True) == ["viking://resources/kept/a.md"]


def test_a_path_written_again_keeps_its_records_whichever_job_runs_first(c: Composition) -> None:
    uri = "viking://resources/again/doc.md"
    seed(
        c,
        {
            uri: "# Doc\n\nFirst version.\n",
            "viking://resources/again/peer.md": "# Peer\n\nA peer.\n",
        },
    )
    c.content.rm(ME, u(uri), recursive=False, wait=False)
    # The new write's job runs first, the removal's after it (another worker, a later
    # batch): the removal's job must not take the new records away.
    rewrite = written_job(c, ME, [(uri, b"# Doc\n\nSecond version.\n")])
    c.semantic.process(rewrite)
    assert found(c, "second", files=True) == [uri]
    run_queued(c)
    assert found(c, "second", files=True) == [uri]
    assert found(c, "first") == []


def test_a_large_directory_loses_a_removed_childs_line_whatever_its_ledger(
    c: Composition, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A sampled listing (more children than it shows) waits for half its children to change.
    monkeypatch.setattr(directory_summaries, "MAX_REFRESH_CHILDREN", 3)
    monkeypatch.setattr(directory_summaries, "REFRESH_FRACTION", 0.5)
    names = [f"f{i}.md" for i in range(6)]
    seed(c, {f"viking://resources/big/{n}": f"# {n}\n\nWord{n[1]} kiwi.\n" for n in names})
    listed = c.fs.dir_sidecar(ME, u("viking://resources/big"), ".overview.md") or ""
    shown = next(n for n in names if f"- {n}:" in listed)
    c.content.rm(ME, u(f"viking://resources/big/{shown}"), recursive=False, wait=False)
    run_queued(c)
    assert f"- {shown}:" not in (
        c.fs.dir_sidecar(ME, u("viking://resources/big"), ".overview.md") or ""
    )
    assert summaries_of(c, "viking://resources/big") == [
        "viking://resources/big/.abstract.md",
        "viking://resources/big/.overview.md",
    ]
    assert f"viking://resources/big/{shown}" not in found(c, "kiwi")


def test_a_job_short_of_time_still_brings_the_summaries_back(
    c: Composition, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(semantic_files, "INDEX_GROUP_RECORDS", 1)
    seed(
        c,
        {
            "viking://resources/t/gone.md": "# Gone\n\nQuince.\n",
            "viking://resources/t/stay.md": "# Stay\n\nMedlar.\n",
        },
    )
    _, change = c.fs.rm(ME, u("viking://resources/t/gone.md"), False)
    for name in ("x.md", "y.md"):
        _, more = c.fs.write(ME, u(f"viking://resources/t/{name}"), b"# X\n\nNew.\n", "replace")
        change.written += more.written
    task = c.scheduler.submit(ME, change, task_type="batch_write")
    assert task.meta["removed_records"] == 1
    [lease] = c.queue.lease(QUEUE_SEMANTIC)
    # Out of time after the first file: the rest, and the summaries, go to a continuation.
    [outcome] = c.semantic.process_many([lease.job.payload], deadline=0.0)
    assert isinstance(outcome, Continuation)
    assert outcome.payload["removed"] == []
    assert "viking://resources/t" in outcome.payload["hidden"]
    assert summaries_of(c, "viking://resources/t") == []
    c.semantic.process(outcome.payload)
    assert summaries_of(c, "viking://resources/t") == [
        "viking://resources/t/.abstract.md",
        "viking://resources/t/.overview.md",
    ]
    assert found(c, "quince") == []
    assert "viking://resources/t/.abstract.md" in found(c, "medlar")


class _Queue:
    """Records what is queued (the scheduler's only use of its queue here)."""

    def __init__(self) -> None:
        self.jobs: list[dict[str, Any]] = []

    def enqueue(self, queue: str, kind: str, payload: dict[str, Any], **kw: Any) -> Job:
        self.jobs.append(payload)
        return Job("j", queue, kind, payload, 0)


def test_the_scheduler_forgets_before_it_queues_and_leaves_a_failure_to_the_job(
    c: Composition,
) -> None:
    calls: list[list[str]] = []
    queue = _Queue()

    def forget(account: str, uris: list[str]) -> int:
        calls.append(uris)
        assert not queue.jobs  # before the job: a job done first would see its work hidden
        return 7

    scheduler = ProcessingScheduler(
        queue,  # type: ignore[arg-type]
        TaskService(c.state),
        forget=forget,
    )
    change = FsChange(ME.account_id, ME.user_id, removed=["viking://resources/a"])
    assert scheduler.submit(ME, change, task_type="rm").meta["removed_records"] == 7
    assert calls == [["viking://resources/a"]] and len(queue.jobs) == 1
    # A reindex's paths stay: nothing is forgotten.
    assert (
        "removed_records"
        not in scheduler.submit(ME, change, task_type="reindex", forget=False).meta
    )
    assert len(calls) == 1

    def broken(account: str, uris: list[str]) -> int:
        raise OSError("index unreachable")

    scheduler.forget = broken
    task = scheduler.submit(ME, change, task_type="rm")
    assert "removed_records" not in task.meta and len(queue.jobs) == 3
