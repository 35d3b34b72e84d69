"""Memory types and memory files: where an extracted memory lives and how its body is written.

The table mirrors the built-in OpenViking memory templates (docs/api.md, "The viking://
tree"). Paths are relative to a memory root (`viking://user/{uid}/memories`, or a peer's
`viking://user/{uid}/peers/{peer}/memories`). Every template field is sanitised, so whatever an
extractor (or an LLM) puts in a field, the path stays a handful of safe segments below the root.

A memory body is `# Summary\\n\\n<summary>\\n\\n<content>`; the MEMORY_FIELDS trailer is added
by the caller with `skald.domain.text.memoryfile.with_memory_fields`.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date

from skald.domain.errors import InvalidArgument
from skald.domain.memory.revision import in_scope, retract, revise
from skald.domain.paths.tags import normalize_tags
from skald.domain.paths.uri import validate_identifier
from skald.domain.text.memoryfile import memory_body

MODE_UPSERT = "upsert"
MODE_ADD_ONLY = "add_only"

# How an upsert folds new content into an existing file.
MERGE_NEWEST_FIRST = "newest_first"  # facts about the user: the newest statement leads
MERGE_APPEND = "append"  # knowledge that accumulates in the order it was learnt
MERGE_ADD_ONLY = "add_only"  # logs: earlier entries are never touched

MAX_SEGMENT_CHARS = 120
# uri._check_segment rejects segments above 255 UTF-8 bytes; stay well below it.
MAX_SEGMENT_BYTES = 240
MAX_SUMMARY_CHARS = 240
SUMMARY_HEADING = "# Summary"
UNTITLED = "untitled"
ENTRY_SEPARATOR = "---"


@dataclass(frozen=True)
class MemoryTypeSpec:
    name: str
    template: str  # relative to the memory root
    mode: str  # upsert | add_only
    merge: str  # newest_first | append | add_only
    fields: tuple[str, ...]  # template fields an operation must supply
    description: str


MEMORY_TYPES: dict[str, MemoryTypeSpec] = {
    spec.name: spec
    for spec in (
        MemoryTypeSpec(
            "preferences",
            "preferences/{user}/{topic}.md",
            MODE_UPSERT,
            MERGE_NEWEST_FIRST,
            ("user", "topic"),
            "What the user likes, dislikes or habitually uses, one topic per file.",
        ),
        MemoryTypeSpec(
            "entities",
            "entities/{category}/{name}.md",
            MODE_UPSERT,
            MERGE_APPEND,
            ("category", "name"),
            "People, organisations, places, pets and things the user mentions.",
        ),
        MemoryTypeSpec(
            "events",
            "events/{YYYY}/{MM}/{DD}/{event_name}.md",
            MODE_ADD_ONLY,
            MERGE_ADD_ONLY,
            ("event_name",),
            "Things that happened or will happen on a given day.",
        ),
        MemoryTypeSpec(
            "cases",
            "cases/{case_name}.md",
            MODE_UPSERT,
            MERGE_APPEND,
            ("case_name",),
            "A problem and how it was solved.",
        ),
        MemoryTypeSpec(
            "experiences",
            "experiences/{experience_name}.md",
            MODE_UPSERT,
            MERGE_APPEND,
            ("experience_name",),
            "Lessons learnt, e.g. a tool call that failed and how it was fixed.",
        ),
        MemoryTypeSpec(
            "trajectories",
            "trajectories/{name}_{session_ts}{archive_suffix}.md",
            MODE_ADD_ONLY,
            MERGE_ADD_ONLY,
            ("name",),
            "The ordered tool calls of one archived conversation.",
        ),
        MemoryTypeSpec(
            "identity",
            "identity.md",
            MODE_UPSERT,
            MERGE_NEWEST_FIRST,
            (),
            "Who the user is: name and how they want to be addressed.",
        ),
        MemoryTypeSpec(
            "soul",
            "soul.md",
            MODE_UPSERT,
            MERGE_NEWEST_FIRST,
            (),
            "The agent's own persona and principles.",
        ),
        MemoryTypeSpec(
            "profile",
            "profile.md",
            MODE_UPSERT,
            MERGE_NEWEST_FIRST,
            (),
            "Stable facts about the user: work, home, role.",
        ),
    )
}

# Template values that are names (lower-cased, as OpenViking does); the rest keep their case.
_CASE_KEPT = frozenset({"user", "session_ts", "archive_suffix"})
# Values supplied by the caller rather than the operation: never the empty-name fallback.
_CALLER_VALUES = frozenset({"session_ts", "archive_suffix", "YYYY", "MM", "DD"})
_CALLER_VALUE_CHARS = 40
_PLACEHOLDER = re.compile(r"\{([A-Za-z_]+)\}")
# Separators, the URI parser's specials (`%` encodings, `{}` path variables) and characters
# some filesystems refuse.
_UNSAFE_CHARS = frozenset('/\\%{}<>:"|?*')
_DROPPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn"})
_LIST_MARKER = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_DASHES = re.compile(r"-{2,}")


@dataclass
class MemoryOperation:
    memory_type: str
    fields: dict[str, str] = field(default_factory=dict)  # template fields; events may add "date"
    content: str = ""
    summary: str = ""
    tags: list[str] = field(default_factory=list)  # extra "k=v" tags
    source_message_ids: list[str] = field(default_factory=list)
    peer_id: str | None = None


@dataclass
class Retraction:
    """A statement that something is no longer true ("I no longer use Poetry"): every line of
    the speaker's personal memories stating `phrase` is removed."""

    phrase: str
    source_message_ids: list[str] = field(default_factory=list)
    peer_id: str | None = None


