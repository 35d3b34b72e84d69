"""BlobStore conformance: every adapter, through the port only (local specifics at the end)."""

from __future__ import annotations

import multiprocessing
import os
import threading
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest

from skald.adapters.local.blobs.blobstore import LocalBlobStore
from skald.ports import BlobInfo, BlobNotFound, BlobPreconditionFailed, BlobStore
from tests.conformance.conftest import BlobOpener


def keys(infos: list[BlobInfo]) -> list[str]:
    return [i.key for i in infos]


def test_implements_port(blob_store: BlobStore) -> None:
    assert isinstance(blob_store, BlobStore)


# --------------------------------------------------------------------------------------------
# round trips and not-found


def test_put_get_head_round_trip(blob_store: BlobStore) -> None:
    info = blob_store.put("acme/resources/a.md", b"hello")
    assert info.key == "acme/resources/a.md"
    assert info.size == 5
    assert info.etag
    assert info.modified > 0
    assert blob_store.get("acme/resources/a.md") == b"hello"
    head = blob_store.head("acme/resources/a.md")
    assert head is not None
    assert (head.key, head.size, head.etag) == (info.key, info.size, info.etag)
    # etags are stable while nothing changes
    assert blob_store.head("acme/resources/a.md") == head


def test_empty_and_binary_content(blob_store: BlobStore) -> None:
    blob_store.put("acme/empty", b"")
    assert blob_store.get("acme/empty") == b""
    head = blob_store.head("acme/empty")
    assert head is not None and head.size == 0
    data = bytes(range(256)) * 64
    blob_store.put("acme/bin", data)
    assert blob_store.get("acme/bin") == data


def test_missing_key(blob_store: BlobStore) -> None:
    with pytest.raises(BlobNotFound):
        blob_store.get("acme/nope.md")
    with pytest.raises(KeyError):  # BlobNotFound is a KeyError
        blob_store.get("acme/nope.md")
    assert blob_store.head("acme/nope.md") is None
    assert blob_store.delete("acme/nope.md") is False
    with pytest.raises(BlobNotFound):
        blob_store.copy("acme/nope.md", "acme/dst.md")
    assert blob_store.head("acme/dst.md") is None


def test_directory_prefix_is_not_an_object(blob_store: BlobStore) -> None:
    blob_store.put("acme/dir/file.md", b"x")
    assert blob_store.head("acme/dir") is None
    with pytest.raises(BlobNotFound):
        blob_store.get("acme/dir")


def test_overwrite_changes_content_and_etag(blob_store: BlobStore) -> None:
    first = blob_store.put("acme/a.md", b"one")
    second = blob_store.put("acme/a.md", b"two!")
    assert first.etag != second.etag
    assert blob_store.get("acme/a.md") == b"two!"
    head = blob_store.head("acme/a.md")
    assert head is not None and head.etag == second.etag and head.size == 4


def test_unicode_and_spaces_in_keys(blob_store: BlobStore) -> None:
    key = "acme/resources/résumé notes/日本語 file (1).md"
    blob_store.put(key, "naïve ✓".encode())
    assert blob_store.get(key) == "naïve ✓".encode()
    head = blob_store.head(key)
    assert head is not None and head.key == key
    listing = blob_store.list("acme/resources/")
    assert listing.prefixes == ["acme/resources/résumé notes/"]
    assert keys(blob_store.list("acme/resources/résumé notes/").blobs) == [key]
    assert keys(list(blob_store.iter_all("acme/"))) == [key]
    assert blob_store.delete(key)
    assert blob_store.head(key) is None


def test_persists_across_instances(blob_backend: BlobOpener) -> None:
    first = blob_backend()
    info = first.put("acme/keep/me.md", b"durable")
    second = blob_backend()
    assert second.get("acme/keep/me.md") == b"durable"
    head = second.head("acme/keep/me.md")
    assert head is not None and head.etag == info.etag
    assert keys(second.list("acme/keep/").blobs) == ["acme/keep/me.md"]


