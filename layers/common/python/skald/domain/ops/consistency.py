"""Drift between storage and the search index: storage is the truth, the index holds records
derived from it. Every stored file is expected at level 2 (its whole text or its sections)
and the directory holding it at level 0 (its abstract, refreshed with the file). Other
directories (a preset one nothing was written to yet) may or may not have records. A
missing record means a semantic job has not run (yet, or at all); an orphan record outlived
its file or directory. Both are what `reindex` repairs once the queues are idle.

Sessions are left out: their messages live in the session store, not as indexed files.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from skald.domain.wire import WireUri

FILE_LEVEL = 2
DIRECTORY_LEVEL = 0
MAX_LISTED = 100  # records listed by name per kind; the counts are always complete


@dataclass(frozen=True)
class Expectation:
    uri: str
    path: str  # relative to the checked URI ("" for the URI itself)
    level: int

    @property
    def key(self) -> str:
        return f"{self.path or '.'}#level={self.level}"

    def missing(self) -> MissingRecord:
        return MissingRecord(self.uri, self.path, self.level, self.key)


@dataclass(frozen=True, slots=True)
class MissingRecord:
    """An index record storage says should exist."""

    uri: WireUri
    path: str  # below the checked URI
    level: int
    key: str


@dataclass(frozen=True, slots=True)
class Consistency:
    """Drift between what is stored below `uri` (files at level 2, directories at level 0)
    and the index records there; MAX_LISTED of each kind by name, the counts complete."""

    uri: WireUri
    ok: bool
    expected_count: int
    missing_record_count: int
    orphan_record_count: int
    missing_records: list[MissingRecord]
    orphan_records: list[WireUri]
    missing_records_truncated: bool
    orphan_records_truncated: bool


def in_sessions(uri: str) -> bool:
    parts = uri.removeprefix("viking://").split("/")
    return len(parts) >= 3 and parts[0] == "user" and parts[2] == "sessions"


def relative(root: str, uri: str) -> str:
    return "" if uri == root else uri.removeprefix(root if root.endswith("/") else root + "/")


def abstract_of(directory: str) -> str:
    """The URI of a directory's L0 record: its abstract sidecar."""
    return f"{directory.rstrip('/')}/.abstract.md"


def overview_of(directory: str) -> str:
    """The URI of a directory's L1 record: its overview sidecar."""
    return f"{directory.rstrip('/')}/.overview.md"


def parent_of(uri: str) -> str:
    return uri.rsplit("/", 1)[0]


def check(
    root: str, files: Iterable[str], directories: Iterable[str], records: Iterable[tuple[str, int]]
) -> Consistency:
    """`records`: (uri, level) of every index record below `root` (one per section)."""
    files = [u for u in files if not in_sessions(u)]
    dirs = {u for u in directories if not in_sessions(u)}
    holding = {parent_of(u) for u in files} & dirs
    expected = sorted(
        {Expectation(u, relative(root, u), FILE_LEVEL) for u in files}
        | {
            Expectation(abstract_of(d), relative(root, abstract_of(d)), DIRECTORY_LEVEL)
            for d in holding
        },
        key=lambda e: (e.uri, e.level),
    )
    indexed = {(u, level) for u, level in records if not in_sessions(u)}
    missing = [e for e in expected if (e.uri, e.level) not in indexed]
    stored = set(files) | {abstract_of(d) for d in dirs} | {overview_of(d) for d in dirs}
    orphans = sorted({u for u, _ in indexed if u not in stored})
    return Consistency(
        uri=root,
        ok=not missing and not orphans,
        expected_count=len(expected),
        missing_record_count=len(missing),
        orphan_record_count=len(orphans),
        missing_records=[e.missing() for e in missing[:MAX_LISTED]],
        orphan_records=orphans[:MAX_LISTED],
        missing_records_truncated=len(missing) > MAX_LISTED,
        orphan_records_truncated=len(orphans) > MAX_LISTED,
    )