def memory_type_spec(memory_type: str) -> MemoryTypeSpec:
    spec = MEMORY_TYPES.get(memory_type)
    if spec is None:
        raise InvalidArgument(
            f"Unknown memory type '{memory_type}': one of {', '.join(MEMORY_TYPES)}",
            {"memory_type": memory_type},
        )
    return spec


def is_add_only(memory_type: str) -> bool:
    return memory_type_spec(memory_type).mode == MODE_ADD_ONLY


# --------------------------------------------------------------------------------------------
# Validation


def validate_operation(op: MemoryOperation) -> None:
    """Raises InvalidArgument on an unknown type, a missing or blank template field, a bad
    event date, bad tags, a bad peer id, or an operation with neither content nor summary."""
    spec = memory_type_spec(op.memory_type)
    if not isinstance(op.fields, dict):
        raise InvalidArgument("Memory fields must be an object of strings")
    for key, value in op.fields.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidArgument(
                f"Memory field '{key}' must be a string", {"memory_type": op.memory_type}
            )
    missing = [f for f in spec.fields if not op.fields.get(f, "").strip()]
    if missing:
        raise InvalidArgument(
            f"Memory type '{op.memory_type}' needs the fields {', '.join(missing)}",
            {"memory_type": op.memory_type, "missing": missing},
        )
    if op.memory_type == "events" and "date" in op.fields:
        parse_event_date(op.fields["date"])
    if not isinstance(op.content, str) or not isinstance(op.summary, str):
        raise InvalidArgument("Memory content and summary must be strings")
    if not op.content.strip() and not op.summary.strip():
        raise InvalidArgument(f"Empty {op.memory_type} memory: no content and no summary")
    normalize_tags(op.tags)
    if op.peer_id is not None:
        validate_identifier(op.peer_id, "peer id")


def parse_event_date(value: str) -> date:
    try:
        return date.fromisoformat(value.strip()[:10])
    except ValueError:
        raise InvalidArgument(f"Invalid event date '{value}': use YYYY-MM-DD") from None


def event_date(op: MemoryOperation, when: date) -> date:
    """An event's own `date` field wins over the caller's default day."""
    raw = op.fields.get("date")
    return parse_event_date(raw) if raw else when


# --------------------------------------------------------------------------------------------
# Paths


def sanitize_segment(
    value: str,
    *,
    lower: bool = True,
    max_chars: int = MAX_SEGMENT_CHARS,
    max_bytes: int = MAX_SEGMENT_BYTES,
    empty: str = UNTITLED,
) -> str:
    """One safe path segment: NFKC-normalised (so look-alike slashes and dots become real ones
    before they are checked), lower-cased, separators and specials turned into `-`, control
    and format characters dropped, whitespace collapsed (spaces kept), no leading or trailing
    dots or spaces, at most `max_chars` characters and `max_bytes` UTF-8 bytes."""
    text = unicodedata.normalize("NFKC", value)
    if lower:
        text = text.lower()
    out: list[str] = []
    for ch in text:
        if ch in _UNSAFE_CHARS:
            out.append("-")
        elif ch.isspace():
            out.append(" ")
        elif unicodedata.category(ch) not in _DROPPED_CATEGORIES:
            out.append(ch)
    cleaned = " ".join("".join(out).split()).strip(" .")
    cleaned = _clip_segment(cleaned, max_chars, max_bytes).rstrip(" .")
    return cleaned or empty