# --------------------------------------------------------------------------------------------
# conditional writes


def test_create_only(blob_store: BlobStore) -> None:
    info = blob_store.put("acme/lock", b"first", if_none_match=True)
    with pytest.raises(BlobPreconditionFailed):
        blob_store.put("acme/lock", b"second", if_none_match=True)
    assert blob_store.get("acme/lock") == b"first"
    head = blob_store.head("acme/lock")
    assert head is not None and head.etag == info.etag


def test_compare_and_swap(blob_store: BlobStore) -> None:
    v1 = blob_store.put("acme/doc", b"v1")
    v2 = blob_store.put("acme/doc", b"v2", if_match=v1.etag)
    assert blob_store.get("acme/doc") == b"v2"
    with pytest.raises(BlobPreconditionFailed):
        blob_store.put("acme/doc", b"v3", if_match=v1.etag)  # stale etag
    assert blob_store.get("acme/doc") == b"v2"
    head = blob_store.head("acme/doc")
    assert head is not None and head.etag == v2.etag


def test_compare_and_swap_on_missing_key_fails(blob_store: BlobStore) -> None:
    v1 = blob_store.put("acme/doc", b"v1")
    blob_store.delete("acme/doc")
    with pytest.raises(BlobPreconditionFailed):
        blob_store.put("acme/doc", b"v2", if_match=v1.etag)
    assert blob_store.head("acme/doc") is None
    with pytest.raises(BlobPreconditionFailed):
        blob_store.put("acme/other", b"x", if_match="0" * 32)
    assert blob_store.head("acme/other") is None


def test_concurrent_create_only_has_one_winner(blob_store: BlobStore) -> None:
    n = 8
    barrier = threading.Barrier(n)
    wins: list[int] = []
    errors: list[BaseException] = []

    def attempt(i: int) -> None:
        barrier.wait()
        try:
            blob_store.put("acme/once", str(i).encode(), if_none_match=True)
            wins.append(i)
        except BlobPreconditionFailed:
            pass
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, "".join(traceback.format_exception(errors[0])) if errors else ""
    assert len(wins) == 1
    assert blob_store.get("acme/once") == str(wins[0]).encode()


