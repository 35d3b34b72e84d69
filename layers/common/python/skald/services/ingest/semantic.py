"""Semantic processing: parse, summarise, embed and index changed files, drop removed ones,
then refresh L1 (`.overview.md`) and L0 (`.abstract.md`) bottom-up to the namespace root.

Files are read, embedded and written by semantic_files.py, directories refreshed by
directory_summaries.py (the base classes); this module applies a job's changes with them.
Without an LLM the summaries are deterministic outlines (domain/text/outline.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from skald.domain.access.identity import Identity
from skald.domain.paths.summaries import summary_chain
from skald.domain.paths.uri import VikingURI, from_canonical
from skald.ports import LLM, Embedder, SearchIndex
from skald.services.fs.filesystem import VikingFS
from skald.services.fs.parsing import ParsingService
from skald.services.ingest.directory_summaries import DirectorySummaries
from skald.services.ingest.processing import identity_from_payload
from skald.services.ingest.semantic_files import SemanticLimits, TimeBudget

log = logging.getLogger("skald.semantic")


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


class SemanticService(DirectorySummaries):
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
        self,
        payloads: Sequence[dict[str, Any]],
        *,
        deadline: float | None = None,
        slice_s: float | None = None,
    ) -> list[Outcome | Exception]:
        """Several jobs at once (a burst of writes): each account's changes are applied
        together, so a directory touched by many of them is summarised and embedded once, not
        once per job. When a group fails, its jobs run one by one, so one bad job cannot fail
        the others. One outcome per payload, in order: its result, its exception, or, when
        the time left before `deadline` (a `monotonic` time) ran short, or its files took longer
        than `slice_s` (its turn, so other accounts' jobs wait less), its Continuation."""
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
                    results = list(self._process(identity, group, deadline, slice_s))
            except Exception as exc:
                if len(group) == 1:
                    results = [exc]
                else:
                    log.exception(
                        "a batch of %d semantic jobs failed: running them one by one", len(group)
                    )
                    results = self._one_by_one(group, deadline, slice_s)
            for i, result in zip(members, results, strict=True):
                outcomes[i] = result
        return outcomes

    def _one_by_one(
        self, payloads: list[dict[str, Any]], deadline: float | None, slice_s: float | None
    ) -> list[Outcome | Exception]:
        out: list[Outcome | Exception] = []
        for payload in payloads:
            try:
                identity = identity_from_payload(payload)
                with self._account_lock(identity.account_id):
                    out.append(self._process(identity, [payload], deadline, slice_s)[0])
            except Exception as exc:
                out.append(exc)
        return out

    def _account_lock(self, account: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(account, threading.Lock())

    def _process(
        self,
        identity: Identity,
        payloads: Sequence[dict[str, Any]],
        deadline: float | None,
        slice_s: float | None = None,
    ) -> list[Outcome]:
        """Applies the changes of `payloads` (one account) in one pass: removals, then the
        files that still exist (the file system is the truth, whatever order the jobs came in),
        then each touched directory once, deepest first. Out of time between two file groups,
        it stops and returns a Continuation per payload instead of a result."""
        budget = TimeBudget(deadline, self.monotonic, slice_s=slice_s)
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
