"""The text rule, format detection, the parsers' limits and failure reasons, and the parsing
service's sidecar (parsed once per content, never served stale)."""

from __future__ import annotations

import io
import random
import zipfile
import zlib
from pathlib import Path

import pytest

from skald.adapters.local.blobs.blobstore import LocalBlobStore
from skald.adapters.parsers.library import LibraryParsers
from skald.domain.access.identity import Identity
from skald.domain.paths.uri import from_canonical
from skald.domain.text.decoding import clean_text, decode_text, is_clean_text
from skald.domain.text.formats import AUDIO, BINARY, DOCUMENT, IMAGE, TEXT, VIDEO, detect
from skald.domain.text.parsed import ParseLimits, ParseOutcome, decode, encode
from skald.services.fs.parsing import ParsingService
from tests.fixtures import documents as d


def test_what_is_text() -> None:
    assert decode_text("naïve café\n".encode()) == "naïve café\n"
    assert decode_text(b"\xef\xbb\xbfwith a BOM") == "with a BOM"
    assert decode_text("utf-16 text".encode("utf-16")) == "utf-16 text"
    assert decode_text(b"") == ""
    assert decode_text(d.png()) is None
    assert decode_text(d.pdf(["x"])[:200] + bytes(range(32)) * 4) is None
    assert decode_text("café crème".encode("cp1252")) == "café crème"  # legacy 8-bit text
    assert decode_text(zlib.compress(random.Random(7).randbytes(4000))) is None
    assert decode_text(b"a log line\x1b[31m red\x1b[0m\n") is not None  # ANSI colours
    assert decode_text(b"x" * 50 + b"\x00" * 10) is None
    assert clean_text("a\x00b\r\nc\x07\fd\ud800") == "ab\nc\nd"
    assert is_clean_text("tab\tand newline\n") and not is_clean_text("bell\x07")


@pytest.mark.parametrize(
    ("name", "data", "kind", "fmt"),
    [
        ("a.pdf", b"", DOCUMENT, "pdf"),
        ("noext", b"%PDF-1.7\n...", DOCUMENT, "pdf"),
        ("noext", d.png(), IMAGE, "png"),
        ("photo.JPG", b"", IMAGE, "jpeg"),
        ("noext", d.wav(0.1), AUDIO, "wav"),
        ("clip.mov", b"", VIDEO, "mov"),
        ("app.ts", b"export const x = 1;\n", TEXT, ""),
        ("stream.ts", bytes([0x47]) + bytes(range(200)), VIDEO, "ts"),
        ("notes.md", b"# hello", TEXT, ""),
        ("id3.md", b"ID3 tags name the artist of a song", TEXT, ""),
        ("data.bin", bytes(range(256)), BINARY, "bin"),
    ],
)
def test_detect(name: str, data: bytes, kind: str, fmt: str) -> None:
    found = detect(name, data)
    assert (found.kind, found.format) == (kind, fmt)


def parse(name: str, data: bytes, **limits: float) -> ParseOutcome:
    return LibraryParsers(ParseLimits(**limits)).parse(name, data)  # type: ignore[arg-type]


def test_pdf_pages_time_and_characters_are_capped() -> None:
    pages = [f"Page number {i} talks about topic {i}." for i in range(1, 6)]
    whole = parse("a.pdf", d.pdf(pages, title="Topics"))
    assert whole.status == "extracted" and whole.truncated is None
    assert whole.meta == {"pages": 5, "title": "Topics"}
    cut = parse("a.pdf", d.pdf(pages, title="Topics"), max_pages=2)
    assert cut.truncated == "stopped after 2 pages"
    assert "## Page 2" in (cut.text or "") and "## Page 3" not in (cut.text or "")
    late = parse("a.pdf", d.pdf(pages, title="Topics"), max_seconds=0)
    assert late.truncated and "time limit" in late.truncated
    assert late.text == "# Topics\n"
    short = parse("a.pdf", d.pdf(pages), max_chars=40)
    assert short.truncated == "text cut at 40 characters" and len(short.text or "") <= 41


def test_pdf_failures_name_their_cause() -> None:
    assert "password" in (parse("s.pdf", d.encrypted_pdf(["x"])).reason or "")
    assert parse("s.pdf", d.encrypted_pdf(["x"])).status == "unparseable"
    corrupt = parse("c.pdf", b"%PDF-1.4\nthis is not a pdf body at all")
    assert corrupt.status == "unparseable" and "PDF" in (corrupt.reason or "")
    blank = parse("b.pdf", d.pdf([""]))
    assert blank.reason == "the PDF has no text layer (a scan or images only)"


def test_zip_based_formats_are_guarded() -> None:
    document = d.docx("Title", [("Part", "Body text " * 200)])
    bomb = parse("big.docx", document, max_unzipped_bytes=2000)
    assert bomb.status == "unparseable" and "expands to" in (bomb.reason or "")
    assert "not a readable zip" in (parse("x.pptx", b"PK\x03\x04broken").reason or "")
    ole = parse("locked.xlsx", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 100)
    assert "password-protected" in (ole.reason or "")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for i in range(5):
            zf.writestr(f"part{i}.xml", "<x/>")
    assert "parts, more than 3" in (
        parse("many.docx", buf.getvalue(), max_zip_entries=3).reason or ""
    )


