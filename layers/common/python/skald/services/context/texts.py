"""The text of each detail tier of a context entry (abstract, overview, full), read from
the filesystem up to the entry's ceiling: a directory's sidecars, a skill's SKILL.md, a file
(a memory's summary or the file's outline as its overview)."""

from __future__ import annotations

from skald.domain.access.identity import Identity
from skald.domain.errors import NotFound
from skald.domain.paths.names import ABSTRACT, OVERVIEW
from skald.domain.paths.uri import from_canonical
from skald.domain.retrieval.context_budget import CATEGORIES, RANK, TierRange
from skald.domain.text.outline import memory_summary, outline_file, split_frontmatter
from skald.services.context.entries import Entry
from skald.services.fs.filesystem import VikingFS

MEMORY_CATEGORIES = frozenset(c for c in CATEGORIES if c not in {"resources", "skills"})


class TierTexts:
    """Reads the tier texts of entries through `fs`."""

    def __init__(self, fs: VikingFS) -> None:
        self.fs = fs

    def texts(self, identity: Identity, hit: Entry, r: TierRange) -> dict[str, str] | None:
        """The text of each tier up to the entry's ceiling; None when the hit is gone."""
        deep = RANK[r.ceiling] >= RANK["overview"]
        try:
            if hit.kind == "dir":
                return self._dir_texts(identity, hit, deep)
            if hit.kind == "skill":
                return self._skill_texts(identity, hit)
            return self._file_texts(identity, hit, deep)
        except NotFound:
            return None  # removed since it was indexed

    def _dir_texts(self, identity: Identity, hit: Entry, deep: bool) -> dict[str, str]:
        directory = from_canonical(hit.uri)
        abstract = hit.abstract.strip()
        if not abstract:
            _, text = self.fs.sidecar(identity, directory, ABSTRACT)
            abstract = (text or "").strip()
        texts = {"abstract": abstract}
        if deep:
            _, text = self.fs.sidecar(identity, directory, OVERVIEW)
            texts["overview"] = split_frontmatter(text or "")[1].strip()
        return texts

    def _skill_texts(self, identity: Identity, hit: Entry) -> dict[str, str]:
        uri = from_canonical(hit.uri)
        try:
            raw = self.fs.read_text(identity, uri)
        except NotFound:
            # a package without SKILL.md: only what the index knows about it
            return {"abstract": hit.abstract.strip()}
        meta, body = split_frontmatter(raw)
        outline = outline_file(uri.name, body)
        description = meta.get("description", "").strip().strip("'\"")
        return {
            "abstract": description or outline.abstract or hit.abstract.strip(),
            "overview": outline.overview,
            "full": raw.strip(),
        }

    def _file_texts(self, identity: Identity, hit: Entry, deep: bool) -> dict[str, str]:
        abstract = hit.abstract.strip()
        if abstract and not deep:
            return {"abstract": abstract}
        uri = from_canonical(hit.uri)
        raw = self.fs.read_text(identity, uri)  # memory fields stripped
        if "\x00" in raw[:4096]:
            return {"abstract": abstract}  # binary: nothing to inject but its summary
        text = raw.strip()
        first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
        texts = {"abstract": abstract or first, "full": text}
        summary = memory_summary(raw) if hit.category in MEMORY_CATEGORIES else None
        texts["overview"] = summary or outline_file(uri.name, raw).overview
        return texts
