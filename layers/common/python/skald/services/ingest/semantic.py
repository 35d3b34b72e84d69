"""Semantic processing: parse, summarise, embed and index changed files, drop removed ones,
then refresh L1 (`.overview.md`) and L0 (`.abstract.md`) bottom-up to the namespace root.

Files are read, embedded and written by the base class, in semantic_files.py; this module
applies a job's changes and refreshes the directories. Without an LLM the summaries are
deterministic outlines (domain/text/outline.py). Each overview carries a YAML frontmatter
freshness ledger: large directories sample at most `MAX_REFRESH_CHILDREN` children and only
refresh once pending changes reach 10 %.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from skald.domain.access.identity import Identity
from skald.domain.access.visibility import spans_owners
from skald.domain.paths.names import ABSTRACT, OVERVIEW
from skald.domain.paths.presets import PRESET_DESCRIPTIONS
from skald.domain.paths.summaries import summarised_by, summary_chain
from skald.domain.paths.uri import VikingURI, from_canonical
from skald.domain.text.outline import clip, directory_abstract, markdown_headings, split_frontmatter
from skald.ports import LLM, ChatMessage, Embedder, IndexRecord, SearchIndex
from skald.services.fs.entries import Entry
from skald.services.fs.filesystem import VikingFS
from skald.services.fs.parsing import ParsingService
from skald.services.ingest.processing import identity_from_payload
from skald.services.ingest.read_ahead import ordered_map
from skald.services.ingest.semantic_files import FileIndexing, SemanticLimits, TimeBudget

log = logging.getLogger("skald.semantic")

MAX_REFRESH_CHILDREN = 32
REFRESH_FRACTION = 0.10


@dataclass
class Continuation:
    """A job that ran out of time: `payload` is the job that finishes it (same task, the files
    not indexed yet, every directory to refresh at the end, the counts done so far)."""

    payload: dict[str, Any]


Outcome = dict[str, Any] | Continuation


@dataclass
class _Plan:
    """One job's part of a pass: its payload, the files and directories it indexes, the
    directories it touched (semantic mode) and the summaries its removals hid."""

    payload: dict[str, Any]
    written: list[VikingURI]
    dirs: list[VikingURI]
    hidden: list[VikingURI]
    touched: dict[VikingURI, int] = field(default_factory=dict)


@dataclass
class _Pass:
    """What one pass over several jobs of an account gathers before it indexes."""

    semantic_files: list[VikingURI] = field(default_factory=list)
    vector_files: list[VikingURI] = field(default_factory=list)
    touched: dict[VikingURI, int] = field(default_factory=dict)
    plans: list[_Plan] = field(default_factory=list)
    kept_dirs: list[VikingURI] = field(default_factory=list)  # vectors only: sidecars as is
    as_is: list[VikingURI] = field(default_factory=list)
    # Summaries a removal hid (services/ingest/forgetting.py): each is indexed again, refreshed
    # in full in semantic mode (a large directory's ledger does not wait: it may quote what
    # went), as it is otherwise.
    forced: set[VikingURI] = field(default_factory=set)
    hidden: list[VikingURI] = field(default_factory=list)
    deleted: set[VikingURI] = field(default_factory=set)


def _count_touched(plan: _Plan, gone: list[VikingURI]) -> None:
    """The directories a semantic job touched, with how many changes each: a continuation
    names every directory its whole job touched, with the number of changes (a large
    directory's ledger refreshes once enough changes add up)."""
    mine = plan.touched
    payload = plan.payload
    for d, n in payload.get("refresh", {}).items():
        mine[from_canonical(d)] = int(n)
    for uri in [] if "refresh" in payload else [*plan.written, *gone]:
        if uri.parent is not None:
            mine[uri.parent] = mine.get(uri.parent, 0) + 1
    for d in plan.dirs:
        mine.setdefault(d, 1)


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


class SemanticService(FileIndexing):
    def __init__(
        self,
        fs: VikingFS,
        index: SearchIndex,
        embedder: Embedder,
        llm: LLM | None,
        limits: SemanticLimits,
        parsing: ParsingService,
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.fs = fs
        self.parsing = parsing
        self.index = index
        self.embedder = embedder
        self.llm = llm
        self.limits = limits
        self.monotonic = monotonic
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    # ---------------------------------------------------------------- entry point

    def process(self, payload: dict[str, Any]) -> dict[str, Any]:
        identity = identity_from_payload(payload)
        # One account's changes are applied one job at a time in this process, so a refresh
        # never interleaves with a removal of the same tree.
        with self._account_lock(identity.account_id):
            result = self._process(identity, [payload], None)[0]
        assert isinstance(result, dict)  # no deadline: it always finishes
        return result

    def process_many(
        self, payloads: Sequence[dict[str, Any]], *, deadline: float | None = None
    ) -> list[Outcome | Exception]:
        """Several jobs at once (a burst of writes): each account's changes are applied
        together, so a directory touched by many of them is summarised and embedded once, not
        once per job. When a group fails, its jobs run one by one, so one bad job cannot fail
        the others. One outcome per payload, in order: its result, its exception, or, when
        the time left before `deadline` (a `monotonic` time) ran short, its Continuation."""
        outcomes: list[Outcome | Exception] = [{} for _ in payloads]
        groups: dict[str, list[int]] = {}
        for i, payload in enumerate(payloads):
            groups.setdefault(str(payload.get("account")), []).append(i)
        for members in groups.values():
            group = [payloads[i] for i in members]
            results: list[Outcome | Exception]
            try:
                identity = identity_from_payload(group[0])
                with self._account_lock(identity.account_id):
                    results = list(self._process(identity, group, deadline))
            except Exception as exc:
                if len(group) == 1:
                    results = [exc]
                else:
                    log.exception(
                        "a batch of %d semantic jobs failed: running them one by one", len(group)
                    )
                    results = self._one_by_one(group, deadline)
            for i, result in zip(members, results, strict=True):
                outcomes[i] = result
        return outcomes

    def _one_by_one(
        self, payloads: list[dict[str, Any]], deadline: float | None
    ) -> list[Outcome | Exception]:
        out: list[Outcome | Exception] = []
        for payload in payloads:
            try:
                identity = identity_from_payload(payload)
                with self._account_lock(identity.account_id):
                    out.append(self._process(identity, [payload], deadline)[0])
            except Exception as exc:
                out.append(exc)
        return out

    def _account_lock(self, account: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(account, threading.Lock())

    def _process(
        self, identity: Identity, payloads: Sequence[dict[str, Any]], deadline: float | None
    ) -> list[Outcome]:
        """Applies the changes of `payloads` (one account) in one pass: removals, then the
        files that still exist (the file system is the truth, whatever order the jobs came in),
        then each touched directory once, deepest first. Out of time between two file groups,
        it stops and returns a Continuation per payload instead of a result."""
        budget = TimeBudget(deadline, self.monotonic)
        work = _Pass()
        for payload in payloads:
            self._plan(identity, payload, work)
        untexted: dict[VikingURI, str] = {}
        indexed = self._index_files_of(identity, work, untexted, budget)
        if budget.out_of_time():
            return [
                Continuation(self._continuation(p, indexed, untexted, budget.left))
                for p in work.plans
            ]
        refreshed = self._refresh_touched(identity, work)
        results: list[Outcome] = []
        for payload in payloads:
            result = self._counts(payload, indexed, untexted)
            result["refreshed_directories"] = len(refreshed)
            results.append(result)
        return results

    def _plan(self, identity: Identity, payload: dict[str, Any], work: _Pass) -> None:
        """One job's part of the pass: its removals applied now, its files and directories
        added to what the pass indexes and refreshes."""
        work.as_is += [from_canonical(d) for d in payload.get("indexed_dirs", [])]
        semantic = payload.get("processing_mode", "semantic_and_vectors") == "semantic_and_vectors"
        gone = [from_canonical(u) for u in payload.get("removed", [])]
        plan = _Plan(
            payload,
            [from_canonical(u) for u in payload.get("written", [])],
            [from_canonical(d) for d in payload.get("dirs", [])],
            [from_canonical(d) for d in payload.get("hidden", [])],
        )
        work.plans.append(plan)
        for uri in gone:
            if uri not in work.deleted:
                work.deleted.add(uri)
                self.index.delete_prefix(identity.account_id, str(uri))
            plan.hidden += summary_chain(uri)
        # Written again since it was removed (rm, then a write of the same path): that
        # write's job may have run before the removal's records went, so indexed again.
        files, dirs = self._returned(identity, gone, [*plan.written, *plan.dirs])
        plan.written += files
        plan.dirs += dirs
        (work.semantic_files if semantic else work.vector_files).extend(plan.written)
        (work.forced.update if semantic else work.hidden.extend)(plan.hidden)
        if not semantic:
            work.kept_dirs += plan.dirs
            return
        _count_touched(plan, gone)
        for d, n in plan.touched.items():
            work.touched[d] = work.touched.get(d, 0) + n

    def _index_files_of(
        self, identity: Identity, work: _Pass, untexted: dict[VikingURI, str], budget: TimeBudget
    ) -> set[VikingURI]:
        """Indexes the pass's files, semantic ones first; what time did not allow is left in
        `budget.left`."""
        indexed = self.index_files(
            identity, work.semantic_files, semantic=True, untexted=untexted, budget=budget
        )
        vectors_left = [u for u in work.vector_files if u not in indexed]
        if budget.stopped:
            budget.left += vectors_left
        else:
            indexed |= self.index_files(
                identity, vectors_left, semantic=False, untexted=untexted, budget=budget
            )
        return indexed

    def _refresh_touched(self, identity: Identity, work: _Pass) -> list[VikingURI]:
        """Refreshes the touched directories and the hidden summaries, then indexes the
        sidecars kept as they are; the directories refreshed."""
        touched, forced = work.touched, work.forced
        refreshed = self.refresh_directories(identity, touched, forced) if touched else []
        # A hidden summary the refresh did not reach (a directory below it went meanwhile).
        left = {d: 1 for d in forced.difference(refreshed)}
        if left:
            refreshed += self.refresh_directories(identity, left, forced)
        done = {*touched, *refreshed}
        as_is = work.as_is + [d for d in [*work.kept_dirs, *work.hidden] if d not in done]
        if as_is:
            self.index_sidecars(identity, as_is)
        return refreshed

    def _returned(
        self, identity: Identity, gone: Sequence[VikingURI], building: Sequence[VikingURI]
    ) -> tuple[list[VikingURI], list[VikingURI]]:
        """The files and directories at or below the removed paths `gone` that exist again,
        leaving out a path the job itself builds (`building`: a reindex drops its subtree's
        records, then indexes it)."""
        files: list[VikingURI] = []
        dirs: list[VikingURI] = []
        for uri in gone:
            if any(b.is_within(uri) for b in building):
                continue
            if self.fs.is_dir(identity, uri):
                files += [e.uri for e in self.fs.iter_files(identity, uri)]
                dirs += [uri, *(e.uri for e in self.fs.walk(identity, uri) if e.is_dir)]
            elif self.fs.file_info(identity, uri) is not None:
                files.append(uri)
        return files, dirs

    @staticmethod
    def _counts(
        payload: dict[str, Any], indexed: set[VikingURI], untexted: dict[VikingURI, str]
    ) -> dict[str, Any]:
        """The payload's counts: this run's, plus those of the runs it continues."""
        before = payload.get("so_far", {})
        mine = {from_canonical(u) for u in payload.get("written", [])}
        result: dict[str, Any] = {
            "indexed_files": int(before.get("indexed_files", 0)) + len(mine & indexed),
            "removed": int(before.get("removed", 0)) + len(payload.get("removed", [])),
        }
        marked = [
            *before.get("not_indexed", []),
            *({"uri": str(u), "reason": untexted[u]} for u in mine if u in untexted),
        ]
        if marked:
            result["not_indexed"] = sorted(marked, key=lambda m: str(m["uri"]))
        return result

    def _continuation(
        self,
        plan: _Plan,
        indexed: set[VikingURI],
        untexted: dict[VikingURI, str],
        left: list[VikingURI],
    ) -> dict[str, Any]:
        """The job that finishes `plan`'s payload: its files not reached yet; removals are
        done, the summaries they hid still to index. Directories are refreshed by the run
        that indexes the last file, once."""
        payload = plan.payload
        remaining = set(left)
        out = {
            **payload,
            "written": [str(u) for u in plan.written if u in remaining],
            "removed": [],
            "so_far": self._counts(payload, indexed, untexted),
            "dirs": [str(d) for d in plan.dirs],
            "hidden": [str(d) for d in dict.fromkeys(plan.hidden)],
        }
        if payload.get("processing_mode", "semantic_and_vectors") == "semantic_and_vectors":
            out["refresh"] = {str(d): n for d, n in plan.touched.items()}
            out["dirs"] = []
        return out

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

    # ---------------------------------------------------------------- directories

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
                text = self.llm.complete(
                    [
                        ChatMessage(
                            "system",
                            "Describe this directory in one sentence of at "
                            f"most {self.limits.abstract_max_chars} characters, from its "
                            "listing. Answer with the sentence only.",
                        ),
                        ChatMessage("user", f"Directory {d}{shown}\n" + "\n".join(lines)[:8000]),
                    ],
                    max_tokens=200,
                )
                return " ".join(text.split())
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
