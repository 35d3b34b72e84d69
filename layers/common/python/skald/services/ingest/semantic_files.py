"""Indexing a file's content: its text read and described, cut into sections, embedded and
written to the index in groups (semantic.py's file half; directories are in
directory_summaries.py).

The next files are read and described while a group is embedded, and a group is written while
the next one is (services/ingest/read_ahead.py): on S3 and OpenSearch, most of a file's time is
waiting.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from skald.domain.access.identity import Identity
from skald.domain.errors import QuotaExceeded
from skald.domain.metering.subject import Purpose, purpose
from skald.domain.ops.time_budget import must_hand_on, turn_over
from skald.domain.paths.names import attr_created, attr_tags
from skald.domain.paths.uri import VikingURI, classify_uri
from skald.domain.text.outline import FileOutline, clip, outline_file, searchable_text, suffix_of
from skald.domain.text.parsed import unparseable_abstract
from skald.domain.text.sections import Section, split_sections
from skald.ports import (
    LLM,
    BlobInfo,
    BlobNotFound,
    ChatMessage,
    Embedder,
    IndexRecord,
    SearchIndex,
)
from skald.services.fs.filesystem import VikingFS
from skald.services.fs.parsing import ParsingService
from skald.services.ingest.read_ahead import ReadAhead, WriteBehind, read_ahead

log = logging.getLogger("skald.semantic")

EMBED_TEXT_CHARS = 2000
# An overview (L1) is embedded from its head: the directory's name, headings and first entries.
# all-MiniLM-L6-v2 was fine-tuned on up to 128 word pieces (a few hundred characters), so a
# longer listing adds little to its vector but costs quadratic attention on every refresh; BM25
# still indexes the whole overview.
OVERVIEW_EMBED_CHARS = 512
# Files are embedded and indexed in groups of about this many records, so a job of many large
# files holds one group's texts, token ids and vectors at a time, not the whole job's (vectors
# held as Python floats alone would grow with the job's size). A file of more records is
# embedded and written in slices of this many: a document at the write limit, held at once,
# would keep thousands of vectors and their bulk bodies in a worker's memory.
INDEX_GROUP_RECORDS = 256
# A group is embedded before it is full when the next file is not read yet and it has at least
# this many records: a batch large enough for the model to run efficiently.
EARLY_GROUP_RECORDS = 32
# Files read and described ahead are at most this large; a larger one is read and described
# when its turn comes, alone. Round trips matter for small files (a short note embeds faster
# than its three S3 reads come back), little for larger ones (their embedding dwarfs the
# reads), and what is held ahead grows with the files: a larger bound raised a worker's peak
# memory on a folder of large files (the ingest benchmark in bench/ measures it).
READ_AHEAD_FILE_BYTES = 64 * 1024
# A file's records before embedding, and why it has none (when it has no text).
_Prepared = tuple[list[IndexRecord], str | None]


@dataclass
class SemanticLimits:
    abstract_max_chars: int = 256
    overview_max_chars: int = 4000
    section_max_chars: int = 2000
    read_workers: int = 1  # files read and described at once (a remote store wants more)


@dataclass
class TimeBudget:
    """Time left to a job: checked between file groups, never before the first one, so every
    run makes progress however little time it was given."""

    deadline: float | None
    clock: Callable[[], float]
    # Its turn: after this long on files it stops as out of time, though time is left (a
    # large folder yields to the jobs queued behind it: domain/ops/fairness.py).
    slice_s: float | None = None
    slowest: float = 0.0
    started: float = 0.0
    begun: float = 0.0
    worked: bool = False
    stopped: bool = False
    left: list[VikingURI] = field(default_factory=list)  # files not reached when stopped

    def __post_init__(self) -> None:
        self.started = self.begun = self.clock()

    def step_done(self) -> bool:
        """Records the step that just ended; True when there is no time for another."""
        now = self.clock()
        self.slowest = max(self.slowest, now - self.started)
        self.started, self.worked = now, True
        self.stopped = must_hand_on(now, self.deadline, self.slowest) or turn_over(
            now, self.begun, self.slice_s
        )
        return self.stopped

    def out_of_time(self) -> bool:
        """Before the closing directory refresh: stop if this run already worked and the
        time left is short (the refresh then runs in a job of its own)."""
        self.stopped = self.stopped or (
            self.worked and must_hand_on(self.clock(), self.deadline, self.slowest)
        )
        return self.stopped


class FileIndexing:
    """The file half of SemanticService (a base class: both halves share its ports, which
    callers and tests may swap on the service)."""

    fs: VikingFS
    parsing: ParsingService
    index: SearchIndex
    embedder: Embedder
    llm: LLM | None
    limits: SemanticLimits

    def index_files(
        self,
        identity: Identity,
        uris: Sequence[VikingURI],
        *,
        semantic: bool,
        untexted: dict[VikingURI, str] | None = None,
        budget: TimeBudget | None = None,
    ) -> set[VikingURI]:
        """Indexes the files of `uris` that exist; returns those. A file's text comes only
        from the parsing service: a file without text (binary, unparseable) gets no record,
        and `untexted` collects why. When `budget` runs out after a group, it stops there and
        puts the files it did not reach in `budget.left`. The next files are read and
        described while a group is embedded, and a group is written while the next one is."""
        todo = list(dict.fromkeys(uris))
        prepared = read_ahead(
            lambda uri: self._prepare(identity, uri, semantic),
            todo,
            workers=self.limits.read_workers,
            max_weight=INDEX_GROUP_RECORDS,
            weight=lambda p: len(p[0]) if isinstance(p, tuple) else 0,
        )
        writer = WriteBehind()
        try:
            done = self._index_prepared(
                identity, todo, prepared, writer, semantic, untexted, budget
            )
            writer.wait()
            return done
        finally:
            prepared.close()
            writer.close()

    def _index_prepared(
        self,
        identity: Identity,
        todo: list[VikingURI],
        prepared: ReadAhead[VikingURI, _Prepared | BlobInfo | None],
        writer: WriteBehind,
        semantic: bool,
        untexted: dict[VikingURI, str] | None,
        budget: TimeBudget | None,
    ) -> set[VikingURI]:
        pending: list[tuple[VikingURI, list[IndexRecord]]] = []
        done: set[VikingURI] = set()
        held = 0
        for at, (uri, file) in enumerate(zip(todo, prepared, strict=True)):
            if isinstance(file, BlobInfo):  # too large to be read ahead: its turn now
                file = self._describe(identity, uri, file, semantic)
            if file is None:
                continue  # removed or moved again since the change was queued
            records, reason = file
            pending.append((uri, records))  # no records: drops what an earlier content indexed
            if reason is not None and untexted is not None:
                untexted[uri] = reason
            held += len(records)
            # A full group, or enough records to keep the model busy while the next file is
            # still being read (the start of a job on S3): the model never waits for reads
            # while it has work.
            if held >= INDEX_GROUP_RECORDS or (
                held >= EARLY_GROUP_RECORDS and not prepared.next_ready()
            ):
                done |= self._index_group(identity, pending, writer)
                pending, held = [], 0
                if budget is not None and budget.step_done() and at + 1 < len(todo):
                    budget.left += todo[at + 1 :]
                    return done
        done |= self._index_group(identity, pending, writer)
        if budget is not None and pending:
            budget.step_done()
        return done

    def _prepare(
        self, identity: Identity, uri: VikingURI, semantic: bool
    ) -> _Prepared | BlobInfo | None:
        """A file's records, not embedded yet (none when it has no text, with the reason when
        it is known); None when the file is gone; its BlobInfo alone when it is too large to
        be read ahead."""
        info = self.fs.file_info(identity, uri)
        if info is None or info.size > READ_AHEAD_FILE_BYTES:
            return info
        return self._describe(identity, uri, info, semantic)

    def _describe(
        self, identity: Identity, uri: VikingURI, info: BlobInfo, semantic: bool
    ) -> _Prepared | None:
        try:
            data = self.fs.blobs.get(self.fs.key(identity, uri))
        except BlobNotFound:
            return None  # removed since its size was read
        content = self.parsing.file_text(identity, uri, data, info.etag)
        del data
        if content.text is None:
            return [], (
                unparseable_abstract(content.stored) if content.stored is not None else None
            )
        return self._file_records(
            identity, uri, content.text, info.modified, semantic, markdown=content.converted
        ), None

    def _index_group(
        self,
        identity: Identity,
        group: list[tuple[VikingURI, list[IndexRecord]]],
        writer: WriteBehind,
    ) -> set[VikingURI]:
        """Embeds and indexes the records of whole files: those of a file that fits in a
        group are replaced together, never split between two groups; a larger file goes
        slice by slice (_index_large)."""
        whole = {(str(uri), 2): recs for uri, recs in group if len(recs) <= INDEX_GROUP_RECORDS}
        if whole:
            self._embed([r for recs in whole.values() for r in recs])
            writer.submit(lambda: self.index.replace_many(identity.account_id, whole))
        for uri, recs in group:
            if len(recs) > INDEX_GROUP_RECORDS:
                writer.wait()
                self._index_large(identity, uri, recs)
        return {uri for uri, _ in group}

    def _index_large(self, identity: Identity, uri: VikingURI, records: list[IndexRecord]) -> None:
        """A file of more records than a group holds: its first slice replaces every record
        it had, each further slice is added to it, and a slice's vectors are let go once
        written. Memory follows the slice, not the file. Meanwhile a reader finds the file
        with its first sections only; a failure part way leaves it so until the job's retry
        indexes the file again."""
        for start in range(0, len(records), INDEX_GROUP_RECORDS):
            part = records[start : start + INDEX_GROUP_RECORDS]
            self._embed(part)
            if start == 0:
                self.index.replace_sections(identity.account_id, str(uri), 2, part)
            else:
                self.index.upsert(part)
            for rec in part:
                rec.vector = None

    def _file_records(
        self,
        identity: Identity,
        uri: VikingURI,
        raw: str,
        modified: float,
        semantic: bool,
        *,
        markdown: bool = False,
    ) -> list[IndexRecord]:
        # Parsed documents are Markdown whatever their extension.
        name = f"{uri.name}.md" if markdown else uri.name
        text = searchable_text(name, raw)
        outline = self._file_outline(uri, raw, name) if semantic else FileOutline("", "")
        sections = (
            split_sections(text, self.limits.section_max_chars)
            if suffix_of(name) not in {".json"}
            else [Section(0, 1, 0, text, "")]
        )
        base = self._base_record(
            identity, uri, level=2, abstract=outline.abstract, modified=modified
        )
        out: list[IndexRecord] = []
        for sec in sections:
            heading = f"{sec.heading}\n" if sec.heading else ""
            rec = IndexRecord(**{**base.__dict__})
            rec.section = sec.index
            rec.line_start, rec.line_end = sec.line_start, sec.line_end
            rec.text = f"{uri.name}\n{heading}{sec.text}"
            out.append(rec)
        return out

    def _file_outline(self, uri: VikingURI, raw: str, name: str) -> FileOutline:
        outline = outline_file(
            name,
            raw,
            abstract_max=self.limits.abstract_max_chars,
            overview_max=self.limits.overview_max_chars,
        )
        if self.llm is None or not raw.strip():
            return outline
        try:
            with purpose(Purpose.SUMMARY):
                summary = self.llm.complete(
                    [
                        ChatMessage(
                            "system",
                            "Summarise the file in one sentence of at most "
                            f"{self.limits.abstract_max_chars} characters. Answer with the "
                            "sentence only.",
                        ),
                        ChatMessage("user", f"File: {uri.name}\n\n{raw[:12000]}"),
                    ],
                    max_tokens=200,
                )
        except QuotaExceeded:
            raise
        except Exception as exc:  # the deterministic outline is always a valid fallback
            log.warning("LLM summary failed for %s: %s", uri, exc)
            return outline
        return FileOutline(
            clip(" ".join(summary.split()), self.limits.abstract_max_chars), outline.overview
        )

    def _base_record(
        self,
        identity: Identity,
        uri: VikingURI,
        *,
        level: int,
        abstract: str,
        modified: float,
        record_uri: VikingURI | None = None,
        attrs: dict[str, Any] | None = None,
    ) -> IndexRecord:
        """`attrs`: uri's attributes when the caller has read them (a directory's two
        records share one read)."""
        cls = classify_uri(uri)
        if attrs is None:
            tags, created = self.fs.tags_and_created(identity, uri, level < 2, modified)
        else:
            tags, created = attr_tags(attrs), attr_created(attrs, modified)
        if cls.memory_type and not any(t.startswith("memory_type=") for t in tags):
            tags = [*tags, f"memory_type={cls.memory_type}"]
        target = record_uri or uri
        return IndexRecord(
            account=identity.account_id,
            uri=str(target),
            level=level,
            context_type=cls.context_type,
            parent=str(target.parent or target),
            ancestors=target.ancestors(),
            text="",
            abstract=abstract,
            tags=tags,
            memory_type=cls.memory_type,
            owner=cls.owner,
            peer=cls.peer,
            created_at=created,
            updated_at=modified,
        )

    def _embed(self, records: list[IndexRecord]) -> None:
        texts = [
            r.text[: OVERVIEW_EMBED_CHARS if r.level == 1 else EMBED_TEXT_CHARS] for r in records
        ]
        if not texts:
            return
        vectors = self.embedder.embed(texts)
        for rec, vec in zip(records, vectors, strict=True):
            rec.vector = list(vec)
