"""Parsing use cases: documents and media become Markdown text (or are marked with the reason
they cannot), images get a caption from a vision-capable model when one is configured, and the
result is kept as a sidecar that `read`, the indexer and `stat` use.

This is the one place the indexer gets a file's text from: plain text as it is, everything
else through its parsed Markdown. Binary content never gets past it.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, replace
from typing import Any, Protocol

from skald.domain.access.identity import Identity
from skald.domain.errors import QuotaExceeded
from skald.domain.metering.subject import Purpose, purpose
from skald.domain.paths.uri import ROOT, VikingURI
from skald.domain.text.decoding import clean_text, decode_text
from skald.domain.text.formats import IMAGE, detect
from skald.domain.text.parsed import (
    ParseOutcome,
    StoredParse,
    decode,
    describe,
    encode,
    restamp,
    sidecar_name,
    unparseable_abstract,
)
from skald.ports import LLM, BlobNotFound, BlobStore, ChatMessage

log = logging.getLogger("skald.parsing")

CAPTION_PROMPT = (
    "Describe this image in one or two sentences for a search index: what it "
    "shows, any visible text, and its kind (photo, chart, diagram, screenshot). "
    "Answer with the description only."
)
CAPTION_MAX_CHARS = 600


class DocumentParser(Protocol):
    """The port this service parses with (adapters/parsers implements it)."""

    def parse(self, name: str, data: bytes, content_type: str | None = None) -> ParseOutcome:
        """Markdown text of a document, metadata of a media file, or the reason there is
        none. Bounded by the parser's limits; never raises for bad input."""
        ...


@dataclass(frozen=True)
class FileText:
    """What the indexer gets for a file: text (None: nothing to index) and whether it is
    Markdown parsed from another format."""

    text: str | None
    converted: bool
    stored: StoredParse | None = None


class ParsingService:
    def __init__(
        self,
        blobs: BlobStore,
        parser: DocumentParser,
        *,
        llm: LLM | None = None,
        vision: bool = False,
        caption_timeout_s: float = 30.0,
    ) -> None:
        self.blobs = blobs
        self.parser = parser
        self.llm = llm if vision else None
        self.caption_timeout_s = caption_timeout_s

    # ---------------------------------------------------------------- any ingest path

    def parse(self, name: str, data: bytes, content_type: str | None = None) -> ParseOutcome:
        """Bytes and a name in; Markdown, media metadata (and caption) or a reason out."""
        outcome = self.parser.parse(name, data, content_type)
        if (
            self.llm is not None
            and outcome.format.kind == IMAGE
            and outcome.preview
            and outcome.text is not None
        ):
            outcome = self._captioned(name, outcome)
        return outcome

    def _captioned(self, name: str, outcome: ParseOutcome) -> ParseOutcome:
        assert self.llm is not None and outcome.preview is not None and outcome.text
        try:
            with purpose(Purpose.CAPTION):
                answer = self.llm.complete(
                    [
                        ChatMessage(
                            "user",
                            f"{CAPTION_PROMPT}\n\nFile name: {name}",
                            images=((outcome.preview_format, outcome.preview),),
                        )
                    ],
                    max_tokens=200,
                    timeout_s=self.caption_timeout_s,
                )
        except QuotaExceeded:
            raise
        except Exception as exc:  # the metadata description stands on its own
            log.warning("image caption failed for %s: %s", name, exc)
            return outcome
        caption = " ".join(clean_text(answer).split())[:CAPTION_MAX_CHARS]
        if not caption:
            return outcome
        # The caption becomes the first paragraph, so it is the file's abstract.
        head, _, rest = outcome.text.partition("\n\n")
        text = f"{head}\n\n{caption}\n\n{rest}\n\n## Caption\n\n{caption}\n"
        return replace(outcome, text=text, meta={**outcome.meta, "caption": caption})

    # ---------------------------------------------------------------- stored files

    def _key(self, identity: Identity, uri: VikingURI) -> str:
        parent = (uri.parent or ROOT).blob_key(identity.account_id).rstrip("/")
        return f"{parent}/{sidecar_name(uri.name)}"

    def _load(self, identity: Identity, uri: VikingURI) -> tuple[bytes, StoredParse] | None:
        try:
            raw = self.blobs.get(self._key(identity, uri))
        except BlobNotFound:
            return None
        stored = decode(raw)
        return None if stored is None else (raw, stored)

    def file_text(self, identity: Identity, uri: VikingURI, data: bytes, etag: str) -> FileText:
        """The text to index for a stored file (`etag`: the blob's, when `data` was read);
        parses it once per content."""
        text = decode_text(data)
        fmt = detect(uri.name, data, text=text is not None)
        if not fmt.converted:
            return FileText(clean_text(text or ""), False)
        digest = hashlib.sha256(data).hexdigest()
        loaded = self._load(identity, uri)
        if loaded is not None and loaded[1].sha256 == digest:
            raw, stored = loaded
            if stored.etag != etag:
                self.blobs.put(self._key(identity, uri), restamp(raw, etag))
            return FileText(stored.text, True, stored)
        raw = encode(self.parse(uri.name, data), digest, etag)
        self.blobs.put(self._key(identity, uri), raw)
        fresh = decode(raw)
        assert fresh is not None
        return FileText(fresh.text, True, fresh)

    def read_view(self, identity: Identity, uri: VikingURI, data: bytes, raw: bool) -> str:
        """What `read` shows: text as it is; a document's Markdown (its source with
        `raw`, when the source is text); for content without text yet, a short account."""
        text = decode_text(data)
        fmt = detect(uri.name, data, text=text is not None)
        if not fmt.text_source:
            text = None
        if text is not None and (raw or not fmt.converted):
            return text
        loaded = self._load(identity, uri)
        stored = loaded[1] if loaded is not None else None
        if stored is not None and stored.sha256 != hashlib.sha256(data).hexdigest():
            stored = None
        if stored is not None and stored.text is not None:
            return stored.text
        return text if text is not None else describe(uri.name, stored, len(data))

    def status(self, identity: Identity, uri: VikingURI, etag: str) -> dict[str, Any] | None:
        """`stat`'s view of a parsed file: kind, format and parse status, `pending` until
        the parsed text is that of the current content. None for a file known as text."""
        loaded = self._load(identity, uri)
        if loaded is not None:
            view = loaded[1].view()
            if loaded[1].etag != etag:
                view["status"] = "pending"
            return view
        fmt = detect(uri.name, b"")
        return (
            {"kind": fmt.kind, "format": fmt.format, "status": "pending"} if fmt.converted else None
        )

    def abstract_without_text(self, identity: Identity, uri: VikingURI) -> str:
        """A directory listing's line for a file that has no indexed text."""
        loaded = self._load(identity, uri)
        return unparseable_abstract(loaded[1]) if loaded is not None else ""
