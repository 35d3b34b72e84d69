"""Exact matching: grep (regex over file lines) and glob (path patterns).

Patterns come from clients, so grep runs on a linear-time engine (RE2) under a byte budget,
and glob patterns are compiled by our own translator into RE2 as well: no backtracking, no
pattern can hang the server.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import re2

from skald.domain.access.identity import Identity
from skald.domain.errors import InvalidArgument, NotFound
from skald.domain.ops.scan_budget import ScanBudget
from skald.domain.paths.names import record_id
from skald.domain.paths.tags import normalize_tags
from skald.domain.paths.uri import VikingURI, parse_uri
from skald.domain.text.memoryfile import MEMORY_FIELDS_MARK, strip_memory_fields
from skald.domain.timefmt import iso_utc
from skald.services.fs.entries import Entry
from skald.services.fs.filesystem import VikingFS
from skald.services.fs.scan import names_below, read_files
from skald.services.retrieval.results import GlobItem, GlobResult, GrepLine, GrepMatch, GrepResult

MAX_PATTERN = 1000
MAX_SCAN_BYTES = 256 * 1024 * 1024
MAX_FILE_BYTES = 16 * 1024 * 1024
MAX_CONTEXT = 50
# Line breaks of str.splitlines() other than "\n": RE2's multi-line `^`/`$` ignore them, so
# with an anchored pattern a file holding one skips the whole-file prefilter.
_OTHER_BREAKS = re.compile("[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
_OTHER_BREAKS_UTF8 = re.compile(rb"[\r\x0b\x0c\x1c-\x1e]|\xc2\x85|\xe2\x80[\xa8\xa9]")
_TRAILER_MARK = MEMORY_FIELDS_MARK.encode()
# An inline flag group clearing multi-line mode, e.g. `(?-m)` or `(?s-mi:...)`.
_MULTILINE_OFF = re.compile(r"\(\?[a-zA-Z]*-[a-zA-Z]*m")
# Characters with a meaning in RE2's syntax: a pattern without any is a literal string.
_REGEX_SYNTAX = frozenset("\\.^$*+?()[]{}|")


@dataclass
class GrepRequest:
    uri: str
    pattern: str
    exclude_uri: str | None = None
    case_insensitive: bool = False
    node_limit: int | None = 256
    level_limit: int = 10
    tags: list[str] | None = None
    include_tags: bool = False
    before_context: int = 0
    after_context: int = 0


@dataclass
class GlobRequest:
    pattern: str
    uri: str = "viking://"
    node_limit: int | None = 256
    extra_fields: list[str] = field(default_factory=list)
    tags: list[str] | None = None
    include_tags: bool = False


def compile_regex(pattern: str, case_insensitive: bool) -> Any:
    if not pattern:
        raise InvalidArgument("pattern must not be empty")
    if len(pattern) > MAX_PATTERN:
        raise InvalidArgument(f"pattern is longer than {MAX_PATTERN} characters")
    opts = re2.Options()
    opts.case_sensitive = not case_insensitive
    opts.max_mem = 32 << 20
    opts.log_errors = False
    try:
        return re2.compile(pattern, options=opts)
    except re2.error as exc:
        raise InvalidArgument(f"Invalid regular expression: {exc}") from None


def file_prefilter(pattern: str, case_insensitive: bool) -> Callable[[bytes], bool]:
    """`may_match(data)`, run once over a whole file's bytes before its lines are: False only
    when no line of the text can match `pattern`. The pattern runs multi-line, so `^` and `$`
    match at line boundaries; a match across lines (e.g. `[^x]` taking a newline) is only a
    false positive that the per-line pass drops. Most files of a large tree do not match: they
    cost one search instead of a decode, a split and a search per line. Whole-text anchors
    (`\\A`, `\\z`, or `^`/`$` with multi-line mode turned off) mean something else over a file
    than over a line: such patterns skip the prefilter.

    The bytes are the file's as stored, a memory file's trailer included (grep searches the
    text without it): the trailer only adds false positives, except for a `$` at the end of the
    line before it, so an anchored pattern lets such a file through.

    RE2 compiled from a str pattern reads UTF-8: valid UTF-8 bytes are searched as they are,
    without the decode and the re-encode (and the offset mapping) of a str search, which is
    faster, and a file without a match is never decoded. Bytes that are not
    valid UTF-8 are decoded as grep decodes them (bad bytes as U+FFFD) and searched as text."""
    if "\\A" in pattern or "\\z" in pattern or _MULTILINE_OFF.search(pattern):
        return lambda data: True
    whole = compile_regex(f"(?m){pattern}", case_insensitive)
    # Only `^`/`$` depend on where lines break, and RE2 breaks only at "\n".
    anchored = "^" in pattern or "$" in pattern

    def may_match(data: bytes) -> bool:
        if anchored and _TRAILER_MARK in data:
            # grep strips a memory file's trailer first, which can end the last line where
            # the raw bytes go on: a `$` there matches only in the stripped text.
            return True
        if not data.isascii():
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:
                text = data.decode("utf-8", errors="replace")
                return (
                    whole.search(text) is not None
                    or anchored
                    and _OTHER_BREAKS.search(text) is not None
                )
        return (
            whole.search(data) is not None
            or anchored
            and _OTHER_BREAKS_UTF8.search(data) is not None
        )

    if _REGEX_SYNTAX.isdisjoint(pattern) and "\ufffd" not in pattern:
        return _literal_prefilter(pattern, case_insensitive, may_match)
    return may_match


def _literal_prefilter(
    pattern: str, case_insensitive: bool, by_regex: Callable[[bytes], bool]
) -> Callable[[bytes], bool]:
    """A pattern without regular-expression syntax is searched as bytes, without RE2's call:
    a third of a grep's matching time over a large tree. A valid UTF-8 string (no U+FFFD)
    lies in a file's bytes exactly when it lies in the text grep decodes from them, bad bytes
    included: they decode to U+FFFD, and the string starts on a character's first byte. Case
    is folded by bytes.lower() only where both sides are ASCII (RE2 folds Unicode: `k` also
    matches the Kelvin sign); other files go `by_regex`."""
    needle = pattern.encode()
    if not case_insensitive:
        return lambda data: needle in data
    if not pattern.isascii():
        return by_regex
    folded = pattern.lower().encode()
    return lambda data: folded in data.lower() if data.isascii() else by_regex(data)


def glob_parts(pattern: str) -> tuple[str, list[str]]:
    """A glob pattern as an RE2 expression, with shell semantics (`*` and `?` stay inside one
    segment, `**` spans segments, `[...]` is a character class, `[!...]` negates), and the
    literal runs of `pattern` that every path it matches contains (`**/f01??.md`: "f01",
    ".md"; the "/" after `**` is optional): checked with `in` before the expression, they
    leave most names of a large tree to no RE2 call."""
    out: list[str] = []
    literals: list[str] = []
    run: list[str] = []

    def wildcard(regex: str) -> None:
        if run:
            literals.append("".join(run))
            run.clear()
        out.append(regex)

    i, n = 0, len(pattern)
    while i < n:
        ch = pattern[i]
        if ch == "*":
            if pattern.startswith("**", i):
                i += 2
                if i < n and pattern[i] == "/":
                    wildcard("(?:.*/)?")
                    i += 1
                else:
                    wildcard(".*")
                continue
            wildcard("[^/]*")
        elif ch == "?":
            wildcard("[^/]")
        elif ch == "[" and (char_class := _char_class(pattern, i)) is not None:
            regex, i = char_class
            wildcard(regex)
        else:
            run.append(ch)
            out.append(re2.escape(ch))
        i += 1
    wildcard("")
    return "".join(out), literals


def _char_class(pattern: str, i: int) -> tuple[str, int] | None:
    """The RE2 class of the `[...]` at `i` and the index of its `]`; None when it is not
    closed (the `[` is then a literal). A negated class never matches `/`."""
    end = pattern.find(
        "]", i + 2 if pattern.startswith("[!", i) or pattern.startswith("[^", i) else i + 1
    )
    if end < 0:
        return None
    body = pattern[i + 1 : end]
    negate = body[:1] in {"!", "^"}
    if negate:
        body = body[1:]
    body = body.replace("\\", "\\\\").replace("]", "\\]")
    return (f"[^/{body}]" if negate else f"[{body}]"), end


@dataclass(frozen=True, slots=True)
class _LineMatcher:
    """A grep's matching lines of one file, with their context lines."""

    regex: Any
    limit: int
    before: int
    after: int

    def add(
        self,
        matches: list[GrepMatch],
        data: bytes,
        base: VikingURI,
        below: str,
        tags: list[str] | None,
    ) -> bool:
        """Appends the file's matching lines to `matches`; True when they reach the limit."""
        before, after = self.before, self.after
        lines = strip_memory_fields(data.decode("utf-8", errors="replace")).splitlines()
        name = ""  # the file's URI, once a line matches
        for i, line in enumerate(lines):
            if self.regex.search(line) is None:
                continue
            name = name or str(_at(base, below))
            matches.append(
                GrepMatch(
                    i + 1,
                    name,
                    line,
                    before_context=[GrepLine(j + 1, lines[j]) for j in range(max(0, i - before), i)]
                    if before
                    else None,
                    after_context=[
                        GrepLine(j + 1, lines[j])
                        for j in range(i + 1, min(len(lines), i + 1 + after))
                    ]
                    if after
                    else None,
                    tags=tags,
                )
            )
            if len(matches) >= self.limit:
                return True
        return False


