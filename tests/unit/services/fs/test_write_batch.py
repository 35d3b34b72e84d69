"""Writes held back and written in groups (services/fs/write_batch.py), on the real local blob
store, and VikingFS writes that go through them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest

from skald.adapters.local.blobs.blobstore import LocalBlobStore
from skald.domain.access.identity import Identity
from skald.domain.errors import Conflict
from skald.domain.paths.uri import VikingURI
from skald.ports import BlobInfo
from skald.services.fs.filesystem import VikingFS
from skald.services.fs.write_batch import HeldWrites, held_writes

ME = Identity("acme", "ann", "user")


class Recording(LocalBlobStore):
    """The local store, noting each put_many group, each lookup and each conditional put."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.groups: list[list[str]] = []
        self.heads: Counter[str] = Counter()
        self.conditional: list[str] = []

    def put_many(self, items: Sequence[tuple[str, bytes]]) -> list[BlobInfo]:
        self.groups.append([key for key, _ in items])
        return super().put_many(items)

    def head(self, key: str) -> BlobInfo | None:
        self.heads[key] += 1
        return super().head(key)

    def put(
        self, key: str, data: bytes, *, if_none_match: bool = False, if_match: str | None = None
    ) -> BlobInfo:
        if if_none_match:
            self.conditional.append(key)
        return super().put(key, data, if_none_match=if_none_match, if_match=if_match)


@pytest.fixture
def store(tmp_path: Path) -> Recording:
    return Recording(tmp_path)


def test_held_writes_are_written_in_bounded_groups(store: Recording) -> None:
    held = HeldWrites(store, max_blobs=4, max_bytes=1000)
    held.add([("acme/a", b"1"), ("acme/.a.attrs", b"{}")])
    assert store.groups == [] and store.head("acme/a") is None  # held: not written yet
    assert held.holds("acme/a") and not held.holds("acme/b")
    held.add([("acme/b", b"2"), ("acme/.b.attrs", b"{}")])  # the fourth blob: a group
    assert store.groups == [["acme/a", "acme/.a.attrs", "acme/b", "acme/.b.attrs"]]
    held.add([("acme/big", b"x" * 1000)])  # the byte bound
    assert store.groups[-1] == ["acme/big"]
    held.add([("acme/c", b"3")])
    held.add([("acme/c", b"4")])  # the same key again: the first version goes first
    held.flush()
    assert store.groups[-2:] == [["acme/c"], ["acme/c"]]
    assert store.get("acme/c") == b"4" and not held.holds("acme/c")
    held.flush()  # nothing held: no write
    assert len(store.groups) == 4


def test_held_writes_are_written_when_the_block_raises(store: Recording) -> None:
    with pytest.raises(RuntimeError), held_writes(store) as held:
        held.add([("acme/a", b"1")])
        raise RuntimeError("later failure")
    assert store.get("acme/a") == b"1"  # reported written before the error: written


def test_a_directory_made_meanwhile_where_a_held_file_goes_is_a_conflict(store: Recording) -> None:
    held = HeldWrites(store)
    held.add([("acme/x", b"file")])
    store.put("acme/x/inner", b"a directory now")
    with pytest.raises(Conflict, match="retry"):
        held.flush()


def test_with_skip_blocked_only_the_blocked_file_is_left_out(store: Recording) -> None:
    store.put("acme/.b.attrs", b"stale")  # attributes of a file since replaced by a directory
    held = HeldWrites(store, skip_blocked=True)
    for name in "abc":
        held.add([(f"acme/{name}", name.encode()), (f"acme/.{name}.attrs", b"{}")])
    store.put("acme/b/inner", b"a directory now")  # another request, meanwhile
    held.flush()  # no Conflict: the group is written again one file at a time
    assert held.blocked == {"acme/b"}
    assert store.get("acme/a") == b"a" and store.get("acme/c") == b"c"
    assert store.get("acme/.a.attrs") == b"{}" and store.get("acme/.c.attrs") == b"{}"
    assert store.head("acme/.b.attrs") is None  # no attributes left for a file not written
    assert store.get("acme/b/inner") == b"a directory now"


