"""grep's and glob's walks of a tree on the real local blob store: the folders and files they
read (depth, exclusions, tags, the caller's view), grep's byte budget, glob's details."""

from __future__ import annotations

from pathlib import Path

import pytest

from skald.adapters.local.blobs.blobstore import LocalBlobStore
from skald.domain.access.identity import Identity
from skald.domain.errors import NotFound
from skald.domain.paths.uri import VikingURI
from skald.domain.timefmt import iso_utc
from skald.ports import BlobInfo
from skald.services.fs.filesystem import VikingFS
from skald.services.retrieval import matching
from skald.services.retrieval.matching import GlobRequest, GrepRequest, MatchingService
from skald.services.retrieval.results import GlobItem, GlobResult

ANN = Identity("acme", "ann", "user")
ROOT = Identity("acme", "root", "root")
DOCS = "viking://resources/docs"
FILES = {
    "resources/docs/a.md": "alpha needle\n",
    "resources/docs/big.md": "needle " + "x" * 400 + "\n",
    "resources/docs/sub/b.md": "needle in b\n",
    "resources/docs/sub/deep/c.md": "needle in c\n",
    "resources/docs/z.md": "last needle\n",
    "user/ann/notes.md": "ann's needle\n",
    "user/ann/peers/p1/m.md": "p1 needle\n",
    "user/ann/peers/p2/m.md": "p2 needle\n",
    "user/bob/notes.md": "bob's needle\n",
}


@pytest.fixture
def grep(tmp_path: Path) -> MatchingService:
    fs = VikingFS(LocalBlobStore(tmp_path), max_write_bytes=1 << 20)
    for path, text in FILES.items():
        fs.write(ROOT, _uri(path), text.encode(), "replace")
    fs.set_tags(ROOT, _uri("resources/docs/sub/b.md"), ["k=v"], "replace", False)
    return MatchingService(fs)


def _uri(path: str) -> VikingURI:
    scope, *parts = path.split("/")
    return VikingURI(scope, tuple(parts))


def found(svc: MatchingService, identity: Identity, uri: str, **kw: object) -> list[str]:
    res = svc.grep(identity, GrepRequest(uri=uri, pattern="needle", **kw))  # type: ignore[arg-type]
    return [m.uri.removeprefix("viking://") for m in res.matches]


def test_reads_the_tree_in_key_order(grep: MatchingService) -> None:
    assert found(grep, ROOT, DOCS) == [
        "resources/docs/a.md",
        "resources/docs/big.md",
        "resources/docs/sub/b.md",
        "resources/docs/sub/deep/c.md",
        "resources/docs/z.md",
    ]
    assert found(grep, ROOT, f"{DOCS}/sub/b.md") == ["resources/docs/sub/b.md"]


def test_level_limit_counts_from_the_base(grep: MatchingService) -> None:
    assert found(grep, ROOT, DOCS, level_limit=1) == [
        "resources/docs/a.md",
        "resources/docs/big.md",
        "resources/docs/z.md",
    ]
    assert found(grep, ROOT, DOCS, level_limit=2) == [
        "resources/docs/a.md",
        "resources/docs/big.md",
        "resources/docs/sub/b.md",
        "resources/docs/z.md",
    ]


def test_exclusions_leave_out_a_folder_or_a_file(grep: MatchingService) -> None:
    assert found(grep, ROOT, DOCS, exclude_uri=f"{DOCS}/sub") == [
        "resources/docs/a.md",
        "resources/docs/big.md",
        "resources/docs/z.md",
    ]
    assert found(grep, ROOT, DOCS, exclude_uri=f"{DOCS}/big.md", level_limit=1) == [
        "resources/docs/a.md",
        "resources/docs/z.md",
    ]


def test_tags_filter_and_are_returned(grep: MatchingService) -> None:
    res = grep.grep(ROOT, GrepRequest(uri=DOCS, pattern="needle", tags=["k=v"], include_tags=True))
    assert [(m.uri, m.tags) for m in res.matches] == [(f"{DOCS}/sub/b.md", ["k=v"])]
    res = grep.grep(ROOT, GrepRequest(uri=DOCS, pattern="needle", include_tags=True))
    assert [m.tags for m in res.matches] == [[], [], ["k=v"], [], []]


def test_the_callers_view_bounds_the_scan(grep: MatchingService) -> None:
    assert found(grep, ANN, "viking://user") == [
        "user/ann/notes.md",
        "user/ann/peers/p1/m.md",
        "user/ann/peers/p2/m.md",
    ]
    p1 = Identity("acme", "ann", "user", actor_peer="p1")
    assert found(grep, p1, "viking://user") == ["user/ann/notes.md", "user/ann/peers/p1/m.md"]
    everything = found(grep, ANN, "viking://")
    assert "user/bob/notes.md" not in everything and "resources/docs/a.md" in everything