def _glob_checked(req: GlobRequest) -> tuple[str, int]:
    """A glob's pattern, stripped, and its limit, after the checks of both and of the extra
    fields asked for."""
    pattern = req.pattern.strip()
    if not pattern or len(pattern) > MAX_PATTERN:
        raise InvalidArgument("pattern must be 1 to 1000 characters")
    limit = req.node_limit if req.node_limit is not None else 256
    if limit < 1:
        raise InvalidArgument("node_limit must be >= 1")
    unknown = set(req.extra_fields) - {"size", "modTime", "id", "tags"}
    if unknown:
        raise InvalidArgument(f"Unknown extra_fields {sorted(unknown)}")
    return pattern, limit


def _everywhere(_: VikingURI) -> bool:
    return True


def _at(base: VikingURI, below: str) -> VikingURI:
    """The URI of a file `below` a grep's or glob's base ("" for the base itself)."""
    return base.child(below) if below else base


class MatchingService:
    def __init__(self, fs: VikingFS) -> None:
        self.fs = fs

    def _uri(self, identity: Identity, raw: str) -> VikingURI:
        uri = parse_uri(raw, user_id=identity.user_id, privileged=identity.privileged)
        self.fs.check_readable(identity, uri)
        return uri

    def grep(self, identity: Identity, req: GrepRequest) -> GrepResult:
        base = self._uri(identity, req.uri)
        regex = compile_regex(req.pattern, req.case_insensitive)
        may_match = file_prefilter(req.pattern, req.case_insensitive)
        exclude = self._uri(identity, req.exclude_uri) if req.exclude_uri else None
        limit = req.node_limit if req.node_limit is not None else 256
        if limit < 1 or req.level_limit < 1:
            raise InvalidArgument("node_limit and level_limit must be >= 1")
        lines_of = _LineMatcher(
            regex,
            limit,
            min(max(req.before_context, 0), MAX_CONTEXT),
            min(max(req.after_context, 0), MAX_CONTEXT),
        )
        matches: list[GrepMatch] = []
        scanned = 0
        budget = ScanBudget(MAX_FILE_BYTES, MAX_SCAN_BYTES)
        truncated = False
        file_tags: dict[VikingURI, list[str]] = {}
        enter, admit = self._grep_walk(identity, req, base, exclude, file_tags)
        contents = read_files(self.fs, identity, base, enter=enter, admit=admit, budget=budget)
        try:
            for below, data in contents:
                tags = file_tags.pop(_at(base, below), []) if file_tags else []
                if data.find(b"\0", 0, 8192) >= 0:
                    continue  # binary
                scanned += 1
                if not may_match(data):
                    continue
                if lines_of.add(matches, data, base, below, tags if req.include_tags else None):
                    truncated = True
                    break
        finally:
            contents.close()  # stops the reads ahead
        truncated = truncated or budget.skipped > 0
        return GrepResult(matches, len(matches), len(matches), scanned, truncated)

    def _grep_walk(
        self,
        identity: Identity,
        req: GrepRequest,
        base: VikingURI,
        exclude: VikingURI | None,
        file_tags: dict[VikingURI, list[str]],
    ) -> tuple[Callable[[VikingURI], bool], Callable[[VikingURI], bool] | None]:
        """Which folders a grep enters and which files it reads (None: every file; with tags
        asked for, each admitted file's tags go to `file_tags`)."""
        wanted = normalize_tags(req.tags)
        base_depth = len(base.segments)

        def enter(folder: VikingURI) -> bool:
            # Its files lie one level deeper: a folder at the limit holds none to read. So
            # every file read is within the limit, and a file is only checked on its own
            # for what lies in the file itself: exclusion and tags.
            return len(folder.segments) - base_depth < req.level_limit and (
                exclude is None or not folder.is_within(exclude)
            )

        def admit(uri: VikingURI) -> bool:
            if exclude is not None and uri.is_within(exclude):
                return False
            if wanted or req.include_tags:
                tags = self.fs.tags_of(identity, uri, False)
                if not all(t in tags for t in wanted):
                    return False
                file_tags[uri] = tags
            return True

        per_file = exclude is not None or bool(wanted) or req.include_tags
        return enter, admit if per_file else None

    def glob(self, identity: Identity, req: GlobRequest) -> GlobResult:
        base = self._uri(identity, req.uri)
        pattern, limit = _glob_checked(req)
        dirs_only = pattern.endswith("/")
        expression, literals = glob_parts(pattern.strip("/"))
        regex = re2.compile(expression)
        wanted = normalize_tags(req.tags)
        entries = self._glob_entries(identity, base, dirs_only)
        out: list[Any] = []  # URIs, or GlobItems when `detailed`
        detailed = bool(req.extra_fields) or req.include_tags
        need_tags = bool(wanted) or req.include_tags or "tags" in req.extra_fields
        total = 0
        for rel_path, uri, entry in entries:
            if not all(part in rel_path for part in literals):
                continue
            # As bytes: RE2's str calls map offsets both ways, which costs more than the match.
            if regex.fullmatch(rel_path.encode()) is None:
                continue
            is_dir = entry is not None
            tags: list[str] = []
            if need_tags:
                uri = uri or _at(base, rel_path)
                tags = self.fs.tags_of(identity, uri, is_dir)
                if not all(t in tags for t in wanted):
                    continue
            total += 1
            if len(out) >= limit:
                continue
            uri = uri or _at(base, rel_path)
            if not detailed:
                out.append(str(uri) + ("/" if is_dir else ""))
                continue
            item = self._glob_item(identity, req, uri, entry, tags)
            if item is None:  # deleted since it was listed
                total -= 1
                continue
            out.append(item)
        return GlobResult(out, len(out), total, total > len(out))

    def _glob_entries(
        self, identity: Identity, base: VikingURI, dirs_only: bool
    ) -> Iterator[tuple[str, VikingURI | None, Entry | None]]:
        """(rel path, URI, entry) of what a glob matches against: a directory's from the
        walk; a file's URI is built, and its entry looked up, only when needed (listing names
        alone reads no metadata)."""
        if dirs_only:
            if not self.fs.is_dir(identity, base):
                raise InvalidArgument(f"Not a directory: {base}")
            return ((e.rel_path, e.uri, e) for e in self.fs.walk(identity, base) if e.is_dir)
        if self.fs.file_info(identity, base) is not None:
            return iter([] if base.name.startswith(".") else [(base.name, base, None)])
        # 404 from names_below when nothing is there
        return (
            (rel, None, None) for rel in names_below(self.fs, identity, base, enter=_everywhere)
        )

    def _glob_item(
        self,
        identity: Identity,
        req: GlobRequest,
        uri: VikingURI,
        entry: Entry | None,
        tags: list[str],
    ) -> GlobItem | None:
        """A match with the extra fields asked for; None when it went since it was listed."""
        is_dir = entry is not None  # a directory's entry comes from the walk
        fields = req.extra_fields
        size: int | None = None
        mod_time: str | None = None
        if "size" in fields or "modTime" in fields:
            if entry is None:
                try:
                    entry = self.fs.stat(identity, uri)
                except NotFound:
                    return None
            if "size" in fields:
                size = entry.size
            if "modTime" in fields:
                mod_time = iso_utc(entry.modified)
        return GlobItem(
            str(uri) + ("/" if is_dir else ""),
            size,
            mod_time,
            record_id(identity.account_id, str(uri)) if "id" in fields and not is_dir else None,
            tags if req.include_tags or "tags" in fields else None,
        )
