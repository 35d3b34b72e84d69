"""Directory summaries: each touched directory's L0/L1 (its abstract and its listing)
rewritten after a change below it, deepest first, and indexed (semantic.py's directory half;
files are in semantic_files.py).

Each overview carries a YAML frontmatter freshness ledger: a large directory lists a sample
of at most `MAX_REFRESH_CHILDREN` children and is listed again only once its pending changes
reach `REFRESH_FRACTION` of them.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Collection, Sequence
from typing import Any

from skald.domain.access.identity import Identity
from skald.domain.access.visibility import spans_owners
from skald.domain.errors import QuotaExceeded
from skald.domain.metering.subject import Purpose, purpose
from skald.domain.paths.names import ABSTRACT, OVERVIEW
from skald.domain.paths.presets import PRESET_DESCRIPTIONS
from skald.domain.paths.summaries import summarised_by
from skald.domain.paths.uri import VikingURI
from skald.domain.text.outline import clip, directory_abstract, markdown_headings, split_frontmatter
from skald.ports import ChatMessage, IndexRecord
from skald.services.fs.entries import Entry
from skald.services.ingest.read_ahead import ordered_map
from skald.services.ingest.semantic_files import FileIndexing

log = logging.getLogger("skald.semantic")

MAX_REFRESH_CHILDREN = 32
REFRESH_FRACTION = 0.10


def is_owned_summary_dir(uri: VikingURI) -> bool:
    """Directories whose L0/L1 their owner writes (the conversation summary of a session
    archive, `user/{u}/sessions/{s}/history/archive_NNN`): refreshes index them as they are."""
    p = uri.parts
    return (
        uri.scope == "user"
        and len(p) == 5
        and p[1] == "sessions"
        and p[3] == "history"
        and p[4].startswith("archive_")
    )


def listing_line(label: str, summary: str) -> str:
    """A child's line in its directory's L1 listing."""
    return f"- {label}: {summary}" if summary else f"- {label}"


def folder_line(name: str, abstract: str) -> str:
    """A subfolder's line: its L0 on one line. The full refresh writes it and the
    current-listing check looks for it, so both build it here."""
    return listing_line(f"{name}/", " ".join(abstract.split()))


class DirectorySummaries(FileIndexing):
    """The directory half of the semantic pipeline; SemanticService applies jobs with it."""

    def refresh_directories(
        self, identity: Identity, touched: dict[VikingURI, int], forced: Collection[VikingURI] = ()
    ) -> list[VikingURI]:
        """Refreshes each touched directory, deepest first, and carries the change upward;
        a large directory among `forced` is refreshed whatever its ledger says. A parent's
        listing reads its children's L0 from their sidecar files, so the index records of
        every refreshed sidecar are embedded together at the end, in one batch."""
        pending = dict(touched)
        # The lines a directory reached only from below must show for its refreshed children
        # (see _listing_current); one whose own entries changed is refreshed in full.
        shows: dict[VikingURI, list[str]] = {}
        done: list[VikingURI] = []
        records: list[IndexRecord] = []
        while pending:
            # The deepest directories left are each other's strangers: refreshed side by side
            # (on S3, each is a few round trips), their parents after them.
            depth = max(len(u.segments) for u in pending)
            level = [(d, pending.pop(d)) for d in list(pending) if len(d.segments) == depth]
            refreshed = ordered_map(
                lambda dc: self._refresh_one(
                    identity, *dc, None if dc[0] in touched else shows.get(dc[0]), dc[0] in forced
                ),
                level,
                workers=self.limits.read_workers,
            )
            for (d, _), recs in zip(level, refreshed, strict=True):
                if recs is None:
                    continue
                records += recs
                done.append(d)
                parent = summarised_by(d)
                if parent is not None:
                    pending[parent] = pending.get(parent, 0) + 1
                    abstract = next((r.abstract for r in recs if r.level == 0), "")
                    shows.setdefault(parent, []).append(folder_line(d.name, abstract))
        self._embed_changed(identity, records)
        self.index.replace_many(
            identity.account_id, {(rec.uri, rec.level): [rec] for rec in records}
        )
        return done

    def _refresh_one(
        self, identity: Identity, d: VikingURI, changes: int, shows: list[str] | None, forced: bool
    ) -> list[IndexRecord] | None:
        """The records of d's refreshed L0/L1; None when d was not refreshed (gone, or a
        large directory whose ledger waits for more changes)."""
        if d.is_root or not self.fs.is_dir(identity, d):
            return None
        records: list[IndexRecord] = []
        return (
            records
            if self._refresh_directory(identity, d, changes, records, shows, forced)
            else None
        )

    def _listing_current(
        self,
        identity: Identity,
        d: VikingURI,
        body: str,
        attrs: dict[str, Any],
        shows: list[str],
        out: list[IndexRecord],
    ) -> bool:
        """True, with d's records from its stored L0/L1 in `out`, when d's listing (`body`)
        already shows each line of `shows` (its refreshed children's abstracts) under the
        heading it would have now: a rewrite would give the same text (and cost an LLM
        call). Its records are indexed all the same (a job cut off before its index write
        left them stale), and its parent is checked in turn: a cut-off job may have changed
        d's L0 and not its parent's listing."""
        if not body.startswith(self._heading(d, attrs)[1]) or not set(body.splitlines()).issuperset(
            shows
        ):
            return False
        abstract = self.fs.dir_sidecar(identity, d, ABSTRACT)
        if abstract is None:
            return False  # gone meanwhile: the full refresh finds it so
        self._sidecar_records(identity, d, abstract, body, attrs, out)
        return True

    @staticmethod
    def _heading(d: VikingURI, attrs: dict[str, Any]) -> tuple[str, str]:
        """d's description, and the start of its listing up to its first entry."""
        description = attrs.get("description")
        intro = str(description).strip() if description else ""
        return intro, f"# {d.name}\n\n" + (f"{intro}\n\n" if intro else "") + "## Contents\n\n"

    def _refresh_directory(
        self,
        identity: Identity,
        d: VikingURI,
        changes: int,
        out: list[IndexRecord],
        shows: list[str] | None = None,
        forced: bool = False,
    ) -> bool:
        """Rewrites d's L0/L1 and appends their index records (not yet embedded) to `out`;
        keeps them when its listing already shows `shows` (_listing_current). A large
        directory waits for enough changes before its listing is redone, unless `forced`."""
        if is_owned_summary_dir(d):
            return self._owned_sidecars(identity, d, out)
        if spans_owners(d):
            return self._fixed_sidecars(identity, d, out)
        # Each read here is a round trip on S3: d was found a moment ago (_refresh_one).
        old = self.fs.dir_sidecar(identity, d, OVERVIEW)
        meta, body = split_frontmatter(old or "")
        attrs: dict[str, Any] | None = None
        if shows and meta.get("sampled") == "false":  # a sampled listing's ledger counts changes
            attrs = self.fs.read_attrs(identity, d, True)
            if self._listing_current(identity, d, body, attrs, shows, out):
                return True
        children = self.fs.listed_children(identity, d, show_hidden=False)
        pending = int(meta.get("pending_child_changes", "0") or 0) + changes
        n = len(children)
        sampled = n > MAX_REFRESH_CHILDREN
        if (
            old is not None
            and sampled
            and not forced
            and pending < max(1, int(n * REFRESH_FRACTION))
        ):
            self.fs.write_sidecar(identity, d, OVERVIEW, self._ledger(n, sampled, pending) + body)
            return False
        listed = children
        if sampled:
            # deterministic sample: stable across runs, spread over the directory
            listed = sorted(children, key=lambda e: hashlib.md5(e.uri.name.encode()).hexdigest())[
                :MAX_REFRESH_CHILDREN
            ]
            listed.sort(key=lambda e: e.uri.name)
        if attrs is None:
            attrs = self.fs.read_attrs(identity, d, True)
        intro, heading = self._heading(d, attrs)
        lines: list[str] = []
        summaries = self._child_abstracts(identity, listed)
        for child, summary in zip(listed, summaries, strict=True):
            lines.append(
                folder_line(child.uri.name, summary)
                if child.is_dir
                else listing_line(child.uri.name, summary)
            )
        listing = "\n".join(lines) if lines else "(empty)"
        more = f"\n\n({n - len(listed)} more entries not shown)" if sampled else ""
        overview_body = clip(f"{heading}{listing}{more}", self.limits.overview_max_chars)
        abstract = intro or self._directory_abstract(d, children, lines)
        abstract = clip(abstract, self.limits.abstract_max_chars)
        if not self.fs.write_sidecars(
            identity, d, abstract, self._ledger(n, sampled, 0) + overview_body
        ):
            return False  # the directory went away meanwhile
        self._sidecar_records(identity, d, abstract, overview_body, attrs, out)
        return True

    def index_sidecars(self, identity: Identity, dirs: Sequence[VikingURI]) -> None:
        """Indexes the L0/L1 the directories hold, as they are, regenerating nothing (an
        imported pack's directories; a vectors-only reindex, which drops and rebuilds every
        record of its subtree)."""
        records: list[IndexRecord] = []
        for d in dict.fromkeys(dirs):
            if not d.is_root and self.fs.is_dir(identity, d):
                self._owned_sidecars(identity, d, records)
        self._embed_changed(identity, records)
        self.index.replace_many(
            identity.account_id, {(rec.uri, rec.level): [rec] for rec in records}
        )

    def _directory_abstract(self, d: VikingURI, children: list[Any], lines: list[str]) -> str:
        if self.llm is not None and lines:
            shown = (
                f" ({len(children)} entries, {len(lines)} of them listed)"
                if len(children) > len(lines)
                else ""
            )
            try:
                with purpose(Purpose.SUMMARY):
                    text = self.llm.complete(
                        [
                            ChatMessage(
                                "system",
                                "Describe this directory in one sentence of at "
                                f"most {self.limits.abstract_max_chars} characters, from its "
                                "listing. Answer with the sentence only.",
                            ),
                            ChatMessage(
                                "user", f"Directory {d}{shown}\n" + "\n".join(lines)[:8000]
                            ),
                        ],
                        max_tokens=200,
                    )
                return " ".join(text.split())
            except QuotaExceeded:
                raise
            except Exception as exc:
                log.warning("LLM abstract failed for %s: %s", d, exc)
        folders = sum(1 for c in children if c.is_dir)
        return directory_abstract(d.name, folders, len(children) - folders, lines)

    def _child_abstracts(self, identity: Identity, children: Sequence[Entry]) -> list[str]:
        """The L0 of each listed child: a folder's from its sidecar (several read at once on
        S3), a file's from its first index record (one request for all of them), or from its
        text when it has none yet."""
        files = [str(c.uri) for c in children if not c.is_dir]
        # Without vectors: a file's sections share its abstract, and a large document's
        # records with their vectors would be tens of MB read for one line.
        heads = self.index.heads(identity.account_id, files) if files else {}
        folders = iter(
            self.fs.dir_sidecars(identity, [c.uri for c in children if c.is_dir], ABSTRACT)
        )
        out: list[str] = []
        for child in children:
            if child.is_dir:
                out.append(next(folders) or "")
            elif (head := heads.get(str(child.uri))) is not None:
                out.append(head.abstract if head.level == 2 else "")
            else:
                out.append(self.parsing.abstract_without_text(identity, child.uri))
        return out

    def _owned_sidecars(self, identity: Identity, d: VikingURI, out: list[IndexRecord]) -> bool:
        """Records of the L0/L1 a directory's owner wrote (a session archive's summary)."""
        abstract = self.fs.dir_sidecar(identity, d, ABSTRACT)
        if abstract is None:
            return False
        overview = self.fs.dir_sidecar(identity, d, OVERVIEW)
        self._sidecar_records(
            identity, d, abstract, overview, self.fs.read_attrs(identity, d, True), out
        )
        return True

    def _fixed_sidecars(self, identity: Identity, d: VikingURI, out: list[IndexRecord]) -> bool:
        """A directory spanning users or peers keeps its description as L0 and L1: a listing
        would show every owner's summary to whoever reads the directory."""
        attrs = self.fs.read_attrs(identity, d, True)
        key = "peers" if d.scope == "user" and d.parts else "user"
        abstract = clip(
            str(attrs.get("description") or PRESET_DESCRIPTIONS[key]).strip(),
            self.limits.abstract_max_chars,
        )
        overview = f"# {d.name}\n\n{abstract}"
        if not self.fs.write_sidecars(identity, d, abstract, overview):
            return False
        self._sidecar_records(identity, d, abstract, overview, attrs, out)
        return True

    @staticmethod
    def _ledger(children: int, sampled: bool, pending: int) -> str:
        return (
            f"---\nchildren: {children}\nsampled: {str(sampled).lower()}\n"
            f"pending_child_changes: {pending}\n---\n\n"
        )

    def _sidecar_records(
        self,
        identity: Identity,
        d: VikingURI,
        abstract: str,
        overview: str | None,
        attrs: dict[str, Any],
        out: list[IndexRecord],
    ) -> None:
        """d's L0 record, and its L1's when it has one (not yet embedded), into `out`."""
        modified = self.fs.clock()
        for name, level, text in ((ABSTRACT, 0, abstract), (OVERVIEW, 1, overview)):
            if text is None:
                continue
            rec = self._base_record(
                identity,
                d,
                level=level,
                abstract=abstract,
                modified=modified,
                record_uri=d.child(name),
                attrs=attrs,
            )
            heads = " ".join(t for _, t, _ in markdown_headings(text))
            rec.text = f"{d.name}\n{heads}\n{text}"
            out.append(rec)

    def _embed_changed(self, identity: Identity, records: list[IndexRecord]) -> None:
        """Embeds the records whose text changed; the others keep their indexed vector.
        Ancestors are refreshed after every change below them, and their text often stays the
        same (a listing whose entries did not change)."""
        todo: list[IndexRecord] = []
        stored = (
            self.index.get_many(identity.account_id, [rec.uri for rec in records])
            if records
            else {}
        )
        for rec in records:
            known = next(
                (
                    old
                    for old in stored.get(rec.uri, [])
                    if old.level == rec.level and old.section == rec.section
                ),
                None,
            )
            if known is not None and known.vector is not None and known.text == rec.text:
                rec.vector = list(known.vector)
            else:
                todo.append(rec)
        self._embed(todo)
