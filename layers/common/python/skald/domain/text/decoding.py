"""What is text: the one rule deciding which bytes may reach sidecars, the keyword index and
the embedder. Everything else is binary and is only ever described (by its parsed text or its
metadata), never indexed as it is."""

from __future__ import annotations

import codecs
import re

# C0 controls other than tab, newline, carriage return, form feed, vertical tab and escape (logs
# keep ANSI colours), DEL and the C1 block: binary data is full of them, text almost never.
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1a\x1c-\x1f\x7f-\x9f]")
# What cleaned text keeps out: every control but tab and newline, lone surrogates, and
# the non-characters U+FFFE / U+FFFF.
_UNCLEAN = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")
# At most this share of control characters still counts as text (a stray form feed or NUL
# in a long log); binary formats run far above it.
MAX_CONTROL_RATIO = 0.01
SAMPLE_CHARS = 65536


def decode_text(data: bytes) -> str | None:
    """The text of `data`, or None when it is binary. Text is UTF-8 (a BOM allowed), UTF-16
    with a BOM, or else legacy 8-bit text (read as Windows-1252), with almost no control
    characters: compressed or binary data has about one control byte in ten."""
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8) :]
    elif data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        try:
            return _checked(data.decode("utf-16"))
        except UnicodeDecodeError:
            return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        if b"\x00" in data[:SAMPLE_CHARS]:
            return None
        text = data.decode("cp1252", errors="replace")
    return _checked(text)


def is_text(data: bytes) -> bool:
    return decode_text(data) is not None


def _checked(text: str) -> str | None:
    sample = text[:SAMPLE_CHARS]
    if not sample:
        return text
    controls = len(_CONTROL.findall(sample))
    if controls > len(sample) * MAX_CONTROL_RATIO:
        return None
    return text


def clean_text(text: str) -> str:
    """Text as stored and indexed: newlines normalised, controls and unpaired surrogates out.
    Every parser's output passes here before it is kept."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\f", "\n")
    return _UNCLEAN.sub("", text)


def is_clean_text(text: str) -> bool:
    return _UNCLEAN.search(text) is None
