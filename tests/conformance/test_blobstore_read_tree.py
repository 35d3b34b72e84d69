"""BlobStore.read_tree and walk_keys conformance: every adapter walks a tree in key order and
enters only the folders the caller admits; read_tree reads only the objects the caller admits,
within a byte budget."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from skald.adapters.local.blobs.blobstore import LocalBlobStore
from skald.domain.ops.scan_budget import ScanBudget
from skald.ports import BlobStore

PLENTY = ScanBudget(1 << 30, 1 << 30)
KEYS = (
    "acme/a.md",
    "acme/b/c.md",
    "acme/b/d/e.md",
    "acme/b/.hidden/x.md",
    "acme/b-x.md",
    "acme/z.md",
    "acme/.abstract.md",
    "acme/b/.attrs.json",
    "acmex/other.md",
    "beta/a.md",
)


@pytest.fixture
def tree(blob_store: BlobStore) -> BlobStore:
    for key in KEYS:
        blob_store.put(key, key.encode())
    return blob_store


def everything(_: str) -> bool:
    return True


def test_reads_every_object_below_the_prefix_in_key_order(tree: BlobStore) -> None:
    got = list(tree.read_tree("acme/", enter=everything, admit=None, budget=PLENTY))
    # Dot segments below the prefix are left out, sidecars and hidden folders alike.
    assert got == [
        (k, k.encode())
        for k in ("acme/a.md", "acme/b-x.md", "acme/b/c.md", "acme/b/d/e.md", "acme/z.md")
    ]
    assert list(tree.read_tree("acme/b/", enter=everything, admit=None, budget=PLENTY)) == [
        ("acme/b/c.md", b"acme/b/c.md"),
        ("acme/b/d/e.md", b"acme/b/d/e.md"),
    ]
    assert list(tree.read_tree("ghost/", enter=everything, admit=None, budget=PLENTY)) == []
    assert [k for k, _ in tree.read_tree("", enter=everything, admit=None, budget=PLENTY)] == [
        "acme/a.md",
        "acme/b-x.md",
        "acme/b/c.md",
        "acme/b/d/e.md",
        "acme/z.md",
        "acmex/other.md",
        "beta/a.md",
    ]


def test_walk_keys_names_the_same_objects_without_reading_them(tree: BlobStore) -> None:
    assert list(tree.walk_keys("acme/", enter=everything)) == [
        "acme/a.md",
        "acme/b-x.md",
        "acme/b/c.md",
        "acme/b/d/e.md",
        "acme/z.md",
    ]
    assert list(tree.walk_keys("acme/", enter=lambda f: f != "acme/b/d")) == [
        "acme/a.md",
        "acme/b-x.md",
        "acme/b/c.md",
        "acme/z.md",
    ]
    assert list(tree.walk_keys("ghost/", enter=everything)) == []
    with pytest.raises(ValueError):
        list(tree.walk_keys("acme/a", enter=everything))


def test_enter_leaves_subtrees_out_and_is_asked_parents_first(tree: BlobStore) -> None:
    asked: list[str] = []

    def enter(folder: str) -> bool:
        asked.append(folder)
        return folder != "acme/b/d"

    got = [k for k, _ in tree.read_tree("acme/", enter=enter, admit=None, budget=PLENTY)]
    assert got == ["acme/a.md", "acme/b-x.md", "acme/b/c.md", "acme/z.md"]
    assert asked == ["acme/b", "acme/b/d"]  # never the prefix's own folder, never a dot one
    asked.clear()

    def enter_none(folder: str) -> bool:
        asked.append(folder)
        return False

    got = [k for k, _ in tree.read_tree("acme/", enter=enter_none, admit=None, budget=PLENTY)]
    assert got == ["acme/a.md", "acme/b-x.md", "acme/z.md"]
    assert asked == ["acme/b"]  # a folder left out is not looked into


def test_admit_is_asked_of_each_object_before_it_is_read(tree: BlobStore) -> None:
    asked: list[str] = []

    def admit(key: str) -> bool:
        asked.append(key)
        return key.endswith("z.md") or key.endswith("c.md")

    got = [k for k, _ in tree.read_tree("acme/", enter=everything, admit=admit, budget=PLENTY)]
    assert got == ["acme/b/c.md", "acme/z.md"]
    assert asked == ["acme/a.md", "acme/b-x.md", "acme/b/c.md", "acme/b/d/e.md", "acme/z.md"]


def test_an_object_gone_before_its_read_is_left_out(tree: BlobStore) -> None:
    def admit(key: str) -> bool:
        if key == "acme/b/c.md":
            tree.delete(key)  # between the listing (or the scan) and the read
        return True

    got = [k for k, _ in tree.read_tree("acme/", enter=everything, admit=admit, budget=PLENTY)]
    assert got == ["acme/a.md", "acme/b-x.md", "acme/b/d/e.md", "acme/z.md"]


def test_the_budget_skips_what_is_too_large_and_goes_on(blob_store: BlobStore) -> None:
    sizes = {
        "acme/1.bin": 10,
        "acme/2.bin": 300_000,
        "acme/3.bin": 70_000,
        "acme/4.bin": 50,
        "acme/5.bin": 100_000,
        "acme/6.bin": 0,
    }
    for key, size in sizes.items():
        blob_store.put(key, (key.encode() * (size // 10 + 1))[:size])
    budget = ScanBudget(file_bytes=100_000, total_bytes=170_050)
    got = dict(blob_store.read_tree("acme/", enter=everything, admit=None, budget=budget))
    # 2 is over the per-file bound; 5 fits that bound exactly but no longer the total, which
    # 1, 3 and 4 used; 6 is empty and always fits.
    assert sorted(got) == ["acme/1.bin", "acme/3.bin", "acme/4.bin", "acme/6.bin"]
    for key, data in got.items():
        assert (
            len(data) == sizes[key]
            and data == (key.encode() * (sizes[key] // 10 + 1))[: sizes[key]]
        )
    assert budget.skipped == 2 and budget.total_bytes == 170_050 - 70_060
    # An object exactly at what is left is read.
    exact = ScanBudget(file_bytes=300_000, total_bytes=300_000)
    got = dict(
        blob_store.read_tree(
            "acme/", enter=everything, admit=lambda k: k == "acme/2.bin", budget=exact
        )
    )
    assert len(got["acme/2.bin"]) == 300_000 and exact.total_bytes == 0 and not exact.skipped


def test_closing_stops_the_reads(blob_store: BlobStore) -> None:
    names = [f"acme/l/{i:03d}.md" for i in range(60)]
    for name in names:
        blob_store.put(name, b"x")
    admitted: list[str] = []

    def admit(key: str) -> bool:
        admitted.append(key)
        return True

    contents = blob_store.read_tree("acme/", enter=everything, admit=admit, budget=PLENTY)
    assert next(contents) == ("acme/l/000.md", b"x")
    contents.close()
    assert len(admitted) <= 20  # a remote store reads ahead a little, never the whole tree


def test_the_prefix_is_a_folder(blob_store: BlobStore) -> None:
    with pytest.raises(ValueError):
        list(blob_store.read_tree("acme/a", enter=everything, admit=None, budget=PLENTY))


# --------------------------------------------------------------------------------------------
# local specifics


def test_local_reads_neither_symlinks_nor_other_files(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    store.put("acme/real.md", b"real")
    outside = tmp_path / "secret.md"
    outside.write_text("secret")
    os.symlink(outside, tmp_path / "blobs" / "acme" / "link.md")
    os.symlink(tmp_path, tmp_path / "blobs" / "acme" / "linkdir")
    os.mkfifo(tmp_path / "blobs" / "acme" / "pipe.md")
    got = list(store.read_tree("acme/", enter=everything, admit=None, budget=PLENTY))
    assert got == [("acme/real.md", b"real")]


def test_local_leaves_out_a_file_that_became_a_fifo(tmp_path: Path) -> None:
    # A name replaced after the scan: the read must not block.
    store = LocalBlobStore(tmp_path / "blobs")
    store.put("acme/a.md", b"a")
    store.put("acme/b.md", b"b")
    path = tmp_path / "blobs" / "acme" / "b.md"

    def admit(key: str) -> bool:
        if key == "acme/b.md":
            path.unlink()
            os.mkfifo(path)
        return True

    got = list(store.read_tree("acme/", enter=everything, admit=admit, budget=PLENTY))
    assert got == [("acme/a.md", b"a")]
    store.put("acme/c.md", b"")  # an empty file is read, as empty
    assert list(
        store.read_tree("acme/", enter=everything, admit=lambda k: k != "acme/b.md", budget=PLENTY)
    ) == [("acme/a.md", b"a"), ("acme/c.md", b"")]