def test_the_byte_budget_skips_large_files_and_goes_on(
    grep: MatchingService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(matching, "MAX_FILE_BYTES", 100)
    res = grep.grep(ROOT, GrepRequest(uri=DOCS, pattern="needle"))
    assert [m.uri for m in res.matches] == [
        f"{DOCS}/a.md",
        f"{DOCS}/sub/b.md",
        f"{DOCS}/sub/deep/c.md",
        f"{DOCS}/z.md",
    ]
    assert res.truncated and res.files_scanned == 4
    monkeypatch.setattr(matching, "MAX_FILE_BYTES", 1 << 20)
    monkeypatch.setattr(matching, "MAX_SCAN_BYTES", len(FILES["resources/docs/a.md"]) + 20)
    res = grep.grep(ROOT, GrepRequest(uri=DOCS, pattern="needle"))
    # a.md fits, big.md does not; b.md (12 bytes) still does, then nothing else.
    assert [m.uri for m in res.matches] == [f"{DOCS}/a.md", f"{DOCS}/sub/b.md"]
    assert res.truncated
    res = grep.grep(ROOT, GrepRequest(uri=f"{DOCS}/big.md", pattern="needle"))
    assert res.matches == [] and res.truncated


def globbed(
    svc: MatchingService, identity: Identity, uri: str, pattern: str, **kw: object
) -> GlobResult:
    return svc.glob(identity, GlobRequest(pattern=pattern, uri=uri, **kw))  # type: ignore[arg-type]


def test_glob_matches_names_in_key_order(grep: MatchingService) -> None:
    res = globbed(grep, ROOT, DOCS, "**/*.md")
    assert res.matches == [
        f"{DOCS}/a.md",
        f"{DOCS}/big.md",
        f"{DOCS}/sub/b.md",
        f"{DOCS}/sub/deep/c.md",
        f"{DOCS}/z.md",
    ]
    assert res.total == 5 and not res.has_more
    res = globbed(grep, ROOT, DOCS, "*.md", node_limit=2)
    assert res.matches == [f"{DOCS}/a.md", f"{DOCS}/big.md"]
    assert res.total == 3 and res.has_more
    assert globbed(grep, ROOT, f"{DOCS}/a.md", "a.md").matches == [f"{DOCS}/a.md"]
    assert globbed(grep, ROOT, DOCS, "**/").matches == [f"{DOCS}/sub/", f"{DOCS}/sub/deep/"]
    # `?` is one character, however many bytes it takes.
    grep.fs.write(ROOT, _uri("resources/docs/caf\u00e9.md"), b"x", "replace")
    assert globbed(grep, ROOT, DOCS, "caf?.md").matches == [f"{DOCS}/caf\u00e9.md"]
    assert globbed(grep, ROOT, DOCS, "caf??.md").matches == []


def test_glob_looks_up_the_details_of_what_it_returns(grep: MatchingService) -> None:
    res = globbed(grep, ROOT, DOCS, "sub/**", extra_fields=["size", "modTime", "tags"])
    fs = grep.fs
    want = []
    for path in ("sub/b.md", "sub/deep/c.md"):
        entry = fs.stat(ROOT, _uri(f"resources/docs/{path}"))
        want.append(
            GlobItem(
                f"{DOCS}/{path}",
                size=entry.size,
                modTime=iso_utc(entry.modified),
                tags=["k=v"] if path == "sub/b.md" else [],
            )
        )
    assert res.matches == want
    assert want[0].size == len(FILES["resources/docs/sub/b.md"])
    res = globbed(grep, ROOT, DOCS, "**/*.md", tags=["k=v"])
    assert res.matches == [f"{DOCS}/sub/b.md"] and res.total == 1


def test_glob_keeps_to_the_callers_view(grep: MatchingService) -> None:
    assert globbed(grep, ANN, "viking://user", "**/*.md").matches == [
        "viking://user/ann/notes.md",
        "viking://user/ann/peers/p1/m.md",
        "viking://user/ann/peers/p2/m.md",
    ]
    p1 = Identity("acme", "ann", "user", actor_peer="p1")
    assert globbed(grep, p1, "viking://user", "**/*.md").matches == [
        "viking://user/ann/notes.md",
        "viking://user/ann/peers/p1/m.md",
    ]
    names = globbed(grep, ANN, "viking://", "**/notes.md").matches
    assert names == ["viking://user/ann/notes.md"]


class CountedHeads(LocalBlobStore):
    """The local store, counting its `head` calls (a request each on S3)."""

    heads = 0

    def head(self, key: str) -> BlobInfo | None:
        CountedHeads.heads += 1
        return super().head(key)


def test_nothing_there_is_not_found_in_as_few_lookups_as_the_walk_needs(tmp_path: Path) -> None:
    fs = VikingFS(CountedHeads(tmp_path), max_write_bytes=1 << 20)
    for path, text in FILES.items():
        fs.write(ROOT, _uri(path), text.encode(), "replace")
    svc = MatchingService(fs)
    for uri in (f"{DOCS}/nowhere", f"{DOCS}/nowhere.md", f"{DOCS}/a.md/below"):
        with pytest.raises(NotFound, match="File not found"):
            svc.grep(ROOT, GrepRequest(uri=uri, pattern="needle"))
        with pytest.raises(NotFound, match="File not found"):
            svc.glob(ROOT, GlobRequest(uri=uri, pattern="**/*.md"))
    # A folder: whether it is a file, then whether it is a folder, then the walk.
    CountedHeads.heads = 0
    assert len(found(svc, ROOT, DOCS)) == 5
    assert CountedHeads.heads == 2
    CountedHeads.heads = 0
    assert svc.glob(ROOT, GlobRequest(uri=DOCS, pattern="**/*.md")).count == 5
    assert CountedHeads.heads == 2
