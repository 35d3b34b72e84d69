"""A directory's refresh reads what it needs in few round trips, whatever it holds: on S3 and
OpenSearch each call is a request. Its files' abstracts come from one index request, its
folders' markers are checked together and their sidecars read together, its own marker is
looked up once to find it and once to write it, its attributes are read once, and the
refreshed records' stored vectors come back in one request. The listings stay as they were.
A folder reached only from below whose listing already shows its refreshed children is not
rewritten, and a job cut off between a folder and its parent heals on its retry."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skald.compose.composition import Composition
from skald.config import Settings
from skald.domain.access.identity import Identity
from skald.domain.paths.names import ABSTRACT, DIR_ATTRS, OVERVIEW
from skald.domain.paths.uri import VikingURI, parse_uri
from tests.support.compose import local_services
from tests.support.semantic_jobs import written_job

ME = Identity("acme", "ann", "user")
ROOT = "viking://resources/proj"
LEAVES = ("docs", "api", "notes")


class Counting:
    """A port whose calls are noted, by name and first argument."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.calls: list[tuple[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        if not callable(target):
            return target

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, args[0] if args else None))
            return target(*args, **kwargs)

        return call

    def named(self, name: str) -> list[Any]:
        return [arg for n, arg in self.calls if n == name]


def uri(text: str) -> VikingURI:
    return parse_uri(text, user_id=ME.user_id)


def files(per_leaf: int) -> Iterator[tuple[str, bytes]]:
    yield f"{ROOT}/README.md", b"# Project\n\nWhat the project is for.\n"
    for leaf in LEAVES:
        for i in range(per_leaf):
            yield (
                f"{ROOT}/{leaf}/page{i:02d}.md",
                f"# {leaf} page {i}\n\nAbout {leaf} topic number {i}.\n".encode(),
            )


@pytest.fixture
def container(tmp_path: Path) -> Iterator[Composition]:
    c = local_services(Settings(backend="local", data_dir=tmp_path / "data"))
    yield c
    c.close()


def counted(c: Composition) -> tuple[Counting, Counting]:
    blobs, index = Counting(c.semantic.fs.blobs), Counting(c.semantic.index)
    c.semantic.fs.blobs = blobs
    c.semantic.index = index
    return blobs, index


def refreshed(c: Composition, per_leaf: int) -> tuple[Counting, Counting, list[VikingURI]]:
    """Indexes the tree, then refreshes it again in full (its leaves and their ancestors
    named, as when their own entries change), with every blob and index call counted."""
    c.semantic.process(written_job(c, ME, files(per_leaf)))
    blobs, index = counted(c)
    named = [*(f"{ROOT}/{leaf}" for leaf in LEAVES), ROOT, "viking://resources"]
    return blobs, index, c.semantic.refresh_directories(ME, {uri(u): 1 for u in named})


@pytest.mark.parametrize("per_leaf", [3, 20])
def test_a_refresh_costs_the_same_few_calls_per_directory_whatever_it_lists(
    container: Composition, per_leaf: int
) -> None:
    blobs, index, done = refreshed(container, per_leaf)
    assert [str(d) for d in done] == [
        *(f"{ROOT}/{leaf}" for leaf in LEAVES),
        ROOT,
        "viking://resources",
    ]
    # No lookup per file: one request for the files a directory lists, one for the vectors.
    assert index.named("head") == [] and index.named("get") == []
    assert len(index.named("heads")) == 4  # the three leaves and the project's README
    assert len(index.named("get_many")) == 1
    for d in done:
        key = container.fs.key(ME, d)
        assert blobs.named("head").count(f"{key}/{ABSTRACT}") == 2, d  # found, then written
        assert blobs.named("get").count(f"{key}/{DIR_ATTRS}") == 1, d
        assert blobs.named("get").count(f"{key}/{OVERVIEW}") == 1, d
    # A listing checks its subfolders' markers together: the project's three, resources' one.
    assert blobs.named("head_many") == [
        [f"{container.fs.key(ME, uri(f'{ROOT}/{leaf}'))}/{ABSTRACT}" for leaf in sorted(LEAVES)],
        [f"{container.fs.key(ME, uri(ROOT))}/{ABSTRACT}"],
    ]
    folders = blobs.named("get_many")
    assert len(folders) == 2  # the project's three folders, then resources' one
    assert [key for key, _ in folders[0]] == [
        f"{container.fs.key(ME, uri(f'{ROOT}/{leaf}'))}/{ABSTRACT}" for leaf in sorted(LEAVES)
    ]
    calls_per_directory = len(blobs.calls) / len(done)
    assert calls_per_directory <= 9, blobs.calls


