"""Images, audio and video are described from their metadata: Pillow (MIT-CMU) reads image
dimensions, format and EXIF; tinytag (MIT) reads duration, MIME type (with the codec where the
container names it), sample rate, channels and tags of audio, and the duration of MP4 video.
The description is Markdown, like any parsed document, and an image also gets a small JPEG
preview a vision model can caption (never stored)."""

from __future__ import annotations

import io
import re
import warnings
from typing import Any

from skald.adapters.parsers.common import Unparseable, Writer, cell
from skald.domain.text.decoding import decode_text
from skald.domain.text.formats import AUDIO, IMAGE, FileFormat

PREVIEW_PX = 1024
_EXIF_IFD = 0x8769
_DATE_ORIGINAL = 0x9003
_DATE = 0x0132
_MAKE, _MODEL = 0x010F, 0x0110
_TAGS = ("title", "artist", "album", "albumartist", "composer", "genre", "year", "comment")


def parse_media(data: bytes, out: Writer, *, name: str, fmt: FileFormat) -> None:
    if fmt.kind == IMAGE:
        facts = _svg(data) if fmt.format == "svg" else _image(data, out, fmt)
    else:
        facts = _audio_video(data, name, fmt)
    out.meta.update(facts)
    out.add(_describe(name, fmt, facts))


def _image(data: bytes, out: Writer, fmt: FileFormat) -> dict[str, Any]:
    from PIL import Image, UnidentifiedImageError

    Image.MAX_IMAGE_PIXELS = out.limits.max_pixels
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(data))
            facts: dict[str, Any] = {"width": img.width, "height": img.height, "mode": img.mode}
            exif = img.getexif()
            taken = exif.get_ifd(_EXIF_IFD).get(_DATE_ORIGINAL) or exif.get(_DATE)
            if taken:
                facts["taken"] = _exif_date(str(taken))
            camera = " ".join(str(exif.get(t, "")).strip() for t in (_MAKE, _MODEL)).strip()
            if camera:
                facts["camera"] = cell(camera)
            frames = int(getattr(img, "n_frames", 1))
            if frames > 1:
                facts["frames"] = frames
            img.thumbnail((PREVIEW_PX, PREVIEW_PX))
            preview = io.BytesIO()
            img.convert("RGB").save(preview, "JPEG", quality=85)
            out.preview = preview.getvalue()
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise Unparseable(f"the image is larger than {out.limits.max_pixels} pixels") from None
    except UnidentifiedImageError:
        raise Unparseable(
            f"corrupt or unsupported {fmt.format.upper()} image: its header is not readable"
        ) from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise Unparseable(f"corrupt or unsupported {fmt.format.upper()} image: {exc}") from None
    return facts


def _exif_date(raw: str) -> str:
    m = re.match(r"^(\d{4}):(\d{2}):(\d{2})[ T](\d{2}:\d{2}:\d{2})", raw.strip())
    return f"{m.group(1)}-{m.group(2)}-{m.group(3)} {m.group(4)}" if m else cell(raw)


def _svg(data: bytes) -> dict[str, Any]:
    text = decode_text(data)
    if text is None or "<svg" not in text:
        raise Unparseable("corrupt SVG image: not SVG text")
    facts: dict[str, Any] = {}
    root = re.search(r"<svg\b[^>]*>", text)
    for attr in ("width", "height", "viewBox"):
        m = re.search(rf'\b{attr}\s*=\s*"([^"]*)"', root.group(0) if root else "")
        if m:
            facts[attr.lower()] = cell(m.group(1))
    for tag in ("title", "desc"):
        m = re.search(rf"<{tag}\b[^>]*>(.*?)</{tag}>", text, re.DOTALL)
        if m:
            facts[tag] = cell(re.sub(r"<[^>]+>", " ", m.group(1)))[:500]
    return facts