def slugify(
    value: str,
    *,
    lower: bool = True,
    max_chars: int = MAX_SEGMENT_CHARS,
    max_bytes: int = MAX_SEGMENT_BYTES,
    empty: str = UNTITLED,
) -> str:
    """A file-name slug: the sanitised segment with every run of characters other than
    letters, digits and `_` turned into one `-` ("Concise answers, code first" ->
    "concise-answers-code-first"). Letters of any script are kept."""
    text = sanitize_segment(
        value, lower=lower, max_chars=10 * max_chars, max_bytes=10 * max_bytes, empty=""
    )
    slug = "".join(ch if ch.isalnum() or ch == "_" else "-" for ch in text)
    slug = _DASHES.sub("-", slug).strip("-_")
    slug = _clip_segment(slug, max_chars, max_bytes).strip("-_")
    return slug or empty


def _clip_segment(text: str, max_chars: int, max_bytes: int) -> str:
    text = text[: max(max_chars, 0)]
    while len(text.encode("utf-8")) > max_bytes:
        text = text[:-1]
    return text


def memory_path(op: MemoryOperation, *, session_ts: str, archive_suffix: str, when: date) -> str:
    """The file of `op` relative to the memory root, e.g.
    `preferences/alice/green-tea.md` or `events/2026/05/06/shipped-the-migration.md`.
    Events use `op.fields["date"]` (YYYY-MM-DD) when given, else `when`."""
    spec = memory_type_spec(op.memory_type)
    values: dict[str, str] = {k: v for k, v in op.fields.items() if isinstance(v, str)}
    values["session_ts"] = session_ts
    values["archive_suffix"] = archive_suffix
    if "{YYYY}" in spec.template:
        day = event_date(op, when)
        values.update(YYYY=f"{day.year:04d}", MM=f"{day.month:02d}", DD=f"{day.day:02d}")
    return "/".join(_render_segment(seg, values) for seg in spec.template.split("/"))


