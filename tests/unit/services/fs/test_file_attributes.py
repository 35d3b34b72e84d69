"""A file's attributes file (tags, creation time) on the real local blob store: a new file
has none until it needs one, and its creation time survives rewrites, moves and copies."""

from __future__ import annotations

from pathlib import Path

import pytest

from skald.adapters.local.blobs.blobstore import LocalBlobStore
from skald.domain.access.identity import Identity
from skald.domain.paths.names import attr_created, attrs_key_of, undated_files
from skald.domain.paths.uri import VikingURI
from skald.services.fs.filesystem import VikingFS
from skald.services.fs.transfer import transfer

ME = Identity("acme", "ann", "user")
DOCS = VikingURI("resources", ("docs",))
NOW = 1234.5


@pytest.fixture
def fs(tmp_path: Path) -> VikingFS:
    fs = VikingFS(LocalBlobStore(tmp_path), max_write_bytes=1 << 20, clock=lambda: NOW)
    fs.mkdir(ME, DOCS, None)
    return fs


def mtime(fs: VikingFS, uri: VikingURI) -> float:
    info = fs.file_info(ME, uri)
    assert info is not None
    return info.modified


def test_a_new_file_has_no_attributes_file_and_its_mtime_dates_it(fs: VikingFS) -> None:
    uri = DOCS.child("a.md")
    fs.write(ME, uri, b"one", "replace")
    assert fs.blobs.head(fs.attrs_key(ME, uri, False)) is None
    assert fs.tags_and_created(ME, uri, False, mtime(fs, uri)) == ([], mtime(fs, uri))
    fs.write(ME, DOCS.child("t.md"), b"tagged", "replace", tags=["k=v"])
    assert fs.read_attrs(ME, DOCS.child("t.md"), False) == {"created_at": NOW, "tags": ["k=v"]}


def test_the_first_rewrite_writes_the_creation_time_down(fs: VikingFS) -> None:
    uri = DOCS.child("a.md")
    fs.write(ME, uri, b"one", "replace")
    first = mtime(fs, uri)
    fs.write(ME, uri, b"two", "append")
    assert mtime(fs, uri) > first
    assert fs.read_attrs(ME, uri, False) == {"created_at": first}
    fs.write(ME, uri, b"three", "replace", tags=["k=v"])
    assert fs.read_attrs(ME, uri, False) == {"created_at": first, "tags": ["k=v"]}


def test_tagging_a_file_that_was_never_rewritten_keeps_its_creation_time(fs: VikingFS) -> None:
    uri = DOCS.child("a.md")
    fs.write(ME, uri, b"one", "replace")
    assert fs.set_tags(ME, uri, ["k=v"], "replace", False) == [str(uri)]
    assert fs.read_attrs(ME, uri, False) == {"created_at": mtime(fs, uri), "tags": ["k=v"]}


class NotingDeletes(LocalBlobStore):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.deleted: list[str] = []

    def delete(self, key: str) -> bool:
        self.deleted.append(key)
        return super().delete(key)


def test_a_removal_deletes_a_files_attributes_before_the_file(tmp_path: Path) -> None:
    """A removal cut short must not leave attributes behind to date or tag the next file of
    that name, which a write does not look for (a round trip per new file on S3)."""
    store = NotingDeletes(tmp_path)
    fs = VikingFS(store, max_write_bytes=1 << 20, clock=lambda: NOW)
    names = ["-a.md", "b.md", "sub/-c.md", "sub/d.md"]
    for name in names:  # "-" sorts before "." in a listing: the file would come first
        fs.write(ME, DOCS.child(*name.split("/")), b"x", "replace", tags=["k=v"])
        fs.write(ME, DOCS.child(*name.split("/")), b"y", "replace")
    fs.rm(ME, DOCS.child("-a.md"), False)
    transfer(fs, ME, DOCS.child("sub"), DOCS.child("moved"), move=True)
    fs.rm(ME, DOCS, True)
    for name in ["-a.md", "b.md", "sub/-c.md", "sub/d.md", "moved/-c.md", "moved/d.md"]:
        uri = DOCS.child(*name.split("/"))
        file_at = store.deleted.index(fs.key(ME, uri))
        assert store.deleted.index(fs.attrs_key(ME, uri, False)) < file_at, name
    assert fs.blobs.head(fs.attrs_key(ME, DOCS.child("b.md"), False)) is None


def test_moves_and_copies_keep_creation_times_the_copy_mtime_would_lose(fs: VikingFS) -> None:
    fs.write(ME, DOCS.child("sub", "x.md"), b"x", "replace")
    fs.write(ME, DOCS.child("sub", "y.md"), b"y", "replace", tags=["k=v"])
    fs.write(ME, DOCS.child("z.md"), b"z", "replace")
    x, z = mtime(fs, DOCS.child("sub", "x.md")), mtime(fs, DOCS.child("z.md"))
    transfer(fs, ME, DOCS.child("sub"), DOCS.child("sub2"), move=True)
    transfer(fs, ME, DOCS.child("z.md"), DOCS.child("z2.md"), move=False)
    assert fs.read_attrs(ME, DOCS.child("sub2", "x.md"), False) == {"created_at": x}
    assert fs.read_attrs(ME, DOCS.child("sub2", "y.md"), False) == {
        "created_at": NOW,
        "tags": ["k=v"],
    }
    assert fs.read_attrs(ME, DOCS.child("z2.md"), False) == {"created_at": z}
    assert fs.blobs.head(fs.attrs_key(ME, DOCS.child("z.md"), False)) is None  # the source
    assert fs.file_info(ME, DOCS.child("sub", "x.md")) is None


def test_the_files_of_a_subtree_without_attributes() -> None:
    keys = [
        "a/x.md",
        "a/.x.md.attrs.json",
        "a/y.md",
        "a/.abstract.md",
        "a/.attrs.json",
        "a/b/z.md",
        "a/.y.md.parsed.json",
        "a/.meta.json",
        "top",
    ]
    assert sorted(undated_files(keys)) == ["a/b/z.md", "a/y.md", "top"]
    assert attrs_key_of("a/b/z.md") == "a/b/.z.md.attrs.json"
    assert attrs_key_of("top") == ".top.attrs.json"
    assert attr_created({"created_at": 5}, 9.0) == 5.0
    assert attr_created({"created_at": "soon"}, 9.0) == 9.0
