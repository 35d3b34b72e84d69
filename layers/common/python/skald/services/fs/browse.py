"""Listing the tree: ls and tree with paging, sorting, hidden files, tags and the L0/L1 text
the agent-facing output shows."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from skald.domain.access.identity import Identity
from skald.domain.errors import InvalidArgument
from skald.domain.paths.names import ABSTRACT, OVERVIEW, record_id
from skald.domain.paths.tags import normalize_tags
from skald.domain.paths.uri import VikingURI, classify_uri
from skald.domain.text.outline import split_frontmatter
from skald.domain.timefmt import iso_utc
from skald.services.fs.entries import Entry
from skald.services.fs.filesystem import VikingFS
from skald.services.fs.parsing import ParsingService
from skald.services.fs.results import Attrs, Listing, Stat
from skald.services.fs.results import Entry as EntryView  # the wire's name; `Entry` is stored

EXTRA_FIELDS = frozenset({"locked", "id", "count"})


@dataclass
class ListOptions:
    recursive: bool = False
    simple: bool = False
    output: str = "agent"  # agent | original
    abs_limit: int = 256
    include_abstract: bool | None = None
    include_overview: bool | None = None
    overview_limit: int = 4000
    show_all_hidden: bool = False
    node_limit: int = 1000
    offset: int = 0
    sort_by: str | None = None  # name | mtime
    sort_order: str = "asc"
    extra_fields: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    include_tags: bool = False
    level_limit: int | None = None  # tree only
    directories_only: bool = False
    rel_paths: bool = False


class BrowseService:
    def __init__(self, fs: VikingFS, parsing: ParsingService | None = None) -> None:
        self.fs = fs
        self.parsing = parsing

    def list_entries(self, identity: Identity, uri: VikingURI, opts: ListOptions) -> Listing:
        self._validate(opts)
        self.fs.check_readable(identity, uri)
        entries = self._gather(identity, uri, opts)
        wanted = normalize_tags(opts.tags)
        tag_cache: dict[VikingURI, list[str]] = {}
        if wanted or opts.include_tags:
            for e in entries:
                tag_cache[e.uri] = self.fs.tags_of(identity, e.uri, e.is_dir)
            if wanted:
                entries = [e for e in entries if all(t in tag_cache[e.uri] for t in wanted)]
        self._sort(entries, opts)
        page = entries[opts.offset : opts.offset + opts.node_limit]
        has_more = len(entries) > opts.offset + opts.node_limit
        if opts.simple:
            return Listing([str(e.uri) for e in page], has_more)
        return Listing([self._present(identity, e, opts, tag_cache) for e in page], has_more)

    def _gather(self, identity: Identity, uri: VikingURI, opts: ListOptions) -> list[Entry]:
        """The entries listed before tags, sorting and paging."""
        if not self.fs.is_dir(identity, uri):
            # ls of a file lists the file itself, as a shell does
            entries = [self.fs.stat(identity, uri)]
        elif opts.recursive or opts.level_limit is not None:
            entries = list(
                self.fs.walk(
                    identity, uri, show_hidden=opts.show_all_hidden, max_depth=opts.level_limit
                )
            )
            if opts.level_limit is None:
                entries.sort(key=lambda e: e.rel_path)
        else:
            entries = self.fs.children(identity, uri, show_hidden=opts.show_all_hidden)
        if opts.directories_only:
            entries = [e for e in entries if e.is_dir]
        return entries

    @staticmethod
    def _sort(entries: list[Entry], opts: ListOptions) -> None:
        if not opts.sort_by:
            return
        reverse = opts.sort_order == "desc"
        if opts.sort_by == "mtime":
            entries.sort(key=lambda e: (e.modified, e.uri.name), reverse=reverse)
        else:
            entries.sort(key=lambda e: e.uri.name, reverse=reverse)

    @staticmethod
    def _validate(opts: ListOptions) -> None:
        if opts.output not in {"agent", "original"}:
            raise InvalidArgument(f"Invalid output '{opts.output}': agent or original")
        if opts.node_limit < 1 or opts.offset < 0:
            raise InvalidArgument("node_limit must be >= 1 and offset >= 0")
        if opts.sort_by not in {None, "name", "mtime"} or opts.sort_order not in {"asc", "desc"}:
            raise InvalidArgument("sort_by must be name or mtime; sort_order asc or desc")
        if opts.level_limit is not None and opts.level_limit < 1:
            raise InvalidArgument("level_limit must be >= 1")
        unknown = set(opts.extra_fields) - EXTRA_FIELDS
        if unknown:
            raise InvalidArgument(f"Unknown extra_fields {sorted(unknown)}: locked, id, count")

    def _sidecar(self, identity: Identity, entry: Entry, name: str, limit: int) -> str:
        if not entry.is_dir:
            return ""
        _, text = self.fs.sidecar(identity, entry.uri, name)
        text = split_frontmatter(text or "")[1]
        return text[:limit] if limit > 0 else text

    def _present(
        self, identity: Identity, e: Entry, opts: ListOptions, tag_cache: dict[VikingURI, list[str]]
    ) -> EntryView:
        if opts.output == "original":
            item = EntryView(
                uri=str(e.uri),
                size=e.size,
                isDir=e.is_dir,
                modTime=iso_utc(e.modified),
                name=e.uri.name,
                mode=493 if e.is_dir else 420,
            )
            if opts.include_abstract:
                item.abstract = self._sidecar(identity, e, ABSTRACT, opts.abs_limit)
        else:
            item = EntryView(
                uri=str(e.uri),
                size=e.size,
                isDir=e.is_dir,
                modTime=iso_utc(e.modified, millis=True),
            )
            if opts.include_abstract is not False:
                item.abstract = self._sidecar(identity, e, ABSTRACT, opts.abs_limit)
        if opts.include_overview:
            item.overview = self._sidecar(identity, e, OVERVIEW, opts.overview_limit)
        if opts.rel_paths:
            item.rel_path = e.rel_path
        if opts.include_tags:
            item.tags = tag_cache.get(e.uri, [])
        self._extra_fields(identity, e, opts, item)
        return item

    def _extra_fields(
        self, identity: Identity, e: Entry, opts: ListOptions, item: EntryView
    ) -> None:
        if "locked" in opts.extra_fields:
            item.locked = False
        if "id" in opts.extra_fields and not e.is_dir:
            item.id = record_id(identity.account_id, str(e.uri))
        if "count" in opts.extra_fields and e.is_dir:
            item.count = len(self.fs.children(identity, e.uri, show_hidden=False))

    def stat(self, identity: Identity, uri: VikingURI) -> Stat:
        e = self.fs.stat(identity, uri)
        if e.is_dir:
            count: int | None = len(self.fs.children(identity, uri, show_hidden=False))
            rid = parsed = None
        else:
            count, rid = None, record_id(identity.account_id, str(uri))
            # documents and media: format, status, reason, metadata
            parsed = self.parsing.status(identity, uri, e.etag) if self.parsing else None
        return Stat(
            name=e.uri.name,
            size=e.size,
            mode=493 if e.is_dir else 420,
            modTime=iso_utc(e.modified),
            isDir=e.is_dir,
            uri=str(e.uri),
            isLocked=False,
            id=rid,
            count=count,
            parsed=parsed,
        )

    def attrs(self, identity: Identity, uri: VikingURI) -> Attrs:
        entry = self.fs.stat(identity, uri)
        cls = classify_uri(uri)
        attrs: dict[str, Any] = {"tags": self.fs.tags_of(identity, uri, entry.is_dir)}
        if cls.memory_type:
            attrs["memory"] = {"memory_type": cls.memory_type}
        return Attrs(str(uri), cls.context_type, attrs)