def test_concurrent_cas_has_exactly_one_winner_per_round(blob_store: BlobStore) -> None:
    n, rounds = 8, 10
    blob_store.put("acme/cas", b"start")
    barrier = threading.Barrier(n + 1)
    results: dict[int, list[int]] = {r: [] for r in range(rounds)}
    errors: list[BaseException] = []
    etag: list[str] = [""]

    def contender(i: int) -> None:
        for r in range(rounds):
            barrier.wait()  # etag[0] is set for round r
            try:
                blob_store.put("acme/cas", f"{r}:{i}".encode(), if_match=etag[0])
                results[r].append(i)
            except BlobPreconditionFailed:
                pass
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)
            barrier.wait()  # round r done

    threads = [threading.Thread(target=contender, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for r in range(rounds):
        head = blob_store.head("acme/cas")
        assert head is not None
        etag[0] = head.etag
        barrier.wait()
        barrier.wait()
        assert len(results[r]) == 1, results[r]
        assert blob_store.get("acme/cas") == f"{r}:{results[r][0]}".encode()
    for t in threads:
        t.join()
    assert not errors, "".join(traceback.format_exception(errors[0])) if errors else ""


def cas_increment(store: BlobStore, key: str, times: int) -> None:
    for _ in range(times):
        while True:
            head = store.head(key)
            assert head is not None
            value = int(store.get(key))
            # A CAS on the etag read *before* the content guards the read-modify-write.
            try:
                store.put(key, str(value + 1).encode(), if_match=head.etag)
                break
            except BlobPreconditionFailed:
                continue


def test_cas_counter_loses_no_update(blob_store: BlobStore) -> None:
    blob_store.put("acme/counter", b"0")
    threads = [
        threading.Thread(target=cas_increment, args=(blob_store, "acme/counter", 8))
        for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert blob_store.get("acme/counter") == b"64"


# --------------------------------------------------------------------------------------------
# listing


@pytest.fixture
def tree(blob_store: BlobStore) -> BlobStore:
    for key in (
        "acme/a.md",
        "acme/b/c.md",
        "acme/b/d/e.md",
        "acme/b-x.md",
        "acme/z.md",
        "acme/.abstract.md",
        "acmex/other.md",
        "beta/a.md",
    ):
        blob_store.put(key, key.encode())
    return blob_store


def test_list_with_delimiter(tree: BlobStore) -> None:
    top = tree.list("acme/")
    assert keys(top.blobs) == ["acme/.abstract.md", "acme/a.md", "acme/b-x.md", "acme/z.md"]
    assert top.prefixes == ["acme/b/"]
    sub = tree.list("acme/b/")
    assert keys(sub.blobs) == ["acme/b/c.md"]
    assert sub.prefixes == ["acme/b/d/"]
    leaf = tree.list("acme/b/d/")
    assert keys(leaf.blobs) == ["acme/b/d/e.md"]
    assert leaf.prefixes == []
    info = tree.head("acme/a.md")
    assert info is not None
    listed = next(b for b in top.blobs if b.key == "acme/a.md")
    assert (listed.size, listed.etag) == (info.size, info.etag)


def test_list_without_delimiter(tree: BlobStore) -> None:
    everything = tree.list("acme/", delimiter=None)
    expected = sorted(
        [
            "acme/.abstract.md",
            "acme/a.md",
            "acme/b-x.md",
            "acme/b/c.md",
            "acme/b/d/e.md",
            "acme/z.md",
        ]
    )
    assert sorted(keys(everything.blobs)) == expected
    assert everything.prefixes == []


def test_iter_all_is_in_key_order(tree: BlobStore) -> None:
    got = keys(list(tree.iter_all("acme/")))
    # "acme/b-x.md" sorts before "acme/b/c.md" ('-' < '/'): key order, not directory order
    assert got == sorted(got)
    assert got == [
        "acme/.abstract.md",
        "acme/a.md",
        "acme/b-x.md",
        "acme/b/c.md",
        "acme/b/d/e.md",
        "acme/z.md",
    ]
    assert keys(list(tree.iter_all("acme/b/"))) == ["acme/b/c.md", "acme/b/d/e.md"]


def test_list_prefix_without_trailing_slash(tree: BlobStore) -> None:
    # S3 semantics: the prefix is a string prefix, grouped at the next delimiter.
    listing = tree.list("acme/b")
    assert keys(listing.blobs) == ["acme/b-x.md"]
    assert listing.prefixes == ["acme/b/"]


def test_list_root_and_account_isolation(tree: BlobStore) -> None:
    root = tree.list("")
    assert root.blobs == []
    assert root.prefixes == ["acme/", "acmex/", "beta/"]
    assert "acmex/other.md" not in keys(tree.list("acme/", delimiter=None).blobs)
    assert keys(list(tree.iter_all("beta/"))) == ["beta/a.md"]


def test_list_missing_prefix_is_empty(tree: BlobStore) -> None:
    assert tree.list("acme/nope/").blobs == []
    assert tree.list("acme/nope/").prefixes == []
    assert tree.list("ghost/", delimiter=None).blobs == []
    assert list(tree.iter_all("ghost/")) == []


def test_iter_all_without_hidden_leaves_out_dot_segments(blob_store: BlobStore) -> None:
    for key in (
        "acme/a.md",
        "acme/.a.md.attrs.json",
        "acme/.hid/x.md",
        "acme/b/.overview.md",
        "acme/b/c.md",
        "acme/b/.d/e.md",
        "acme/b/f.d/.g",
        "acme/b/f.d/h",
    ):
        blob_store.put(key, b"x")
    assert keys(list(blob_store.iter_all("acme/", hidden=False))) == [
        "acme/a.md",
        "acme/b/c.md",
        "acme/b/f.d/h",
    ]
    # Only segments after the prefix count: a prefix inside a dot directory lists it.
    assert keys(list(blob_store.iter_all("acme/.hid/", hidden=False))) == ["acme/.hid/x.md"]
    assert keys(list(blob_store.iter_all("acme/.h", hidden=False))) == []
    assert len(list(blob_store.iter_all("acme/"))) == 8  # the default lists everything


def test_head_many_answers_as_head_of_each_key_in_order(blob_store: BlobStore) -> None:
    names = [f"acme/h/{i:03d}.md" for i in range(40)]
    for i, name in enumerate(names):
        blob_store.put(name, b"x" * i)
    wanted = [*names[::-1], "acme/h/gone.md", names[5]]
    got = blob_store.head_many(wanted)
    assert got == [blob_store.head(key) for key in wanted]
    assert [None if info is None else (info.key, info.size) for info in got] == [
        (k, int(k[-6:-3])) for k in names[::-1]
    ] + [None, (names[5], 5)]
    assert blob_store.head_many([]) == []
    assert blob_store.head_many(["acme/h/gone.md"]) == [None]


def test_get_many_reads_in_order_with_none_for_missing_keys(blob_store: BlobStore) -> None:
    names = [f"acme/m/{i:03d}.md" for i in range(40)]
    for name in names:
        blob_store.put(name, name.encode() * 3)
    wanted = [*names[::-1], "acme/m/gone.md", names[5]]
    got = list(blob_store.get_many((k, 10) for k in wanted))
    assert got == [k.encode() * 3 for k in names[::-1]] + [None, names[5].encode() * 3]
    assert list(blob_store.get_many([])) == []


def test_get_many_draws_its_items_lazily_and_stops_when_closed(blob_store: BlobStore) -> None:
    names = [f"acme/l/{i:03d}.md" for i in range(60)]
    for name in names:
        blob_store.put(name, b"x")
    drawn: list[str] = []

    def items(size: int) -> Iterator[tuple[str, int]]:
        for name in names:
            drawn.append(name)
            yield name, size

    contents = blob_store.get_many(items(1))
    assert next(contents) == b"x"
    contents.close()
    assert len(drawn) <= 20  # read ahead a little at most, never the whole list
    # Expected sizes above the read-ahead byte bound: one read at a time.
    drawn.clear()
    big = blob_store.get_many(items(64 * 1024 * 1024))
    assert next(big) == b"x"
    assert len(drawn) <= 2
    big.close()


def test_put_many_writes_each_key(blob_store: BlobStore) -> None:
    blob_store.put("acme/p/b.md", b"old")
    before = blob_store.head("acme/p/b.md")
    infos = blob_store.put_many(
        [("acme/p/a.md", b"a"), ("acme/p/b.md", b"bb"), ("acme/p/q/.c.attrs.json", b"{}")]
    )
    assert [i.key for i in infos] == ["acme/p/a.md", "acme/p/b.md", "acme/p/q/.c.attrs.json"]
    assert [i.size for i in infos] == [1, 2, 2]
    for info in infos:
        head = blob_store.head(info.key)
        assert head is not None and (head.size, head.etag) == (info.size, info.etag)
    assert blob_store.get("acme/p/b.md") == b"bb"
    assert before is not None and infos[1].etag != before.etag
    with pytest.raises(ValueError):
        blob_store.put_many([("acme/p/d.md", b"1"), ("acme/p/d.md", b"2")])
    assert blob_store.head("acme/p/d.md") is None  # nothing written
    assert blob_store.put_many([]) == []


def test_writes_in_a_batch_are_visible_at_once_and_kept(blob_store: BlobStore) -> None:
    with blob_store.batch():
        blob_store.put("acme/w/a.md", b"a")
        assert blob_store.get("acme/w/a.md") == b"a"  # read your writes inside the block
        with blob_store.batch():  # nested blocks are one block
            blob_store.put("acme/w/sub/b.md", b"b")
        assert keys(list(blob_store.iter_all("acme/w/"))) == ["acme/w/a.md", "acme/w/sub/b.md"]
    with pytest.raises(RuntimeError), blob_store.batch():
        blob_store.put("acme/w/c.md", b"c")
        raise RuntimeError("the caller failed after writing")
    assert blob_store.get("acme/w/c.md") == b"c"  # what was written stays written


# --------------------------------------------------------------------------------------------
# copy and delete


def test_copy(blob_store: BlobStore) -> None:
    blob_store.put("acme/src.md", b"payload")
    blob_store.put("acme/dst/x.md", b"old")
    info = blob_store.copy("acme/src.md", "acme/dst/x.md")
    assert info.key == "acme/dst/x.md"
    assert info.size == 7
    assert blob_store.get("acme/dst/x.md") == b"payload"
    assert blob_store.get("acme/src.md") == b"payload"
    head = blob_store.head("acme/dst/x.md")
    assert head is not None and head.etag == info.etag
    info2 = blob_store.copy("acme/src.md", "acme/new/deep/y.md")
    assert blob_store.get(info2.key) == b"payload"


def test_delete(blob_store: BlobStore) -> None:
    blob_store.put("acme/gone.md", b"x")
    assert blob_store.delete("acme/gone.md") is True
    assert blob_store.head("acme/gone.md") is None
    with pytest.raises(BlobNotFound):
        blob_store.get("acme/gone.md")
    assert blob_store.delete("acme/gone.md") is False
    assert blob_store.put("acme/gone.md", b"back", if_none_match=True).size == 4


def test_delete_prunes_empty_directories(blob_store: BlobStore) -> None:
    blob_store.put("acme/keep.md", b"k")
    blob_store.put("acme/x/y/z/leaf.md", b"l")
    blob_store.put("acme/x/sibling.md", b"s")
    assert blob_store.delete("acme/x/y/z/leaf.md")
    listing = blob_store.list("acme/x/")
    assert keys(listing.blobs) == ["acme/x/sibling.md"]
    assert listing.prefixes == []
    assert blob_store.delete("acme/x/sibling.md")
    top = blob_store.list("acme/")
    assert keys(top.blobs) == ["acme/keep.md"]
    assert top.prefixes == []
    assert blob_store.delete("acme/keep.md")
    assert blob_store.list("").prefixes == []
    # the store still works after pruning everything
    blob_store.put("acme/x/y/again.md", b"a")
    assert blob_store.get("acme/x/y/again.md") == b"a"


def test_concurrent_writes_and_deletes_in_one_directory(blob_store: BlobStore) -> None:
    # Deletes prune empty directories while other threads create files in them.
    errors: list[BaseException] = []

    def churn(i: int) -> None:
        try:
            for j in range(15):
                key = f"acme/hot/dir/{i}-{j}.md"
                blob_store.put(key, b"x")
                assert blob_store.get(key) == b"x"
                assert blob_store.delete(key)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=churn, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, "".join(traceback.format_exception(errors[0])) if errors else ""
    assert blob_store.list("acme/", delimiter=None).blobs == []


# --------------------------------------------------------------------------------------------
# local adapter specifics


@pytest.mark.parametrize(
    "key",
    [
        "",
        "/abs/key",
        "acme/../etc",
        "..",
        "acme/./x",
        "acme//x",
        "acme/x/",
        "acme\\x",
        "acme/x\x00",
        ".~skald/locks/00.lock",
        "acme/.~skald-tmp-abc",
    ],
)
def test_local_rejects_bad_keys(tmp_path: Path, key: str) -> None:
    store = LocalBlobStore(tmp_path)
    with pytest.raises(ValueError):
        store.put(key, b"x")
    with pytest.raises(ValueError):
        store.get(key)
    with pytest.raises(ValueError):
        store.head(key)
    with pytest.raises(ValueError):
        store.delete(key)


def test_local_rejects_bad_prefixes(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    for prefix in ("/etc/", "acme/../", "../", "acme//", "a\\b/"):
        with pytest.raises(ValueError):
            store.list(prefix)
        with pytest.raises(ValueError):
            list(store.iter_all(prefix))


def test_local_hides_temp_and_lock_files(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    store.put("acme/dir/real.md", b"x")
    # a temp file left behind by a crash mid-write
    (tmp_path / "acme" / "dir" / ".~skald-tmp-deadbeef").write_bytes(b"partial")
    assert (tmp_path / ".~skald" / "locks").is_dir()
    assert store.list("").prefixes == ["acme/"]
    assert keys(store.list("acme/dir/").blobs) == ["acme/dir/real.md"]
    assert keys(list(store.iter_all(""))) == ["acme/dir/real.md"]
    assert keys(store.list("", delimiter=None).blobs) == ["acme/dir/real.md"]
    assert [p.name for p in (tmp_path / "acme" / "dir").iterdir() if "tmp" in p.name] == [
        ".~skald-tmp-deadbeef"
    ]
    # no temp file survives a successful write
    store.put("acme/dir/real.md", b"y")
    names = sorted(p.name for p in (tmp_path / "acme" / "dir").iterdir())
    assert names == [".~skald-tmp-deadbeef", "real.md"]


def test_local_file_directory_conflict(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    store.put("acme/a", b"file")
    with pytest.raises(BlobPreconditionFailed):
        store.put("acme/a/b", b"under a file")
    store.put("acme/d/e", b"x")
    with pytest.raises(BlobPreconditionFailed):
        store.put("acme/d", b"over a directory")
    assert store.get("acme/a") == b"file"
    assert store.get("acme/d/e") == b"x"
    assert store.delete("acme/d") is False
    assert keys(list(store.iter_all("acme/"))) == ["acme/a", "acme/d/e"]


def test_local_etags_never_repeat_across_versions(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    seen = {store.put("acme/k", b"same").etag}
    for _ in range(60):  # same size, same content, fast: inode reuse must not repeat an etag
        seen.add(store.put("acme/k", b"same").etag)
    assert len(seen) == 61


def test_local_ignores_symlinks(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"secret")
    store = LocalBlobStore(tmp_path / "root")
    (tmp_path / "root" / "acme").mkdir()
    os.symlink(outside, tmp_path / "root" / "acme" / "link.md")
    assert store.head("acme/link.md") is None
    with pytest.raises(BlobNotFound):
        store.get("acme/link.md")
    assert store.list("acme/").blobs == []


def _process_increments(root: str, times: int) -> None:
    store = LocalBlobStore(Path(root))
    cas_increment(store, "acme/counter", times)
    store.close()


def test_local_cas_is_safe_across_processes(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    store.put("acme/counter", b"0")
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_process_increments, args=(str(tmp_path), 15)) for _ in range(3)]
    for p in procs:
        p.start()
    cas_increment(store, "acme/counter", 15)  # and this process at the same time
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    assert store.get("acme/counter") == b"60"


def test_local_put_many_holds_no_lock_while_it_flushes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer, even of a key in the group, is not held up by the group's flush; the
    group's version, renamed after it, is the later one (its date strictly after)."""
    from skald.adapters.local.blobs import blobstore

    flushing, release = threading.Event(), threading.Event()
    real_fsync = os.fsync

    def slow_fsync(fd: int) -> None:
        if ".~skald-tmp" in os.readlink(f"/proc/self/fd/{fd}"):
            flushing.set()
            assert release.wait(10)
        real_fsync(fd)

    monkeypatch.setattr(blobstore, "can_sync_filesystem", lambda: False)
    monkeypatch.setattr(os, "fsync", slow_fsync)  # the os module the store calls
    store = LocalBlobStore(tmp_path)
    group = threading.Thread(
        target=store.put_many, args=([(f"acme/g/{i}.md", b"group") for i in range(64)],)
    )
    group.start()
    assert flushing.wait(10)
    other = threading.Thread(target=store.put, args=("acme/g/0.md", b"other"))
    monkeypatch.setattr(os, "fsync", real_fsync)  # the other writer's own flush
    other.start()
    other.join(5)
    done_while_flushing = not other.is_alive()
    release.set()
    group.join(10)
    assert done_while_flushing  # with every stripe held it would wait for the group
    assert store.get("acme/g/0.md") == b"group"
    assert all(store.get(f"acme/g/{i}.md") == b"group" for i in range(64))


def test_local_batch_syncs_each_directory_once_at_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from skald.adapters.local.blobs import blobstore

    synced: list[str] = []
    monkeypatch.setattr(blobstore, "fsync_dir", synced.append)
    store = LocalBlobStore(tmp_path)
    store.put("acme/x/one.md", b"1")  # outside a block: synced at once
    assert synced and all(os.path.isdir(d) for d in synced)
    synced.clear()
    with store.batch():
        for i in range(20):
            store.put(f"acme/y/{i}.md", b"y")
            store.put(f"acme/y/.{i}.md.attrs.json", b"{}")
        other = threading.Thread(target=store.put, args=("acme/z/other.md", b"z"))
        other.start()
        other.join()  # another thread's write is not part of this block
        # (it created acme/z: the parent's entry is synced too)
        assert synced == [str(tmp_path / "acme" / "z"), str(tmp_path / "acme")]
    assert synced[2:] == [str(tmp_path / "acme" / "y"), str(tmp_path / "acme")]


def _spy_flushes(monkeypatch: pytest.MonkeyPatch, events: list[str]) -> None:
    from skald.adapters.local import durable
    from skald.adapters.local.blobs import blobstore

    real_fsync, real_replace = os.fsync, os.replace
    real_syncfs = durable.sync_filesystem

    def fsync(fd: int) -> None:
        events.append("fsync " + os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src: str, dst: str) -> None:
        events.append("rename " + os.path.basename(dst))
        real_replace(src, dst)

    def syncfs(path: str) -> None:
        events.append("syncfs")
        real_syncfs(path)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(blobstore, "sync_filesystem", syncfs)


@pytest.fixture
def flushes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The local store's flushes and renames, in order, as they happen."""
    events: list[str] = []
    _spy_flushes(monkeypatch, events)
    return events


@pytest.fixture
def needs_syncfs() -> None:
    from skald.adapters.local.durable import can_sync_filesystem

    if not can_sync_filesystem():
        pytest.skip("no syncfs(2) on this system")


def test_local_put_many_flushes_every_file_before_the_first_rename(
    tmp_path: Path, flushes: list[str]
) -> None:
    store = LocalBlobStore(tmp_path)
    store.put_many(
        [("acme/d/a.md", b"a"), ("acme/d/.a.md.attrs.json", b"{}"), ("acme/e/b.md", b"b")]
    )
    files = [e for e in flushes if e.startswith(("fsync .~skald", "rename"))]
    assert [e.split()[0] for e in files] == ["fsync"] * 3 + ["rename"] * 3
    assert files[3:] == ["rename a.md", "rename .a.md.attrs.json", "rename b.md"]


def test_local_put_many_that_fails_part_way_keeps_what_it_renamed(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    store.put("acme/dir/x.md", b"x")  # "acme/dir" is a directory: it cannot become a file
    with pytest.raises(BlobPreconditionFailed):
        store.put_many([("acme/a.md", b"a"), ("acme/dir", b"no")])
    assert store.get("acme/a.md") == b"a"  # complete, renamed before the failure
    assert keys(list(store.iter_all(""))) == ["acme/a.md", "acme/dir/x.md"]
    assert not [p for p in (tmp_path / "acme").iterdir() if p.name.startswith(".~skald")]


@pytest.mark.usefixtures("needs_syncfs")
def test_local_put_many_of_many_files_flushes_them_with_one_syncfs(
    tmp_path: Path, flushes: list[str]
) -> None:
    store = LocalBlobStore(tmp_path)
    items = [(f"acme/d/{i}.md", f"file {i}".encode()) for i in range(10)]
    store.put_many(items)
    files = [e for e in flushes if not e.startswith("fsync ") or ".~skald-tmp" in e]
    # No file is flushed on its own: one syncfs covers all ten, before the first rename.
    assert files == ["syncfs"] + [f"rename {i}.md" for i in range(10)]
    assert [store.get(key) for key, _ in items] == [data for _, data in items]
    assert not [p for p in (tmp_path / "acme" / "d").iterdir() if p.name.startswith(".~")]


def test_local_put_many_without_syncfs_flushes_each_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flushes: list[str]
) -> None:
    from skald.adapters.local.blobs import blobstore

    monkeypatch.setattr(blobstore, "can_sync_filesystem", lambda: False)
    store = LocalBlobStore(tmp_path)
    store.put_many([(f"acme/d/{i}.md", b"x") for i in range(10)])
    files = [e for e in flushes if ".~skald-tmp" in e or e.startswith(("rename", "syncfs"))]
    assert [e.split()[0] for e in files] == ["fsync"] * 10 + ["rename"] * 10


@pytest.mark.usefixtures("needs_syncfs")
def test_local_put_many_keeps_a_file_on_another_file_system_flushed_on_its_own(
    tmp_path: Path, flushes: list[str]
) -> None:
    store = LocalBlobStore(tmp_path)
    store._dev = -1  # as if the tree's root were on another device than every file
    store.put_many([(f"acme/d/{i}.md", b"x") for i in range(8)])
    kinds = [e.split()[0] for e in flushes if ".~skald-tmp" in e or e.startswith("rename")]
    assert kinds == ["fsync"] * 8 + ["rename"] * 8


@pytest.mark.usefixtures("needs_syncfs")
def test_local_put_many_whose_syncfs_fails_renames_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from skald.adapters.local.blobs import blobstore

    def failing(path: str) -> None:
        raise OSError(5, "Input/output error")

    store = LocalBlobStore(tmp_path)
    store.put("acme/d/0.md", b"old")
    monkeypatch.setattr(blobstore, "sync_filesystem", failing)
    with pytest.raises(OSError, match="Input/output"):
        store.put_many([(f"acme/d/{i}.md", b"new") for i in range(9)])
    assert store.get("acme/d/0.md") == b"old"
    assert keys(list(store.iter_all(""))) == ["acme/d/0.md"]  # no new key, no temporary file
    assert sorted(p.name for p in (tmp_path / "acme" / "d").iterdir()) == ["0.md"]


@pytest.mark.usefixtures("needs_syncfs")
def test_local_batch_over_many_directories_ends_with_one_syncfs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flushes: list[str]
) -> None:
    from skald.adapters.local.blobs import blobstore

    synced: list[str] = []
    monkeypatch.setattr(blobstore, "fsync_dir", synced.append)
    store = LocalBlobStore(tmp_path)
    store.put("acme/keep.md", b"k")
    synced.clear()
    with store.batch():
        for i in range(9):
            store.put(f"acme/d{i}/f.md", b"x")
        assert "syncfs" not in flushes
    assert flushes.count("syncfs") == 1 and synced == []
    with store.batch():  # a few directories: a fsync each is cheaper
        store.put("acme/d0/g.md", b"y")
    assert flushes.count("syncfs") == 1 and synced == [str(tmp_path / "acme" / "d0")]


def test_sync_filesystem_flushes_or_says_why_not(tmp_path: Path) -> None:
    from skald.adapters.local.durable import can_sync_filesystem, sync_filesystem

    if not can_sync_filesystem():
        with pytest.raises(OSError):
            sync_filesystem(tmp_path)
        return
    sync_filesystem(tmp_path)  # a real syncfs(2) of the test's file system
    with pytest.raises(FileNotFoundError):
        sync_filesystem(tmp_path / "missing")
