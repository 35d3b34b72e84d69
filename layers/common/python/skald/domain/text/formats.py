"""File formats: which files are documents to convert to Markdown, which are media, where an
added media file is placed (OpenViking's rule), and how formats are recognised."""

from __future__ import annotations

from dataclasses import dataclass

from skald.domain.text.decoding import is_text

DOCUMENT = "document"
IMAGE = "image"
AUDIO = "audio"
VIDEO = "video"
BINARY = "binary"
TEXT = "text"

DOCUMENT_EXT = {
    ".pdf": "pdf",
    ".docx": "docx",
    ".pptx": "pptx",
    ".xlsx": "xlsx",
    ".xlsm": "xlsx",
    ".csv": "csv",
    ".tsv": "tsv",
    ".html": "html",
    ".htm": "html",
    ".xhtml": "html",
    ".epub": "epub",
    ".ipynb": "ipynb",
}
# The media extensions OpenViking recognises.
IMAGE_EXT = frozenset(
    {
        ".png",
        ".jpg",
        ".jpeg",
        ".gif",
        ".bmp",
        ".webp",
        ".svg",
        ".tiff",
        ".tif",
        ".ico",
        ".dib",
        ".icns",
        ".sgi",
        ".jp2",
    }
)
AUDIO_EXT = frozenset({".mp3", ".wav", ".ogg", ".flac", ".aac", ".m4a", ".opus", ".ac3"})
VIDEO_EXT = frozenset({".mp4", ".avi", ".mov", ".mkv", ".webm", ".flv", ".wmv", ".ts"})
# OpenViking places an added media file under viking://resources/<dir>/YYYY/MM/DD/<stem>.
MEDIA_DIRS = {IMAGE: "images", AUDIO: "audio", VIDEO: "video"}
# Formats whose source is text meant for people too: `read` shows their Markdown, `read raw`
# (and `read` before parsing) their source. Any other format's source is never shown as text,
# even when its bytes happen to be ASCII (an uncompressed PDF).
TEXT_SOURCES = frozenset({"csv", "tsv", "html", "ipynb", "svg"})

# Magic numbers of content sent without (or with a wrong) extension.
_MAGIC: tuple[tuple[bytes, str, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", IMAGE, "png"),
    (b"\xff\xd8\xff", IMAGE, "jpeg"),
    (b"GIF87a", IMAGE, "gif"),
    (b"GIF89a", IMAGE, "gif"),
    (b"II*\x00", IMAGE, "tiff"),
    (b"MM\x00*", IMAGE, "tiff"),
    (b"ID3", AUDIO, "mp3"),
    (b"fLaC", AUDIO, "flac"),
    (b"OggS", AUDIO, "ogg"),
    (b"\x1aE\xdf\xa3", VIDEO, "mkv"),
)
_SAME_FORMAT = {"jpg": "jpeg", "tif": "tiff"}


@dataclass(frozen=True)
class FileFormat:
    kind: str  # text | document | image | audio | video | binary
    format: str  # pdf, docx, png, mp3, ... ("" for plain text and unknown binary)

    @property
    def converted(self) -> bool:
        """Whether the file is read and indexed through its extracted text."""
        return self.kind != TEXT

    @property
    def text_source(self) -> bool:
        return self.kind == TEXT or self.format in TEXT_SOURCES


def suffix(name: str) -> str:
    dot = name.rfind(".")
    return name[dot:].lower() if dot > 0 else ""


def media_kind(name: str) -> str | None:
    """image, audio or video by extension (how OpenViking places an added file)."""
    ext = suffix(name)
    if ext in IMAGE_EXT:
        return IMAGE
    if ext in AUDIO_EXT:
        return AUDIO
    if ext in VIDEO_EXT:
        return VIDEO
    return None


def media_base_parts(kind: str, day: str) -> tuple[str, ...]:
    """Path parts below viking://resources for media added without a target; `day` is
    `YYYY/MM/DD`."""
    return (MEDIA_DIRS[kind], *day.split("/"))


def detect(name: str, data: bytes, *, text: bool | None = None) -> FileFormat:
    """The format of a file from its name, then its leading bytes. Text stays text unless
    its extension names a document format (CSV, HTML, notebooks). `text`: whether `data` is
    text, when the caller already knows."""
    ext = suffix(name)
    head = data[:16]
    if ext in DOCUMENT_EXT:
        return FileFormat(DOCUMENT, DOCUMENT_EXT[ext])
    kind = media_kind(name)

    def textual() -> bool:
        return is_text(data) if text is None else text

    if kind is not None and not (ext == ".ts" and textual()):  # .ts: TypeScript or MPEG-TS
        return FileFormat(kind, _SAME_FORMAT.get(ext[1:], ext[1:]))
    # A signature counts for binary content only: a note that starts with "ID3" is text.
    # An uncompressed PDF is ASCII and still a PDF.
    if head.startswith(b"%PDF-"):
        return FileFormat(DOCUMENT, "pdf")
    if textual():
        return FileFormat(TEXT, "")
    for magic, kind, fmt in _MAGIC:
        if head.startswith(magic):
            return FileFormat(kind, fmt)
    if head[:4] == b"RIFF" and head[8:12] in (b"WAVE", b"AVI ", b"WEBP"):
        riff = {b"WAVE": (AUDIO, "wav"), b"AVI ": (VIDEO, "avi"), b"WEBP": (IMAGE, "webp")}
        return FileFormat(*riff[head[8:12]])
    if head[4:8] == b"ftyp":
        return FileFormat(VIDEO, "mp4")
    return FileFormat(BINARY, ext[1:])
