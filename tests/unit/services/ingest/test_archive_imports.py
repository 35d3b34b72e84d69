"""Archive imports driven on the services: the request checks and reserves, the import job
writes a chunk at a time from its checkpoint, hands on when short of time, and a failure ends
the task and removes what the request reserved."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skald import catalog
from skald.compose.composition import Composition
from skald.config import Settings
from skald.domain.access.identity import Identity
from skald.domain.errors import Conflict, InvalidArgument, PayloadTooLarge
from skald.domain.paths.uri import VikingURI
from skald.ports import TaskStatus
from skald.services.faults import CrashPoint, Faults
from skald.services.ingest import imports as imports_module
from skald.services.ingest.resources import AddResourceRequest
from tests.support.compose import local_services

ME = Identity("acme", "ann", "user")
ROOT = VikingURI("resources", ("corpus",))


@pytest.fixture
def c(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Composition]:
    monkeypatch.setattr(imports_module, "CHUNK", 10)
    settings = Settings(
        backend="local",
        data_dir=tmp_path / "data",
        import_inline_max_entries=5,
        max_zip_bytes=64 * 1024,
    )
    container = local_services(settings)
    yield container
    container.close()


class ThirdChunkCrashes(Faults):
    def __init__(self) -> None:
        super().__init__()
        self.chunks = 0

    def hit(self, point: str) -> None:
        if point == "import.after_chunk":
            self.chunks += 1
            if self.chunks == 3:
                raise CrashPoint(point)


def _zip(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return out.getvalue()


def _corpus(n: int) -> dict[str, bytes]:
    return {
        f"corpus/d{i % 3}/f{i:03d}.md": f"# Note {i}\n\nword{i:03d}\n".encode() for i in range(n)
    }


def _submit(c: Composition, data: bytes, **req: Any) -> tuple[str, VikingURI]:
    temp = c.resources.temp_upload(ME, "corpus.zip", data)
    request = AddResourceRequest(temp_file_id=temp, **req)
    opened = c.resources.open_add(ME, request)
    assert c.imports.takes(opened)
    return c.imports.submit(ME, request, opened, processing_mode="vectors_only")


def _import_jobs(c: Composition) -> list[dict[str, Any]]:
    leases = c.queue.lease(catalog.QUEUE_FETCH, max_jobs=10)
    for lease in leases:
        c.queue.ack(lease)
    return [lease.job.payload for lease in leases if lease.job.kind == catalog.JOB_IMPORT]


def _files(c: Composition, root: VikingURI) -> list[str]:
    return sorted(str(e.uri) for e in c.fs.iter_files(ME, root))


def test_the_job_writes_every_member_and_queues_one_semantic_job(c: Composition) -> None:
    task_id, root = _submit(c, _zip(_corpus(25)))
    assert root == ROOT
    assert c.tasks.get(ME, task_id).meta["import"] == {"entries": 25, "done": 0}
    assert _files(c, root) == []  # nothing written by the request
    [payload] = _import_jobs(c)
    c.imports.run(payload, None)
    assert len(_files(c, root)) == 25
    assert c.fs.read_bytes(ME, root.child("d1/f001.md")) == b"# Note 1\n\nword001\n"
    progress = c.tasks.get(ME, task_id).meta["import"]
    assert progress["done"] == 25 and progress["queued"] and progress["runs"] == 1
    [semantic] = c.queue.lease(catalog.QUEUE_SEMANTIC, max_jobs=10)
    assert semantic.job.payload["task_id"] == task_id
    assert len(semantic.job.payload["written"]) == 25
    assert str(root.child("d2")) in semantic.job.payload["dirs"]
    # A redelivery of the finished job does nothing more.
    c.imports.run(payload, None)
    assert c.queue.lease(catalog.QUEUE_SEMANTIC, max_jobs=10) == []
    # The upload is consumed.
    assert list(c.blobs.iter_all("acme/upload/")) == []


def test_a_crash_resumes_at_the_checkpoint(c: Composition) -> None:
    task_id, root = _submit(c, _zip(_corpus(25)))
    [payload] = _import_jobs(c)
    c.imports.faults = Faults({"import.after_chunk": "raise"})
    with pytest.raises(CrashPoint):  # the first chunk written, not yet checkpointed
        c.imports.run(payload, None)
    assert c.tasks.get(ME, task_id).meta["import"]["done"] == 0
    c.imports.faults = ThirdChunkCrashes()  # two chunks checkpointed, then a crash
    with pytest.raises(CrashPoint):
        c.imports.run(payload, None)
    progress = c.tasks.get(ME, task_id).meta["import"]
    assert progress["done"] == 20 and progress["resumed_from"] == 0
    c.imports.faults = Faults()
    c.imports.run(payload, None)
    progress = c.tasks.get(ME, task_id).meta["import"]
    assert progress["resumed_from"] == 20 and progress["done"] == 25 and progress["runs"] == 2
    assert len(_files(c, root)) == 25
    [semantic] = c.queue.lease(catalog.QUEUE_SEMANTIC, max_jobs=10)
    assert sorted(semantic.job.payload["written"]) == _files(c, root)


def test_a_job_short_of_time_hands_on_the_rest(c: Composition) -> None:
    task_id, root = _submit(c, _zip(_corpus(25)))
    [payload] = _import_jobs(c)
    clock = {"t": 0.0}

    def monotonic() -> float:
        clock["t"] += 1.0  # every chunk takes a second or so
        return clock["t"]

    c.imports.monotonic = monotonic
    deadline = imports_module.RESERVE_S + 3.5
    c.imports.run(payload, deadline)
    done = c.tasks.get(ME, task_id).meta["import"]["done"]
    assert 0 < done < 25
    [continuation] = _import_jobs(c)
    assert continuation["task_id"] == task_id
    c.imports.run(continuation, None)
    assert c.tasks.get(ME, task_id).meta["import"]["done"] == 25
    assert len(_files(c, root)) == 25


def test_a_failed_import_ends_its_task_and_removes_the_root(c: Composition) -> None:
    task_id, root = _submit(c, _zip(_corpus(25)))
    [payload] = _import_jobs(c)
    c.imports.on_dead(payload, "out of attempts")
    task = c.tasks.get(ME, task_id)
    assert task.status == TaskStatus.FAILED and "out of attempts" in (task.error or "")
    assert not c.fs.is_dir(ME, root)
    assert list(c.blobs.iter_all("acme/upload/")) == []


def test_an_upload_gone_fails_the_import(c: Composition) -> None:
    task_id, root = _submit(c, _zip(_corpus(25)))
    [payload] = _import_jobs(c)
    c.resources.discard_upload(ME, payload["temp_file_id"])
    c.imports.run(payload, None)
    task = c.tasks.get(ME, task_id)
    assert task.status == TaskStatus.FAILED
    assert task.error == "The import failed: the uploaded archive is gone"
    assert not c.fs.is_dir(ME, root)


def test_a_cancelled_import_stops_and_removes_the_root(c: Composition) -> None:
    task_id, root = _submit(c, _zip(_corpus(25)))
    [payload] = _import_jobs(c)
    c.tasks.cancel(ME, task_id)  # pending: cancelled at once
    c.imports.run(payload, None)
    assert c.tasks.get(ME, task_id).status == TaskStatus.CANCELLED
    assert not c.fs.is_dir(ME, root)


def test_a_retried_request_answers_the_same_task(c: Composition) -> None:
    temp = c.resources.temp_upload(ME, "corpus.zip", _zip(_corpus(25)))
    request = AddResourceRequest(temp_file_id=temp)
    first = c.imports.submit(
        ME, request, c.resources.open_add(ME, request), processing_mode="vectors_only"
    )
    again = c.imports.submit(
        ME, request, c.resources.open_add(ME, request), processing_mode="vectors_only"
    )
    assert again == first
    assert not c.fs.is_dir(ME, VikingURI("resources", ("corpus_1",)))


def test_bad_archives_are_refused_before_anything_is_reserved(c: Composition) -> None:
    files = _corpus(25)
    cases: list[tuple[dict[str, bytes], type[Exception]]] = [
        ({**files, "corpus/../escape.md": b"x"}, InvalidArgument),
        ({**files, "corpus/big.bin": b"\0" * 70_000}, PayloadTooLarge),  # over max_zip_bytes
        ({**files, "corpus/d0": b"a file where a folder goes"}, Conflict),
    ]
    for archive, error in cases:
        with pytest.raises(error):
            _submit(c, _zip(archive))
    # A member whose bytes do not match its CRC: found when the request inflates it.
    data = bytearray(_zip({k: v * 50 for k, v in files.items()}))
    start = data.index(b"corpus/d0/f000.md") + len("corpus/d0/f000.md")
    data[start + 5] ^= 0xFF
    with pytest.raises(InvalidArgument):
        _submit(c, bytes(data))
    assert not c.fs.is_dir(ME, ROOT)
    assert c.queue.lease(catalog.QUEUE_FETCH, max_jobs=10) == []