def test_the_listings_name_each_entry_with_its_abstract(container: Composition) -> None:
    refreshed(container, 4)
    fs, index = container.fs, container.semantic.index
    for leaf in LEAVES:
        folder = uri(f"{ROOT}/{leaf}")
        overview = fs.dir_sidecar(ME, folder, OVERVIEW) or ""
        for i in range(4):
            head = index.head(ME.account_id, f"{ROOT}/{leaf}/page{i:02d}.md")
            assert head is not None and head.abstract
            assert f"- page{i:02d}.md: {head.abstract}" in overview
    project = fs.dir_sidecar(ME, uri(ROOT), OVERVIEW) or ""
    for leaf in LEAVES:
        abstract = " ".join((fs.dir_sidecar(ME, uri(f"{ROOT}/{leaf}"), ABSTRACT) or "").split())
        assert abstract and f"- {leaf}/: {abstract}" in project
    readme = index.head(ME.account_id, f"{ROOT}/README.md")
    assert readme is not None and f"- README.md: {readme.abstract}" in project
    # The refreshed records carry their directory's text and a vector.
    for name, level in ((ABSTRACT, 0), (OVERVIEW, 1)):
        [rec] = index.get(ME.account_id, f"{ROOT}/{name}")
        assert rec.level == level and rec.vector is not None


def sidecars(c: Composition, d: str) -> tuple[str | None, str | None]:
    return (c.fs.dir_sidecar(ME, uri(d), ABSTRACT), c.fs.dir_sidecar(ME, uri(d), OVERVIEW))


def test_a_listing_that_shows_its_children_already_is_not_rewritten(container: Composition) -> None:
    container.semantic.process(written_job(container, ME, files(3)))
    before = {d: sidecars(container, d) for d in (ROOT, "viking://resources")}
    blobs, index = counted(container)
    done = container.semantic.refresh_directories(ME, {uri(f"{ROOT}/{leaf}"): 1 for leaf in LEAVES})
    assert [str(d) for d in done] == [
        *(f"{ROOT}/{leaf}" for leaf in LEAVES),
        ROOT,
        "viking://resources",
    ]
    for d, kept in before.items():
        key = container.fs.key(ME, uri(d))
        assert sidecars(container, d) == kept
        assert f"{key}/" not in blobs.named("list")  # not listed again
        assert not any(k.startswith(f"{key}/.") for k in blobs.named("put")), d
    assert len(index.named("heads")) == 3  # the leaves' files only
    # Their records are written all the same, from the sidecars they hold.
    [written] = index.named("replace_many")
    assert written == ME.account_id
    for name, level in ((ABSTRACT, 0), (OVERVIEW, 1)):
        [rec] = container.semantic.index.get(ME.account_id, f"{ROOT}/{name}")
        assert rec.vector is not None and before[ROOT][level] is not None
        assert rec.abstract == before[ROOT][0]


def test_a_childs_new_abstract_reaches_the_listings_above_it(container: Composition) -> None:
    container.semantic.process(written_job(container, ME, files(3)))
    resources = sidecars(container, "viking://resources")
    # A first file by name: the folder's L0 names its count and its first file.
    job = written_job(
        container, ME, [(f"{ROOT}/docs/aaa.md", b"# Aardvarks\n\nAll about aardvarks.\n")]
    )
    blobs, _ = counted(container)
    container.semantic.process(job)
    # The project, checked and then rebuilt, read its listing and attributes once each.
    key = container.fs.key(ME, uri(ROOT))
    assert blobs.named("get").count(f"{key}/{OVERVIEW}") == 1
    assert blobs.named("get").count(f"{key}/{DIR_ATTRS}") == 1
    docs_abstract, _ = sidecars(container, f"{ROOT}/docs")
    assert docs_abstract is not None and "4 files" in docs_abstract
    _, project = sidecars(container, ROOT)
    assert f"- docs/: {' '.join(docs_abstract.split())}" in (project or "")
    # The project's own L0 (its first entry, README.md, and its counts) did not change.
    assert sidecars(container, "viking://resources") == resources


def test_a_job_cut_off_between_a_folder_and_its_parent_heals_on_its_retry(
    container: Composition, monkeypatch: pytest.MonkeyPatch
) -> None:
    container.semantic.process(written_job(container, ME, files(3)))
    job = written_job(container, ME, [(f"{ROOT}/docs/aaa.md", b"# Aardvarks\n\nAll.\n")])
    fs = container.semantic.fs
    write = fs.write_sidecars

    def cut_at_the_project(identity: Identity, d: VikingURI, *args: Any) -> bool:
        if str(d) == ROOT:
            raise RuntimeError("the worker stopped here")
        return write(identity, d, *args)

    monkeypatch.setattr(fs, "write_sidecars", cut_at_the_project)
    with pytest.raises(RuntimeError):
        container.semantic.process(job)
    docs_abstract, _ = sidecars(container, f"{ROOT}/docs")
    line = f"- docs/: {' '.join((docs_abstract or '').split())}"
    assert line not in (sidecars(container, ROOT)[1] or "")  # written below, not above
    monkeypatch.setattr(fs, "write_sidecars", write)
    container.semantic.process(job)  # the retry: the folder's L0 is as the first run left it
    assert line in (sidecars(container, ROOT)[1] or "")
    for d in (f"{ROOT}/docs", ROOT):  # and the index holds what the sidecars say
        [rec] = container.semantic.index.get(ME.account_id, f"{d}/{OVERVIEW}")
        stored = sidecars(container, d)[1] or ""
        assert rec.text.endswith(stored.split("---\n\n", 1)[-1])