def _render_segment(template: str, values: dict[str, str]) -> str:
    ext = ".md" if template.endswith(".md") else ""
    stem = template[: len(template) - len(ext)]
    names = _PLACEHOLDER.findall(stem)
    literal_len = len(_PLACEHOLDER.sub("", stem))
    rendered: dict[str, str] = {}
    for name in names:
        if name in _CALLER_VALUES:
            rendered[name] = sanitize_segment(
                values.get(name, ""), lower=False, max_chars=_CALLER_VALUE_CHARS, empty=""
            )
    fixed = literal_len + len(ext) + sum(len(v) for v in rendered.values())
    fixed_bytes = fixed + sum(len(v.encode("utf-8")) - len(v) for v in rendered.values())
    free_names = [n for n in names if n not in _CALLER_VALUES]
    # Only names are shortened, so the session and archive suffix that make a trajectory
    # unique always survive.
    share = max((MAX_SEGMENT_CHARS - fixed) // max(len(free_names), 1), 1)
    share_bytes = max((MAX_SEGMENT_BYTES - fixed_bytes) // max(len(free_names), 1), 4)
    for name in free_names:
        rendered[name] = _name_segment(name, values.get(name, ""), share, share_bytes)
    segment = _PLACEHOLDER.sub(lambda m: rendered[m.group(1)], stem)
    # A literal-only stem ("identity") or a composed one is re-checked as a whole.
    segment = sanitize_segment(
        segment,
        lower=False,
        max_chars=MAX_SEGMENT_CHARS - len(ext),
        max_bytes=MAX_SEGMENT_BYTES - len(ext),
    )
    return segment + ext


def _name_segment(
    name: str, value: str, max_chars: int = MAX_SEGMENT_CHARS, max_bytes: int = MAX_SEGMENT_BYTES
) -> str:
    """Names chosen by an extractor become slugs; ids supplied by the system (the user) are
    only sanitised, so they keep matching the account's identifiers."""
    if name in _CASE_KEPT:
        return sanitize_segment(value, lower=False, max_chars=max_chars, max_bytes=max_bytes)
    return slugify(value, max_chars=max_chars, max_bytes=max_bytes)


def earlier_name(path: str, paths: Iterable[str]) -> str | None:
    """A file of the same directory written before names were slugs ("green tea.md" for
    "green-tea.md"): the memory to carry over, so that one fact keeps one file."""
    parent, _, name = path.rpartition("/")
    stem = name.removesuffix(".md")
    for other in paths:
        o_parent, _, o_name = other.rpartition("/")
        if (
            other != path
            and o_parent == parent
            and o_name.endswith(".md")
            and slugify(o_name.removesuffix(".md")) == stem
        ):
            return other
    return None


def operation_key(op: MemoryOperation) -> tuple[str, str, tuple[tuple[str, str], ...]]:
    """Two operations with the same key target the same file (given the same archive)."""
    spec = memory_type_spec(op.memory_type)
    keyed = [*spec.fields, "date"] if spec.name == "events" else list(spec.fields)
    fields = tuple((k, _name_segment(k, op.fields.get(k, ""))) for k in keyed if k in op.fields)
    return op.memory_type, op.peer_id or "", fields


def memory_tags(op: MemoryOperation) -> list[str]:
    """Index tags of the memory file: its type first, then the operation's own."""
    return normalize_tags([f"memory_type={op.memory_type}", *op.tags])


# --------------------------------------------------------------------------------------------
# Bodies


def one_line(text: str, limit: int = MAX_SUMMARY_CHARS) -> str:
    """Whitespace collapsed to single spaces, cut at a word boundary with a marker."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[: max(limit - 1, 1)]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip() + "…"


def parse_memory_body(text: str) -> tuple[str, str]:
    """(summary, content) of a memory file; the trailer is ignored. A file without a
    `# Summary` heading is all content."""
    body = memory_body(text).strip("\n")
    lines = body.split("\n")
    if not lines or lines[0].strip() != SUMMARY_HEADING:
        return "", body.strip()
    rest = lines[1:]
    while rest and not rest[0].strip():
        rest.pop(0)
    summary_lines: list[str] = []
    while rest and rest[0].strip():
        summary_lines.append(rest.pop(0))
    return one_line(" ".join(summary_lines), limit=10_000), "\n".join(rest).strip("\n")


def _summary_of(op: MemoryOperation) -> str:
    summary = one_line(op.summary)
    if summary:
        return summary
    first = next((ln for ln in op.content.split("\n") if ln.strip()), "")
    return one_line(_LIST_MARKER.sub("", first))


def _compose(summary: str, content: str) -> str:
    content = content.strip("\n")
    if not content.strip():
        return f"{SUMMARY_HEADING}\n\n{summary}\n"
    return f"{SUMMARY_HEADING}\n\n{summary}\n\n{content}\n"


def _line_key(line: str) -> str:
    return " ".join(_LIST_MARKER.sub("", line).split()).casefold()


def _distinct(lines: Iterable[str], seen: set[str]) -> list[str]:
    out: list[str] = []
    for line in lines:
        key = _line_key(line)
        if key and key not in seen:
            seen.add(key)
            out.append(line.rstrip())
    return out


def _newest_first(new: str, old: str) -> str:
    """The new lines (their paragraph breaks kept, repeats dropped), then the old lines that
    are not among them."""
    seen: set[str] = set()
    lines: list[str] = []
    for line in new.split("\n"):
        if not line.strip():
            if lines and lines[-1]:
                lines.append("")
        else:
            lines.extend(_distinct([line], seen))
    lines.extend(_distinct(old.split("\n"), seen))
    return "\n".join(lines).strip("\n")


def render_memory(op: MemoryOperation, *, existing: str | None) -> str:
    """The body to write for `op` (without the MEMORY_FIELDS trailer).

    New file: `# Summary`, the one-line summary, the content. Into an existing file:
    - profile, identity, preferences, soul: the summary is replaced; the new content lines
      come first, then the older lines that differ from every new one (newest first);
    - entities, cases, experiences: the summary is replaced; new distinct lines are appended;
    - events, trajectories (add_only): nothing is changed; the entry is appended under a `---`
      rule unless its content is already there.
    An identical line of text is never written twice (lines of bare markup such as code
    fences excepted), and rendering the same operation over its own output changes nothing.
    """
    # with_memory_fields strips trailing whitespace too; doing it here keeps re-renders stable.
    return _render(op, existing).rstrip() + "\n"


def _render(op: MemoryOperation, existing: str | None) -> str:
    spec = memory_type_spec(op.memory_type)
    summary = _summary_of(op)
    content = op.content.strip("\n")
    if existing is None or not memory_body(existing).strip():
        if spec.merge == MERGE_NEWEST_FIRST:
            content = _newest_first(content, "")
        return _compose(summary, content)
    old_summary, old_content = parse_memory_body(existing)
    if spec.merge == MERGE_ADD_ONLY:
        old_body = memory_body(existing).strip("\n")
        probe = content.strip() or summary
        if not probe or probe in old_body:
            return old_body + "\n"
        entry = f"{summary}\n\n{content}" if content.strip() else summary
        return f"{old_body}\n\n{ENTRY_SEPARATOR}\n\n{entry}\n"
    revision = revise(
        old_content.split("\n"), content.split("\n"), by_polarity=spec.name == "preferences"
    )
    if not revision.added and not revision.superseded:
        # Nothing new: a restatement leaves the file as it was.
        return _compose(old_summary or summary, old_content)
    old_content = "\n".join(revision.kept_old).strip("\n")
    content = "\n".join(revision.added).strip("\n")
    if spec.merge == MERGE_NEWEST_FIRST:
        # A restated fact leads again, in the words it was first written in.
        merged = _newest_first("\n".join(revision.ordered).strip("\n"), old_content)
    else:
        merged = _appended(old_content, content)
    if not revision.added:
        summary = _first_fact(merged) or summary
    return _compose(summary or old_summary, merged)


def retract_memory(path: str, text: str, phrases: list[str]) -> tuple[str | None, list[str]] | None:
    """A memory file after retractions: None when no line of it is retracted, else (the
    new body, or None when no fact is left; the removed lines). `path` is relative to the
    memory root (see `memory_revision.in_scope`)."""
    if not phrases:
        return None
    summary, content = parse_memory_body(text)
    by_words = any(in_scope(path, p) for p in phrases)
    scoped = [p for p in phrases if by_words and in_scope(path, p)]
    kept, removed = retract(content.split("\n"), phrases, by_words=False)
    if scoped:
        kept, more = retract(kept, scoped, by_words=True)
        removed += more
    if not removed:
        return None
    if not any(any(c.isalnum() for c in ln) for ln in kept):
        return None, removed
    remaining = "\n".join(kept).strip("\n")
    if retract([summary], phrases, by_words=bool(scoped))[1]:
        summary = _first_fact(remaining)
    return _compose(summary, remaining).rstrip() + "\n", removed


def dropped_lines(before: str, after: str) -> list[str]:
    """The fact lines of the `before` body that the `after` body no longer holds."""
    kept = {_line_key(ln) for ln in parse_memory_body(after)[1].split("\n")}
    return [
        ln
        for ln in parse_memory_body(before)[1].split("\n")
        if any(c.isalnum() for c in ln) and _line_key(ln) not in kept
    ]


def _first_fact(content: str) -> str:
    first = next((ln for ln in content.split("\n") if any(c.isalnum() for c in ln)), "")
    return one_line(_LIST_MARKER.sub("", first))


def _appended(old: str, new: str) -> str:
    """The old text untouched, then the new lines it does not hold yet. Markup-only lines
    (code fences, rules) come along only when the new text adds a real line."""
    seen = {_line_key(ln) for ln in old.split("\n")}
    added: list[str] = []
    meaningful = False
    for line in new.split("\n"):
        key = _line_key(line)
        if not any(ch.isalnum() for ch in key):
            if key or (added and added[-1]):
                added.append(line.rstrip())
        elif key not in seen:
            seen.add(key)
            added.append(line.rstrip())
            meaningful = True
    if not meaningful:
        return old.strip("\n")
    return "\n".join([old.rstrip("\n"), "\n".join(added).strip("\n")]).strip("\n")