def _audio_video(data: bytes, name: str, fmt: FileFormat) -> dict[str, Any]:
    from tinytag import TinyTag, TinyTagException

    facts: dict[str, Any] = {"bytes": len(data)}
    probe = name if "." in name else f"{name}.{fmt.format}"
    if not TinyTag.is_supported(probe):
        return facts  # no reader for this container: its name, format and size
    try:
        tag = TinyTag.get(file_obj=io.BytesIO(data), filename=probe)
    except (TinyTagException, OSError, ValueError) as exc:
        raise Unparseable(f"corrupt {fmt.format.upper()} {fmt.kind}: {exc}") from None
    if tag.duration:
        facts["duration_s"] = round(float(tag.duration), 3)
    if tag.mime_type and fmt.kind == AUDIO:  # for video tinytag reports its audio track's
        facts["mime_type"] = cell(tag.mime_type)
    for key in ("samplerate", "channels", "bitrate"):
        value = getattr(tag, key, None)
        if value:
            facts[key] = round(value) if isinstance(value, float) else value
    tags = {k: cell(getattr(tag, k, None))[:300] for k in _TAGS if getattr(tag, k, None)}
    if tags:
        facts["tags"] = tags
    return facts


def _duration(seconds: float) -> str:
    s = round(seconds)
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    if h:
        return f"{h} h {m:02d} min {sec:02d} s"
    return f"{m} min {sec:02d} s" if m else f"{seconds:.1f} s"


# Facts listed as they are, in this order, after type, dimensions, date, camera and duration.
_LISTED_FACTS = (
    ("mime_type", "MIME type: {}"),
    ("samplerate", "Sample rate: {} Hz"),
    ("channels", "Channels: {}"),
    ("bitrate", "Bitrate: {} kbps"),
    ("title", "Title: {}"),
    ("desc", "Desc: {}"),
)


def _describe(name: str, fmt: FileFormat, facts: dict[str, Any]) -> str:
    """`# name`, a one-sentence summary (the file's abstract), then the facts as a list."""
    label = f"{fmt.format.upper()} {fmt.kind}"
    summary = ", ".join(_summary_bits(label, fmt, facts)) + "."
    return f"# {name}\n\n{summary}\n\n" + "\n".join(_fact_items(label, fmt, facts)) + "\n"


def _dimensions(fmt: FileFormat, facts: dict[str, Any]) -> str | None:
    if "width" not in facts or "height" not in facts:
        return None
    dims = f"{facts['width']} × {facts['height']}"
    return dims + " pixels" if fmt.kind == IMAGE and fmt.format != "svg" else dims


def _summary_bits(label: str, fmt: FileFormat, facts: dict[str, Any]) -> list[str]:
    bits = [label]
    dims = _dimensions(fmt, facts)
    if dims is not None:
        bits.append(dims)
    if facts.get("taken"):
        bits.append(f"taken {facts['taken']}")
    if facts.get("duration_s"):
        bits.append(_duration(facts["duration_s"]))
    if fmt.kind == AUDIO and (facts.get("tags") or {}).get("title"):
        bits.append(f'"{facts["tags"]["title"]}"')
    return bits


def _fact_items(label: str, fmt: FileFormat, facts: dict[str, Any]) -> list[str]:
    items: list[str] = [f"- Type: {label}"]
    dims = _dimensions(fmt, facts)
    if dims is not None:
        items.append(f"- Dimensions: {dims}")
    if facts.get("taken"):
        items.append(f"- Taken: {facts['taken']} (EXIF)")
    if facts.get("camera"):
        items.append(f"- Camera: {facts['camera']}")
    if facts.get("duration_s"):
        items.append(f"- Duration: {_duration(facts['duration_s'])}")
    items += [f"- {text.format(facts[key])}" for key, text in _LISTED_FACTS if facts.get(key)]
    items += [f"- {key.capitalize()}: {value}" for key, value in (facts.get("tags") or {}).items()]
    return items
