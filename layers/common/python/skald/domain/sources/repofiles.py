"""Which fetched files of a repository are added, and under which names.

Only the requested subpath (re-rooted), without version-control and build folders, with
`exclude` / `ignore_dirs` read as `.gitignore` lines (`include`, when given, keeps only the
matching files), and without binary files of no known format (object files, archives,
fonts): what a reader would never open. Documents and media stay; the parsers convert them.
"""

from __future__ import annotations

from dataclasses import dataclass

from skald.domain.paths.uri import addressable_name
from skald.domain.text.formats import BINARY, detect

IGNORED_DIRS = frozenset(
    {
        ".git",
        ".svn",
        ".hg",
        "__MACOSX",
        "__pycache__",
        "node_modules",
        ".venv",
        ".tox",
        ".mypy_cache",
        ".pytest_cache",
    }
)


@dataclass(frozen=True)
class RepoSelection:
    files: list[tuple[str, bytes]]
    skipped_binary: int = 0
    skipped_excluded: int = 0


def _spec(lines: list[str]) -> object | None:
    if not lines:
        return None
    import pathspec

    return pathspec.GitIgnoreSpec.from_lines(lines)


def _split(text: str | None) -> list[str]:
    return [p.strip() for p in (text or "").split(",") if p.strip()]


def select_files(
    files: list[tuple[str, bytes]],
    *,
    subpath: str = "",
    include: str | None = None,
    exclude: str | None = None,
    ignore_dirs: str | None = None,
) -> RepoSelection:
    prefix = subpath.strip("/") + "/" if subpath.strip("/") else ""
    ignored = IGNORED_DIRS | frozenset(_split(ignore_dirs))
    excluded = _spec(_split(exclude))
    included = _spec(_split(include))
    out: list[tuple[str, bytes]] = []
    binary = dropped = 0
    for path, data in files:
        if prefix:
            if not path.startswith(prefix):
                continue
            path = path[len(prefix) :]
        parts = path.split("/")
        if any(p in ignored for p in parts[:-1]):
            dropped += 1
            continue
        if excluded is not None and excluded.match_file(path):  # type: ignore[attr-defined]
            dropped += 1
            continue
        if included is not None and not included.match_file(path):  # type: ignore[attr-defined]
            dropped += 1
            continue
        if detect(parts[-1], data).kind == BINARY:
            binary += 1
            continue
        out.append(("/".join(addressable_name(p) for p in parts), data))
    return RepoSelection(out, binary, dropped)