def test_a_batch_write_skips_a_file_blocked_by_a_directory_made_meanwhile(tmp_path: Path) -> None:
    from skald.compose.serve import ServeRuntime
    from skald.config import Settings
    from skald.services.ingest.content import BatchOperation

    runtime = ServeRuntime(Settings(backend="local", data_dir=tmp_path / "data"))
    try:
        c = runtime.services
        admin = Identity("default", "default", "root", dev_mode=True)
        root = VikingURI("resources", ("race",))
        c.fs.mkdir(admin, root, None)
        blobs = c.fs.blobs
        real_put_many = blobs.put_many
        raced: list[str] = []

        def racing_put_many(items: Sequence[tuple[str, bytes]]) -> list[BlobInfo]:
            if not raced:  # another request makes a directory where a held file goes
                raced.append("x")
                c.fs.mkdir(admin, root.child("f", "5.md"), None)
            return real_put_many(items)

        blobs.put_many = racing_put_many  # type: ignore[method-assign]
        ops = [
            BatchOperation(root.child("f", f"{i}.md"), content=f"note {i}", tags=["k=v"])
            for i in range(10)
        ]
        out = c.content.batch_write(
            admin,
            root,
            ops,
            wait=False,
            skip_conflicts=True,
            defer_processing=True,
            processing_mode="semantic_and_vectors",
        )
        assert raced
        statuses = {r.uri.rsplit("/", 1)[-1]: r.status for r in out.results}
        assert statuses == {f"{i}.md": "skipped" if i == 5 else "written" for i in range(10)}
        assert out.written == 9 and out.skipped == 1
        blocked = next(r for r in out.results if r.status == "skipped")
        assert (
            blocked.reason is not None
            and "changed this path meanwhile" in blocked.reason
            and blocked.sha256 is None
        )
        for i in range(10):
            uri = root.child("f", f"{i}.md")
            if i == 5:
                assert c.fs.is_dir(admin, uri)
            else:
                assert c.fs.read_text(admin, uri) == f"note {i}"
                assert c.fs.read_attrs(admin, uri, False)["tags"] == ["k=v"]
    finally:
        runtime.stop()


def test_vikingfs_writes_through_held_writes(store: Recording) -> None:
    fs = VikingFS(store, max_write_bytes=1 << 20, clock=lambda: 1234.5)
    root = VikingURI("resources", ("docs",))
    fs.mkdir(ME, root, None)
    fs.write(ME, root.child("old.md"), b"old", "replace")
    old_mtime = store.head("acme/resources/docs/old.md").modified  # type: ignore[union-attr]
    store.groups.clear()
    with held_writes(store) as held:
        for i in range(3):
            res, change = fs.write(
                ME,
                VikingURI("resources", ("docs", "sub", f"{i}.md")),
                f"text {i}".encode(),
                "replace",
                tags=["team=core"],
                held=held,
            )
            assert res.created and change.written
        fs.write(ME, root.child("old.md"), b"new", "replace", held=held)
        assert fs.read_bytes(ME, root.child("old.md")) == b"old"  # held until the end
        assert fs.is_dir(ME, VikingURI("resources", ("docs", "sub")))  # parents made at once
    # 3 new files and their tags; a rewritten file and, its first time, its creation time
    assert len(store.groups) == 1 and len(store.groups[0]) == 8
    assert fs.read_bytes(ME, root.child("old.md")) == b"new"
    assert fs.read_attrs(ME, root.child("old.md"), False) == {"created_at": old_mtime}
    for i in range(3):
        uri = VikingURI("resources", ("docs", "sub", f"{i}.md"))
        assert fs.read_text(ME, uri) == f"text {i}"
        assert fs.read_attrs(ME, uri, False) == {"created_at": 1234.5, "tags": ["team=core"]}


def test_a_held_file_where_a_later_write_needs_a_directory_is_a_conflict(store: Recording) -> None:
    fs = VikingFS(store, max_write_bytes=1 << 20)
    fs.mkdir(ME, VikingURI("resources", ("docs",)), None)
    with held_writes(store) as held:
        fs.write(ME, VikingURI("resources", ("docs", "x.md")), b"file", "replace", held=held)
        with pytest.raises(Conflict, match="A file exists where a directory is needed"):
            fs.write(
                ME, VikingURI("resources", ("docs", "x.md", "y.md")), b"inner", "replace", held=held
            )
    assert fs.read_bytes(ME, VikingURI("resources", ("docs", "x.md"))) == b"file"
    assert not fs.is_dir(ME, VikingURI("resources", ("docs", "x.md")))
    assert store.head("acme/resources/docs/.x.md.attrs.json") is None  # its mtime dates it


def test_a_batch_looks_each_parent_directory_up_once(store: Recording) -> None:
    """Past its first file, a batch into existing folders neither looks them up again nor
    tries to create them (a refused conditional write: a lock here, a PUT on S3)."""
    fs = VikingFS(store, max_write_bytes=1 << 20)
    fs.mkdir(ME, VikingURI("resources", ("docs", "old")), None)
    store.heads.clear()
    store.conditional.clear()
    with held_writes(store) as held:
        for i in range(40):
            folder = "old" if i % 2 else "new"
            fs.write(
                ME, VikingURI("resources", ("docs", folder, f"{i}.md")), b"x", "replace", held=held
            )
    assert store.conditional == ["acme/resources/docs/new/.abstract.md"]  # made once
    folders = [f"acme/resources/{p}" for p in ("docs", "docs/old", "docs/new")]
    assert {k: n for k, n in store.heads.items() if k in folders} == dict.fromkeys(folders, 1)
    assert fs.is_dir(ME, VikingURI("resources", ("docs", "new")))
    assert len(fs.children(ME, VikingURI("resources", ("docs", "old")), show_hidden=False)) == 20