def test_sheets_and_csv_repeat_their_header_and_cap_rows() -> None:
    rows: list[list[object]] = [["Name", "Score"], *[[f"p{i}", i] for i in range(120)]]
    book = parse("s.xlsx", d.xlsx({"Scores": rows}))
    text = book.text or ""
    assert text.count("| Name | Score |") == 3  # chunks of 50 rows, header each time
    assert "## Scores (rows 51-100)" in text and "| p119 | 119 |" in text
    capped = parse("s.xlsx", d.xlsx({"Scores": rows}), max_rows=10)
    assert capped.truncated == "Scores cut at 10 rows" and "| p9 | 9 |" in (capped.text or "")
    assert "| p10 |" not in (capped.text or "")
    semi = parse("eu.csv", b"city;price\nOslo;12,5\n")
    assert "| Oslo | 12,5 |" in (semi.text or "") and semi.meta["delimiter"] == ";"


def test_html_keeps_the_main_content() -> None:
    page = (
        b"<html><head><title>Shop</title><script>track()</script></head><body>"
        b"<header><a href='/'>Logo</a></header><div role='navigation'>Menu</div>"
        b"<article><header><h2>Article head</h2></header><p>Body with "
        b"<a href='javascript:evil()'>a bad link</a> and <a href='https://x.org'>a good "
        b"one</a>.</p><img alt='diagram' src='data:image/png;base64,AAAA'></article>"
        b"<footer>Imprint</footer></body></html>"
    )
    text = parse("p.html", page).text or ""
    assert text.startswith("# Shop\n") and "## Article head" in text
    assert "[a good one](https://x.org)" in text and "javascript" not in text
    assert "diagram" in text and "base64" not in text
    assert not any(w in text for w in ("Logo", "Menu", "Imprint", "track()"))


def test_content_type_names_a_nameless_file() -> None:
    out = LibraryParsers().parse("download", d.pdf(["Typed by header."]), "application/pdf")
    assert out.format.format == "pdf" and "Typed by header." in (out.text or "")


def test_media_metadata_and_damaged_media() -> None:
    photo = parse("p.jpg", d.jpeg_with_exif())
    assert photo.meta["taken"] == "2023-04-01 09:30:00" and photo.preview is not None
    assert (photo.text or "").splitlines()[
        2
    ] == "JPEG image, 320 × 200 pixels, taken 2023-04-01 09:30:00."
    broken = parse("p.png", b"\x89PNG\r\n\x1a\n" + b"\x00" * 40)
    assert broken.status == "unparseable" and "PNG image" in (broken.reason or "")
    svg = parse("logo.svg", b'<svg width="10" height="20"><title>Logo</title></svg>')
    assert svg.meta["title"] == "Logo" and "10 × 20" in (svg.text or "")
    video = parse("clip.mp4", d.mp4(5.5))
    assert video.meta == {"bytes": len(d.mp4(5.5)), "duration_s": 5.5}
    assert "MP4 video, 5.5 s." in (video.text or "")
    audio = parse("a.wav", d.wav(2.0))
    assert audio.meta["mime_type"] == 'audio/wav; codecs="1"' and audio.meta["channels"] == 1
    unknown = parse("clip.mkv", b"\x1aE\xdf\xa3" + b"\x00" * 64)
    assert unknown.status == "extracted" and unknown.meta == {"bytes": 68}
    assert parse("x.bin", bytes(range(256))).status == "binary"


class CountingParser:
    def __init__(self) -> None:
        self.calls = 0
        self.inner = LibraryParsers()

    def parse(self, name: str, data: bytes, content_type: str | None = None) -> ParseOutcome:
        self.calls += 1
        return self.inner.parse(name, data, content_type)


def test_the_sidecar_is_parsed_once_per_content_and_never_stale(tmp_path: Path) -> None:
    blobs = LocalBlobStore(tmp_path)
    parser = CountingParser()
    service = ParsingService(blobs, parser)
    who = Identity("acme", "alice", "user")
    uri = from_canonical("viking://resources/docs/a.pdf")
    first, second = d.pdf(["First text."]), d.pdf(["Second text."])
    assert service.read_view(who, uri, first, False).startswith("[a.pdf: file")
    assert service.status(who, uri, "e1") == {
        "kind": "document",
        "format": "pdf",
        "status": "pending",
    }
    assert "First text." in (service.file_text(who, uri, first, "e1").text or "")
    assert service.file_text(who, uri, first, "e2").stored is not None  # a copy: restamped
    assert parser.calls == 1
    assert service.status(who, uri, "e2")["status"] == "extracted"  # type: ignore[index]
    assert service.status(who, uri, "e3")["status"] == "pending"  # type: ignore[index]
    assert "First text." in service.read_view(who, uri, first, False)
    assert service.read_view(who, uri, second, False).startswith("[a.pdf")  # stale: unused
    service.file_text(who, uri, second, "e4")
    assert parser.calls == 2 and "Second text." in service.read_view(who, uri, second, False)
    raw = blobs.get("acme/resources/docs/.a.pdf.parsed.json")
    stored = decode(raw)
    assert stored is not None and stored.etag == "e4" and stored.status == "extracted"
    assert decode(raw.replace(b'"version": 1', b'"version": 99')) is None
    outcome = LibraryParsers().parse("b.bin", bytes(range(256)))
    assert decode(encode(outcome, "0" * 64, "e")) == decode(encode(outcome, "0" * 64, "e"))
