"""Memory extraction: turn the messages of an archived conversation into memory operations.

Two extractors share one interface (`Extractor`):
- `DeterministicExtractor`: rule-based, offline, no model at all. It is the fallback whenever
  no LLM is configured, and the fallback of `LLMExtractor` when the model keeps failing.
- `LLMExtractor`: asks the configured LLM for JSON that matches a schema, validates it and
  retries with the validation error fed back.

Neither touches storage: the caller (the extraction job) applies the operations with
`skald.domain.memory.memory_path` / `render_memory` and writes `memory_diff.json`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from functools import partial
from typing import Any, Literal, Protocol, get_args, runtime_checkable

import pydantic

from skald.domain.errors import InvalidArgument, ProcessingError
from skald.domain.memory import (
    MEMORY_TYPES,
    MERGE_NEWEST_FIRST,
    MemoryOperation,
    memory_type_spec,
    one_line,
    operation_key,
    validate_operation,
)
from skald.domain.tags import parse_tag
from skald.domain.tokens import estimate_tokens
from skald.domain.uri import is_identifier
from skald.ports import LLM, ChatMessage, SessionMessage

# Reason codes of skipped candidates (memory_diff.json "skipped_operations").
SKIP_DUPLICATE = "duplicate"
SKIP_TOO_SHORT = "too_short"
SKIP_PEER_DISABLED = "peer_memory_disabled"
SKIP_NO_MEMORY = "no_memory_found"
SKIP_ASSISTANT = "assistant_message"
SKIP_QUESTION = "question"
SKIP_VAGUE = "vague_object"
SKIP_REQUEST = "request_not_event"
SKIP_INVALID_DATE = "invalid_date"
SKIP_INVALID_PEER = "invalid_peer"
SKIP_INVALID_TAG = "invalid_tag"
SKIP_TOOL_UNRESOLVED = "tool_error_unresolved"
SKIP_EMPTY_ARCHIVE = "empty_archive"
SKIP_LIMIT = "limit_reached"
SKIP_LLM_FAILED = "llm_failed"
SKIP_INVALID_OPERATION = "invalid_operation"

PERSONAL_TYPES = frozenset({"preferences", "identity", "profile", "entities", "events"})


@dataclass
class ExtractionContext:
    user_id: str
    session_id: str
    archive_id: str
    peer_memories: bool = False
    event_tags: list[str] = field(default_factory=list)  # extra "k=v" tags for event memories
    now_iso: str = ""  # fallback date when a message has no usable created_at


@dataclass
class ExtractionResult:
    operations: list[MemoryOperation] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)  # {"reason","detail","message_id"?}
    usage: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Extractor(Protocol):
    def extract(self, messages: Sequence[SessionMessage],
                ctx: ExtractionContext) -> ExtractionResult: ...


# --------------------------------------------------------------------------------------------
# Collecting operations: one operation per target file, skipped candidates with reasons.


class _Collector:
    def __init__(self, max_operations: int, max_skipped: int) -> None:
        self.ops: dict[tuple[str, str, tuple[tuple[str, str], ...]], MemoryOperation] = {}
        self.skipped: list[dict[str, Any]] = []
        self.max_operations = max_operations
        self.max_skipped = max_skipped
        self._dropped_skips = 0

    def skip(self, reason: str, detail: str, message_id: str | None = None) -> None:
        if len(self.skipped) >= self.max_skipped:
            self._dropped_skips += 1
            return
        entry: dict[str, Any] = {"reason": reason, "detail": one_line(detail, 300)}
        if message_id:
            entry["message_id"] = message_id
        self.skipped.append(entry)

    def add(self, op: MemoryOperation) -> bool:
        """Adds `op`, folding it into an earlier operation on the same file. False (and a
        "duplicate" skip) when it brings no new line."""
        msg_id = op.source_message_ids[0] if op.source_message_ids else None
        try:
            validate_operation(op)
        except InvalidArgument as exc:
            self.skip(SKIP_INVALID_OPERATION, f"{op.memory_type}: {exc.message}", msg_id)
            return False
        key = operation_key(op)
        prior = self.ops.get(key)
        if prior is None:
            if len(self.ops) >= self.max_operations:
                self.skip(SKIP_LIMIT, f"{op.memory_type}: {op.summary}", msg_id)
                return False
            self.ops[key] = op
            return True
        known = {_norm(ln) for ln in prior.content.splitlines()}
        fresh = [ln for ln in op.content.splitlines() if ln.strip() and _norm(ln) not in known]
        if not fresh:
            self.skip(SKIP_DUPLICATE, f"{op.memory_type}: {op.summary}", msg_id)
            return False
        if memory_type_spec(op.memory_type).merge == MERGE_NEWEST_FIRST:
            # Same rule as render_memory: the newest statement leads.
            prior.content = "\n".join([*fresh, prior.content])
            prior.summary = op.summary or prior.summary
        else:
            prior.content = "\n".join([prior.content, *fresh])
            if op.memory_type not in {"events", "trajectories"}:
                prior.summary = op.summary or prior.summary
        prior.source_message_ids = _union(prior.source_message_ids, op.source_message_ids)
        prior.tags = _union(prior.tags, op.tags)
        return True

    def result(self, usage: dict[str, Any]) -> ExtractionResult:
        skipped = list(self.skipped)
        if self._dropped_skips:
            skipped.append({"reason": SKIP_LIMIT,
                            "detail": f"{self._dropped_skips} more skipped candidates omitted"})
        return ExtractionResult(list(self.ops.values()), skipped, usage)


def _norm(line: str) -> str:
    return " ".join(line.split()).casefold()


def _union(a: Iterable[str], b: Iterable[str]) -> list[str]:
    out: list[str] = []
    for item in [*a, *b]:
        if item not in out:
            out.append(item)
    return out


# --------------------------------------------------------------------------------------------
# Message helpers shared by both extractors.


def message_text(msg: SessionMessage) -> str:
    texts = [str(p.get("text", "")) for p in msg.parts
             if isinstance(p, dict) and p.get("type") == "text"]
    return "\n".join(t for t in texts if t.strip())


def message_date(msg: SessionMessage) -> date | None:
    return _parse_day(msg.created_at)


def _parse_day(value: str | None) -> date | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.strip().replace("Z", "+00:00")).date()
    except ValueError:
        try:
            return date.fromisoformat(value.strip()[:10])
        except ValueError:
            return None


@dataclass
class ToolCall:
    tool_id: str
    name: str
    status: str
    tool_input: Any
    output: str
    message_id: str


_ERROR_STATUSES = frozenset({"error", "failed", "failure"})
_OK_STATUSES = frozenset({"completed", "success", "succeeded", "done"})


def tool_calls(messages: Sequence[SessionMessage]) -> list[ToolCall]:
    """Tool parts in conversation order. A tool id seen again (a status update) keeps its
    first position and takes its latest state."""
    calls: dict[str, ToolCall] = {}
    for msg in messages:
        for i, part in enumerate(msg.parts):
            if not isinstance(part, dict) or part.get("type") != "tool":
                continue
            tool_id = str(part.get("tool_id") or f"{msg.message_id}#{i}")
            output = part.get("tool_output")
            calls[tool_id] = ToolCall(
                tool_id=tool_id,
                name=str(part.get("tool_name") or "tool"),
                status=str(part.get("tool_status") or "pending").lower(),
                tool_input=part.get("tool_input") or {},
                output="" if output is None else str(output),
                message_id=msg.message_id,
            )
    return list(calls.values())


def _short_json(value: Any, limit: int) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):
        text = str(value)
    return one_line(text, limit)


# --------------------------------------------------------------------------------------------
# Deterministic extraction: patterns.

_FLAGS = re.IGNORECASE
_CODE_BLOCK = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_SENTENCES = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])|\s*\n+\s*")
_CLAUSES = re.compile(
    r"\s*;\s*|,?\s+(?:and|but|so|because|though|although)\s+"
    r"(?=(?:i|i'm|i've|i'd|my|we|we're|our)\b)|,\s+(?=(?:i|i'm|my)\b)", _FLAGS)
_NAME = r"[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*){0,2}"
_NAME_ANY_CASE = r"[^\W\d_][\w'-]*(?:\s+[A-Z][\w'-]*){0,3}"

_PREFERENCES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\bmy\s+favou?rite\s+(?P<topic>[\w' -]{1,40}?)\s+(?:is|are)\s+(?P<obj>.+)",
                _FLAGS), "favourite"),
    (re.compile(r"\bI\s+(?:really\s+|much\s+|strongly\s+|generally\s+|usually\s+)?"
                r"prefer\s+(?P<obj>.+)", _FLAGS), "prefers"),
    (re.compile(r"\bI(?:'d|\s+would)\s+rather\s+(?P<obj>.+)", _FLAGS), "would rather"),
    (re.compile(r"\bI\s+(?:do\s+not|don't|dont)\s+(?:really\s+)?(?:like|enjoy)\s+(?P<obj>.+)",
                _FLAGS), "does not like"),
    (re.compile(r"\bI\s+(?:really\s+|truly\s+)?(?P<verb>hate|dislike|detest|can't\s+stand|"
                r"cannot\s+stand)\s+(?P<obj>.+)", _FLAGS), ""),
    (re.compile(r"\bI\s+(?:really\s+|also\s+|just\s+|absolutely\s+|truly\s+)?"
                r"(?P<verb>like|love|enjoy|adore)\s+(?P<obj>.+)", _FLAGS), ""),
    (re.compile(r"\bI\s+(?P<adv>always|usually|mostly|normally|typically|never)\s+"
                r"use\s+(?P<obj>.+)", _FLAGS), ""),
    (re.compile(r"\bI(?:'m|\s+am)\s+(?:a\s+)?(?:big\s+|huge\s+)?fan\s+of\s+(?P<obj>.+)",
                _FLAGS), "is a fan of"),
]
_VERB_3RD = {"hate": "hates", "dislike": "dislikes", "detest": "detests", "like": "likes",
             "love": "loves", "enjoy": "enjoys", "adore": "adores"}

_IDENTITY: list[tuple[re.Pattern[str], str]] = [
    (re.compile(rf"\b(?i:my\s+name\s+is|my\s+name's)\s+(?P<name>{_NAME_ANY_CASE})"), "Name"),
    (re.compile(rf"\b(?i:call\s+me|I\s+go\s+by|I(?:'m|\s+am)\s+called|people\s+call\s+me)"
                rf"\s+(?P<name>{_NAME_ANY_CASE})"), "Preferred name"),
]

# (pattern, template of the profile line, category of an entity named by the object)
_PROFILE: list[tuple[re.Pattern[str], str, str | None]] = [
    (re.compile(r"\bI\s+(?:currently\s+)?work\s+(?:at|for)\s+(?P<obj>.+)", _FLAGS),
     "{subj} works at {obj}.", "organization"),
    (re.compile(r"\bI(?:'m|\s+am)\s+(?:currently\s+)?(?:working|employed)\s+(?:at|for)\s+"
                r"(?P<obj>.+)", _FLAGS), "{subj} works at {obj}.", "organization"),
    (re.compile(r"\bI\s+work\s+as\s+(?P<obj>.+)", _FLAGS), "{subj} works as {obj}.", None),
    (re.compile(r"\bmy\s+(?:job|role|position|occupation|profession)\s+is\s+(?P<obj>.+)",
                _FLAGS), "{poss_cap} job is {obj}.", None),
    (re.compile(r"\bI\s+(?:currently\s+)?live\s+in\s+(?P<obj>.+)", _FLAGS),
     "{subj} lives in {obj}.", "place"),
    (re.compile(r"\bI(?:'m|\s+am)\s+(?:originally\s+)?from\s+(?P<obj>.+)", _FLAGS),
     "{subj} is from {obj}.", "place"),
    (re.compile(r"\bI\s+(?:just\s+|recently\s+)?moved\s+to\s+(?P<obj>.+)", _FLAGS),
     "{subj} moved to {obj}.", "place"),
    (re.compile(r"\bI(?:'m|\s+am)\s+(?P<obj>\d{1,3})\s+years?\s+old\b", _FLAGS),
     "{subj} is {obj} years old.", None),
    (re.compile(r"\bI(?:'m|\s+am)\s+(?P<obj>an?\s+(?!bit\b|little\b|lot\b|(?:big\s+|huge\s+)?"
                r"fan\b)\w.*)", _FLAGS), "{subj} is {obj}.", None),
    (re.compile(r"\bI\s+speak\s+(?P<obj>.+)", _FLAGS), "{subj} speaks {obj}.", None),
]

_RELATIONS = (r"colleague|co-?worker|friend|best\s+friend|boss|manager|wife|husband|partner|"
              r"sister|brother|mother|mom|mum|father|dad|son|daughter|teammate|neighbou?r|"
              r"cousin|uncle|aunt|girlfriend|boyfriend|mentor|client|grandmother|grandfather")
_PETS = r"dog|cat|puppy|kitten|horse|parrot|rabbit|hamster|bird|pet|turtle"
_RELATION_ENTITY = re.compile(
    rf"\b(?i:my)\s+(?P<rel>(?i:{_RELATIONS}))(?:,)?\s+(?:(?i:named|called)\s+)?(?P<name>{_NAME})")
_PET_ENTITY = re.compile(
    rf"\b(?i:my)\s+(?P<rel>(?i:{_PETS}))(?:'s\s+(?i:name\s+is)|\s+(?i:is\s+)?(?i:named|called)"
    rf"|,)?\s+(?P<name>{_NAME})")
# Employers and home places stated in a profile clause; the profile detector names them.
_PROFILE_NAMED = re.compile(
    rf"\b(?i:work(?:s|ed|ing)?\s+(?:at|for)|employed\s+(?:at|for|by)|live[sd]?\s+in|"
    rf"living\s+in|moved\s+to|(?:I'm|I\s+am)\s+(?:originally\s+)?from)\s+(?P<name>{_NAME})")
_STUDY_ORG = re.compile(
    rf"\b(?P<verb>(?i:intern(?:ed|ing)?\s+at|stud(?:y|ied|ying)\s+at|joined|"
    rf"(?:was|got)\s+hired\s+by))\s+(?P<name>{_NAME})")
_TRAVEL = re.compile(
    rf"\b(?i:trip\s+to|travel(?:l)?(?:ing|ed)?\s+to|fly\s+to|flew\s+to|flying\s+to|"
    rf"visit(?:ing|ed)?|going\s+to)\s+(?P<name>{_NAME})")
_CAP_RUN = re.compile(r"\b[A-Z][\w'&.-]*(?:\s+(?:[A-Z][\w'&.-]*|of|de|van|von|der|la|&))+")
_ORG_SUFFIXES = frozenset({"inc", "corp", "corporation", "ltd", "gmbh", "llc", "ag", "sa",
                           "university", "bank", "labs", "group", "company", "foundation",
                           "institute", "co", "systems", "technologies", "software", "college"})
_PLACE_SUFFIXES = frozenset({"city", "street", "park", "river", "mountain", "mountains", "lake",
                             "airport", "station", "island", "beach", "valley", "county"})
def _wordset(text: str) -> frozenset[str]:
    return frozenset(text.split())


_ORG_PREFIXES = frozenset({"university", "bank", "department", "ministry", "college"})
_PLACE_PREFIXES = frozenset({"lake", "mount", "mt", "fort", "cape", "isle", "port"})
_CAP_STOPWORDS = _wordset(
    "i i'm i've i'd my the a an we our on in at yesterday today tomorrow last next this that "
    "these those hi hello hey thanks thank please can could would should will also and but so "
    "then it he she they you your dear ok okay yes no monday tuesday wednesday thursday "
    "friday saturday sunday january february march april may june july august september "
    "october november december when what why how where who if as for with by from")

_MONTHS = {name: i for i, names in enumerate(
    [("january", "jan"), ("february", "feb"), ("march", "mar"), ("april", "apr"), ("may",),
     ("june", "jun"), ("july", "jul"), ("august", "aug"), ("september", "sep", "sept"),
     ("october", "oct"), ("november", "nov"), ("december", "dec")], start=1) for name in names}
_MONTH_RE = "|".join(sorted(_MONTHS, key=len, reverse=True))
_WEEKDAYS = {d: i for i, d in enumerate(
    ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"])}
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
            "seven": 7, "eight": 8, "nine": 9, "ten": 10}
_DATE_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("iso", re.compile(r"\b(?:on\s+)?(?P<y>\d{4})-(?P<m>\d{1,2})-(?P<d>\d{1,2})\b", _FLAGS)),
    ("month_day", re.compile(
        rf"\b(?:on\s+)?(?P<mon>{_MONTH_RE})\.?\s+(?P<d>\d{{1,2}})(?:st|nd|rd|th)?\b"
        r"(?:,?\s+(?P<y>\d{4})\b)?", _FLAGS)),
    ("day_month", re.compile(
        rf"\b(?:on\s+)?(?:the\s+)?(?P<d>\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?"
        rf"(?P<mon>{_MONTH_RE})\b\.?(?:,?\s+(?P<y>\d{{4}})\b)?", _FLAGS)),
    ("relative", re.compile(
        r"\b(?P<w>the\s+day\s+before\s+yesterday|the\s+day\s+after\s+tomorrow|yesterday|today|"
        r"tonight|tomorrow|this\s+(?:morning|afternoon|evening))\b", _FLAGS)),
    ("weekday", re.compile(
        r"\b(?:on\s+)?(?P<dir>last|next|this\s+past|this\s+coming|this)\s+"
        r"(?P<wd>monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b", _FLAGS)),
    ("ago", re.compile(
        r"\b(?P<n>\d{1,3}|a|an|one|two|three|four|five|six|seven|eight|nine|ten)\s+"
        r"(?P<unit>days?|weeks?)\s+ago\b", _FLAGS)),
    ("in", re.compile(
        r"\bin\s+(?P<n>\d{1,3}|a|an|one|two|three|four|five|six|seven|eight|nine|ten)\s+"
        r"(?P<unit>days?|weeks?)\b", _FLAGS)),
]
_RELATIVE_DAYS = {"the day before yesterday": -2, "yesterday": -1, "today": 0, "tonight": 0,
                  "this morning": 0, "this afternoon": 0, "this evening": 0, "tomorrow": 1,
                  "the day after tomorrow": 2}
_REQUEST = re.compile(r"\b(?:you|your|please|can\s+we|could\s+we|let's|help\s+me)\b", _FLAGS)
_LEADING_FILLER = _wordset(
    "hi hello hey thanks please on at in i we i've we've i'm we're then so and but also "
    "finally just actually well oh ok okay um")
_NAME_TAIL_DROP = _wordset(
    "a an the my our your their with to for of and or but so in on at by from")


def _short_name(words: Sequence[str], limit: int) -> str:
    """A file name from the first words of a phrase, without fillers at either end."""
    kept = list(words)
    while kept and kept[0].lower() in _LEADING_FILLER:
        kept.pop(0)
    kept = kept[:limit]
    while kept and kept[-1].lower() in _NAME_TAIL_DROP:
        kept.pop()
    return " ".join(kept).lower()
_PRONOUNS_3RD = [(re.compile(r"\bI'm\b", _FLAGS), "they're"),
                 (re.compile(r"\bI've\b", _FLAGS), "they've"),
                 (re.compile(r"\bmyself\b", _FLAGS), "themselves"),
                 (re.compile(r"\bmine\b", _FLAGS), "theirs"),
                 (re.compile(r"\bmy\b", _FLAGS), "their"),
                 (re.compile(r"\bme\b", _FLAGS), "them"),
                 (re.compile(r"\bI\b"), "they")]
_VAGUE_HEADS = _wordset("it that this them these those you your yours him her me us one things "
                         "stuff everything anything something what how")
_TOPIC_CUT = re.compile(
    r"\s+(?:when|if|because|since|while|unless|whenever|as\s+long\s+as|over|rather\s+than|"
    r"instead\s+of|than|compared\s+to)\s+.*$|,.*$", _FLAGS)
_TOPIC_DROP = _wordset("a an the my our your their some any using to")
_TOPIC_TAIL_DROP = _wordset("very much a lot too as well the most best more")


@dataclass(frozen=True)
class _Speaker:
    peer_id: str | None

    @property
    def subj(self) -> str:
        return self.peer_id or "User"

    @property
    def poss_cap(self) -> str:
        return f"{self.peer_id}'s" if self.peer_id else "User's"

    @property
    def poss(self) -> str:
        return f"{self.peer_id}'s" if self.peer_id else "the user's"

    @property
    def label(self) -> str:
        return f"peer {self.peer_id}" if self.peer_id else "user"


def _third_person(text: str) -> str:
    for pattern, repl in _PRONOUNS_3RD:
        text = pattern.sub(repl, text)
    return text


def _clean_object(raw: str) -> str:
    return raw.strip().rstrip(".!?…:;,").strip().strip("\"'").strip()


def _words(text: str) -> list[str]:
    words = (w.rstrip(".'-") for w in re.findall(r"[^\W_][\w'+#.-]*", text))
    return [w for w in words if w]


def _topic_of(obj: str) -> str:
    """A short, deterministic file name for a preference: the object without qualifiers.
    "pytest for testing" -> "testing"; "green tea over coffee" -> "green tea"."""
    text = _clean_object(obj)
    m = re.match(r"^(?P<x>.+?)\s+for\s+(?P<y>.+)$", text, _FLAGS)
    if m:
        text = m.group("y")
    if not text.lower().startswith("to "):
        text = re.sub(r"\s+to\s+.*$", "", text, flags=_FLAGS)
    text = _TOPIC_CUT.sub("", text)
    words = [w.rstrip(".") for w in _words(text)]
    while words and words[0].lower() in _TOPIC_DROP:
        words.pop(0)
    while words and words[-1].lower() in _TOPIC_TAIL_DROP:
        words.pop()
    return " ".join(words[:5]).lower()


def _head_name(text: str) -> str | None:
    """The leading run of capitalised words of `text` ("Acme Corp in Berlin" -> "Acme Corp")."""
    m = re.match(_NAME, text.strip())
    if not m:
        return None
    name = m.group(0).strip()
    return name if name.lower() not in _CAP_STOPWORDS else None


def _category_by_suffix(name: str) -> str:
    words = name.lower().replace(".", "").split()
    if words[-1] in _ORG_SUFFIXES or words[0] in _ORG_PREFIXES:
        return "organization"
    if words[-1] in _PLACE_SUFFIXES or words[0] in _PLACE_PREFIXES:
        return "place"
    return "other"


def _strip_code(text: str) -> str:
    return _INLINE_CODE.sub(" ", _CODE_BLOCK.sub("\n", text))


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCES.split(text) if s and s.strip()]


def _clauses(sentence: str) -> list[str]:
    return [c.strip() for c in _CLAUSES.split(sentence) if c and c.strip()]


@dataclass
class _Candidate:
    op: MemoryOperation
    detail: str


@dataclass
class _DateHit:
    day: date | None  # None: the phrase names an impossible date
    start: int
    end: int
    phrase: str


def _resolve_date(kind: str, m: re.Match[str], base: date) -> date | None:
    try:
        if kind == "iso":
            return date(int(m.group("y")), int(m.group("m")), int(m.group("d")))
        if kind in {"month_day", "day_month"}:
            # A date without a year is read in the year of the message.
            year = int(m.group("y")) if m.group("y") else base.year
            return date(year, _MONTHS[m.group("mon").lower()], int(m.group("d")))
    except ValueError:
        return None
    if kind == "relative":
        return base + timedelta(days=_RELATIVE_DAYS[" ".join(m.group("w").lower().split())])
    if kind == "weekday":
        target = _WEEKDAYS[m.group("wd").lower()]
        direction = " ".join(m.group("dir").lower().split())
        if direction in {"last", "this past"}:
            back = (base.weekday() - target) % 7 or 7
            return base - timedelta(days=back)
        if direction == "next":
            # "next Friday" is read as the Friday of next week (Monday-based weeks).
            return base + timedelta(days=7 - base.weekday() + target)
        if direction == "this coming":
            return base + timedelta(days=(target - base.weekday()) % 7 or 7)
        return base + timedelta(days=(target - base.weekday()) % 7)  # "this Friday": from today
    raw = m.group("n").lower()
    n = int(raw) if raw.isdigit() else _NUMBERS[raw]
    days = n * (7 if m.group("unit").lower().startswith("week") else 1)
    return base - timedelta(days=days) if kind == "ago" else base + timedelta(days=days)


def find_date(sentence: str, base: date) -> _DateHit | None:
    """The first date expression of `sentence`, resolved relative to `base` (the day the
    message was written)."""
    best: _DateHit | None = None
    for kind, pattern in _DATE_PATTERNS:
        m = pattern.search(sentence)
        if m and (best is None or m.start() < best.start):
            best = _DateHit(_resolve_date(kind, m, base), m.start(), m.end(), m.group(0))
    return best


# --------------------------------------------------------------------------------------------
# Deterministic extractor.


class DeterministicExtractor:
    """Rule-based memory extraction: the offline default, used whenever no LLM is configured
    and as the fallback of `LLMExtractor`.

    From the text of user messages (never assistant messages): preferences ("I prefer X",
    "I like X", "I always use X", "I hate X", "my favourite X is Y"), identity ("my name is X",
    "call me X"), profile facts ("I work at X", "I live in X", "I'm a X", "my job is X") into
    one profile file, dated events ("on 2026-05-07 ...", "yesterday ...", "last Monday ...",
    "on May 7 ..." resolved against the message's created_at), entities (relatives and
    colleagues, pets, employers, places, capitalised multi-word names). Per archive: one
    conversation event summarising it, a trajectory when tools were used, and an experience
    for every tool that failed and then succeeded.

    Statements of a peer (`peer_id` set) become the peer's memories when
    `ctx.peer_memories`, else they are skipped with "peer_memory_disabled". Every candidate
    that is not turned into an operation is reported in `skipped` with a reason code.
    """

    def __init__(self, *, max_operations: int = 200, max_skipped: int = 200,
                 max_text_chars: int = 20_000) -> None:
        self.max_operations = max_operations
        self.max_skipped = max_skipped
        self.max_text_chars = max_text_chars

    def extract(self, messages: Sequence[SessionMessage],
                ctx: ExtractionContext) -> ExtractionResult:
        run = _Run(self, ctx)
        return run.extract(messages)


class _Run:
    """State of one deterministic extraction."""

    def __init__(self, cfg: DeterministicExtractor, ctx: ExtractionContext) -> None:
        self.cfg = cfg
        self.ctx = ctx
        self.out = _Collector(cfg.max_operations, cfg.max_skipped)
        self.fallback_day = _parse_day(ctx.now_iso)
        self.own_names: set[str] = set()  # the speakers' own names are no entities
        self.entity_categories: dict[str, str] = {}
        self.personal_ops = 0
        self.event_tags = self._valid_tags(ctx.event_tags)

    def _valid_tags(self, tags: Iterable[str]) -> list[str]:
        out: list[str] = []
        for tag in tags:
            try:
                key, value = parse_tag(tag)
            except InvalidArgument as exc:
                self.out.skip(SKIP_INVALID_TAG, exc.message)
                continue
            out.append(f"{key}={value}")
        return out

    def _tag(self, key: str, value: str) -> list[str]:
        try:
            k, v = parse_tag(f"{key}={one_line(value, 200)}")
        except InvalidArgument:
            return []
        return [f"{k}={v}"]

    # ---------------------------------------------------------------- driver

    def extract(self, messages: Sequence[SessionMessage]) -> ExtractionResult:
        usage: dict[str, Any] = {"extractor": "deterministic", "messages": len(messages),
                                 "llm_calls": 0}
        if not messages:
            self.out.skip(SKIP_EMPTY_ARCHIVE, "the archive has no messages")
            return self.out.result(usage)
        user_messages = 0
        for msg in messages:
            text = _strip_code(message_text(msg))[: self.cfg.max_text_chars]
            if not text.strip():
                continue
            if msg.role == "user":
                user_messages += 1
            self._message(msg, text)
        calls = tool_calls(messages)
        if not self.personal_ops:
            self.out.skip(SKIP_NO_MEMORY, "no preference, identity, profile, event or entity "
                          f"statement in {user_messages} user messages")
        self._conversation_event(messages, calls)
        if calls:
            self._trajectory(messages, calls)
            self._experiences(calls)
        usage["tool_calls"] = len(calls)
        return self.out.result(usage)

    def _dry(self, produce: Callable[[], list[_Candidate]]) -> list[_Candidate]:
        """Runs detectors without side effects: their candidates are only reported."""
        saved = (self.out, set(self.own_names), dict(self.entity_categories))
        self.out = _Collector(1 << 30, 1 << 30)
        try:
            return produce()
        finally:
            self.out, self.own_names, self.entity_categories = saved

    def _message(self, msg: SessionMessage, text: str) -> None:
        if msg.role != "user":
            # Reported only: an assistant's "I prefer ..." is not the user's memory.
            if msg.role == "assistant":
                cands = self._dry(lambda: self._candidates(msg, text, _Speaker(None)))
                for cand in cands:
                    self.out.skip(SKIP_ASSISTANT, cand.detail, msg.message_id)
            return
        speaker = _Speaker(msg.peer_id)
        if msg.peer_id is not None and self.ctx.peer_memories and not is_identifier(msg.peer_id):
            self.out.skip(SKIP_INVALID_PEER, f"peer id {msg.peer_id!r}", msg.message_id)
            return
        for cand in self._candidates(msg, text, speaker):
            if msg.peer_id is not None and not self.ctx.peer_memories:
                self.out.skip(SKIP_PEER_DISABLED, cand.detail, msg.message_id)
            elif self.out.add(cand.op):
                self.personal_ops += 1

    def _candidates(self, msg: SessionMessage, text: str,
                    speaker: _Speaker) -> list[_Candidate]:
        base = message_date(msg) or self.fallback_day
        found: list[_Candidate] = []
        for sentence in _sentences(text):
            if sentence.rstrip().endswith("?"):
                # Questions state nothing; report what they would have looked like.
                for cand in self._dry(partial(self._sentence, msg, sentence, speaker, base)):
                    self.out.skip(SKIP_QUESTION, cand.detail, msg.message_id)
                continue
            found.extend(self._sentence(msg, sentence, speaker, base))
        return found

    def _sentence(self, msg: SessionMessage, sentence: str, speaker: _Speaker,
                  base: date | None) -> list[_Candidate]:
        found: list[_Candidate] = []
        for clause in _clauses(sentence):
            found.extend(self._identity(msg, clause, speaker))
            found.extend(self._profile(msg, clause, speaker))
            found.extend(self._preferences(msg, clause, speaker))
        found.extend(self._entities(msg, sentence, speaker))
        event = self._event(msg, sentence, speaker, base)
        if event is not None:
            found.append(event)
        return found

    def _op(self, msg: SessionMessage, speaker: _Speaker, memory_type: str,
            fields: dict[str, str], content: str, summary: str,
            tags: list[str] | None = None) -> MemoryOperation:
        return MemoryOperation(memory_type=memory_type, fields=fields, content=content,
                               summary=one_line(summary), tags=tags or [],
                               source_message_ids=[msg.message_id], peer_id=speaker.peer_id)

    # ---------------------------------------------------------------- personal statements

    def _preferences(self, msg: SessionMessage, clause: str,
                     speaker: _Speaker) -> list[_Candidate]:
        for pattern, verb in _PREFERENCES:
            m = pattern.search(clause)
            if not m:
                continue
            obj = _clean_object(m.group("obj"))
            groups = m.groupdict()
            if verb == "favourite":
                topic = _topic_of(groups["topic"] or "")
                sentence = f"{speaker.poss_cap} favourite {topic} is {_third_person(obj)}."
            else:
                if not verb and groups.get("adv"):
                    verb = f"{groups['adv'].lower()} uses"
                elif not verb:
                    verb = _VERB_3RD.get(groups["verb"].lower().split()[0], "cannot stand")
                topic = _topic_of(obj)
                sentence = f"{speaker.subj} {verb} {_third_person(obj)}."
            detail = f"preferences: {clause}"
            head = topic.split()[0] if topic else ""
            if head in _VAGUE_HEADS or obj.lower().split()[:1] == ["you"]:
                self.out.skip(SKIP_VAGUE, detail, msg.message_id)
                return []
            if len(topic.replace(" ", "")) < 2:
                self.out.skip(SKIP_TOO_SHORT, detail, msg.message_id)
                return []
            owner = speaker.peer_id or self.ctx.user_id
            op = self._op(msg, speaker, "preferences", {"user": owner, "topic": topic},
                          sentence, sentence)
            return [_Candidate(op, detail)]
        return []

    def _identity(self, msg: SessionMessage, clause: str,
                  speaker: _Speaker) -> list[_Candidate]:
        found: list[_Candidate] = []
        for pattern, label in _IDENTITY:
            m = pattern.search(clause)
            if not m:
                continue
            name = _clean_object(m.group("name"))
            if len(name) < 2 or name.lower() in _CAP_STOPWORDS:
                self.out.skip(SKIP_TOO_SHORT, f"identity: {clause}", msg.message_id)
                continue
            self.own_names.add(name.lower())
            line = f"{label}: {name}"
            summary = (f"{speaker.poss_cap} name is {name}." if label == "Name"
                       else f"{speaker.subj} wants to be called {name}.")
            op = self._op(msg, speaker, "identity", {}, line, summary)
            found.append(_Candidate(op, f"identity: {clause}"))
        return found

    def _profile(self, msg: SessionMessage, clause: str,
                 speaker: _Speaker) -> list[_Candidate]:
        for pattern, template, category in _PROFILE:
            m = pattern.search(clause)
            if not m:
                continue
            obj = _clean_object(m.group("obj"))
            detail = f"profile: {clause}"
            if len(obj) < 2 and not obj.isdigit():
                self.out.skip(SKIP_TOO_SHORT, detail, msg.message_id)
                return []
            line = template.format(subj=speaker.subj, poss_cap=speaker.poss_cap,
                                   obj=_third_person(obj))
            found = [_Candidate(self._op(msg, speaker, "profile", {}, line, line), detail)]
            name = _head_name(obj) if category else None
            if name and category and name.lower() not in self.own_names:
                fact = (f"{speaker.subj} works at {name}." if category == "organization"
                        else line)
                found.append(self._entity(msg, speaker, category, name, fact, clause))
            return found
        return []

    def _entity(self, msg: SessionMessage, speaker: _Speaker, category: str, name: str,
                fact: str, sentence: str) -> _Candidate:
        self.entity_categories.setdefault(name.lower(), category)
        content = "\n".join([fact, f'Mentioned by {speaker.label}: "{one_line(sentence, 200)}"'])
        op = self._op(msg, speaker, "entities", {"category": category, "name": name},
                      content, f"{name} ({category}): {fact}")
        return _Candidate(op, f"entities: {name} ({category})")

    def _entities(self, msg: SessionMessage, sentence: str,
                  speaker: _Speaker) -> list[_Candidate]:
        found: list[_Candidate] = []
        claimed: set[str] = set()

        def add(category: str, name: str, fact: str) -> None:
            key = name.lower()
            if key in claimed or key in self.own_names:
                return
            claimed.add(key)
            found.append(self._entity(msg, speaker, category, name, fact, sentence))

        for m in _RELATION_ENTITY.finditer(sentence):
            rel = " ".join(m.group("rel").lower().split())
            name = m.group("name")
            add("person", name, f"{name} is {speaker.poss} {rel}.")
        for m in _PET_ENTITY.finditer(sentence):
            rel = m.group("rel").lower()
            name = m.group("name")
            add("pet", name, f"{name} is {speaker.poss} {rel}.")
        for m in _PROFILE_NAMED.finditer(sentence):
            claimed.add(m.group("name").lower())  # the profile detector reports it
        for m in _STUDY_ORG.finditer(sentence):
            name = m.group("name")
            if name.lower() not in _CAP_STOPWORDS:
                verb = " ".join(m.group("verb").lower().split())
                add("organization", name, f"{speaker.subj} {verb} {name}.")
        for m in _TRAVEL.finditer(sentence):
            name = m.group("name")
            if name.lower() not in _CAP_STOPWORDS:
                add("place", name, f"{speaker.subj} mentioned going to {name}.")
        for m in _CAP_RUN.finditer(sentence):
            name = self._trim_run(m.group(0))
            if name is None or name.lower() in claimed:
                continue
            category = self.entity_categories.get(name.lower()) or _category_by_suffix(name)
            add(category, name, f"{name} was mentioned by {speaker.label}.")
        return found

    @staticmethod
    def _trim_run(run: str) -> str | None:
        tokens = run.split()
        # A possessive ends the name ("Anna Lee's laptop").
        for i, tok in enumerate(tokens):
            if tok.endswith("'s"):
                tokens = [*tokens[:i], tok[:-2]]
                break
        tokens = [t.rstrip(".,") for t in tokens]
        while tokens and (tokens[0].lower() in _CAP_STOPWORDS or not tokens[0][:1].isupper()):
            tokens.pop(0)
        while tokens and (tokens[-1].lower() in _CAP_STOPWORDS or not tokens[-1][:1].isupper()):
            tokens.pop()
        capitalised = [t for t in tokens if t[:1].isupper()]
        if len(capitalised) < 2 or all(t.isupper() for t in capitalised):
            return None  # single words are too ambiguous; all-caps runs are acronyms
        return " ".join(tokens)

    def _event(self, msg: SessionMessage, sentence: str, speaker: _Speaker,
               base: date | None) -> _Candidate | None:
        if base is None:
            return None
        hit = find_date(sentence, base)
        if hit is None:
            return None
        detail = f"events: {sentence}"
        if hit.day is None:
            self.out.skip(SKIP_INVALID_DATE, detail, msg.message_id)
            return None
        if _REQUEST.search(sentence):
            self.out.skip(SKIP_REQUEST, detail, msg.message_id)
            return None
        rest = (sentence[: hit.start] + " " + sentence[hit.end:]).strip()
        words = _words(rest)
        while words and words[0].lower() in _LEADING_FILLER:
            words.pop(0)
        if len(words) < 3:
            self.out.skip(SKIP_TOO_SHORT, detail, msg.message_id)
            return None
        name = _short_name(words, 6)
        day = hit.day.isoformat()
        phrase = " ".join(hit.phrase.split())
        content = "\n".join([f'Date: {day} (from "{phrase}", said on {base.isoformat()})',
                             f"Who: {speaker.label}",
                             f'What: "{one_line(sentence, 400)}"'])
        tags = [*self.event_tags, *self._tag("event_date", day),
                *self._tag("session", self.ctx.session_id),
                *self._tag("archive", self.ctx.archive_id)]
        op = self._op(msg, speaker, "events", {"event_name": name, "date": day}, content,
                      f"{day}: {one_line(sentence, 200)}", tags)
        return _Candidate(op, detail)

    # ---------------------------------------------------------------- per archive

    @staticmethod
    def _topic_words(messages: Sequence[SessionMessage], limit: int) -> str:
        for msg in messages:
            if msg.role == "user":
                name = _short_name(_words(_strip_code(message_text(msg))), limit)
                if name:
                    return name
        return ""

    def _conversation_event(self, messages: Sequence[SessionMessage],
                            calls: Sequence[ToolCall]) -> None:
        days = [d for d in (message_date(m) for m in messages) if d is not None]
        day = days[-1] if days else self.fallback_day
        if day is None:
            self.out.skip(SKIP_INVALID_DATE, "conversation event: no message has a usable "
                          "created_at and ctx.now_iso is not a date")
            return
        roles: dict[str, int] = {}
        for msg in messages:
            roles[msg.role] = roles.get(msg.role, 0) + 1
        first_user = next((message_text(m) for m in messages
                           if m.role == "user" and message_text(m).strip()), "")
        topic = self._topic_words(messages, 6) or self.ctx.archive_id or "archive"
        errors = sum(1 for c in calls if c.status in _ERROR_STATUSES)
        images = sum(1 for m in messages for p in m.parts
                     if isinstance(p, dict) and p.get("type") == "image_url")
        peers = sorted({m.peer_id for m in messages if m.peer_id})
        counts = (f"{len(messages)} messages ({roles.get('user', 0)} user, "
                  f"{roles.get('assistant', 0)} assistant)")
        if calls:
            counts += f", {len(calls)} tool calls ({errors} failed)"
        lines = [f"Session: {self.ctx.session_id} / {self.ctx.archive_id}",
                 f"When: {messages[0].created_at} to {messages[-1].created_at}",
                 f"Messages: {counts}"]
        if images:
            lines.append(f"Images: {images}")
        if peers:
            lines.append(f"Peers: {', '.join(peers)}")
        if first_user:
            lines.append(f'First user message: "{one_line(first_user, 300)}"')
        summary = (f'Conversation: "{one_line(first_user, 120)}"; {counts}' if first_user
                   else f"Conversation: {counts}")
        tags = [*self.event_tags, *self._tag("event_date", day.isoformat()),
                *self._tag("session", self.ctx.session_id),
                *self._tag("archive", self.ctx.archive_id), "event_kind=conversation"]
        op = MemoryOperation(
            memory_type="events",
            fields={"event_name": f"conversation {topic}", "date": day.isoformat()},
            content="\n".join(lines), summary=one_line(summary), tags=tags,
            source_message_ids=_union([messages[0].message_id], [messages[-1].message_id]),
        )
        self.out.add(op)

    def _trajectory(self, messages: Sequence[SessionMessage],
                    calls: Sequence[ToolCall]) -> None:
        counts: dict[str, int] = {}
        for c in calls:
            counts[c.name] = counts.get(c.name, 0) + 1
        names = ", ".join(f"{n} x{k}" if k > 1 else n for n, k in counts.items())
        errors = sum(1 for c in calls if c.status in _ERROR_STATUSES)
        ok = sum(1 for c in calls if c.status in _OK_STATUSES)
        lines = [f"Tool calls: {len(calls)} ({ok} completed, {errors} failed)"]
        for i, c in enumerate(calls, start=1):
            step = f"{i}. {c.name} [{c.status}] input: {_short_json(c.tool_input, 160)}"
            if c.output.strip():
                step += f" -> output: {one_line(c.output, 160)}"
            lines.append(step)
        # Named after the request that set the tools going: the last user message before them.
        first_call = next(i for i, m in enumerate(messages) if m.message_id == calls[0].message_id)
        asked = [m for m in messages[:first_call] if m.role == "user"][-1:]
        name = self._topic_words(asked or messages, 5) or "tools"
        op = MemoryOperation(
            memory_type="trajectories", fields={"name": name}, content="\n".join(lines),
            summary=one_line(f"{len(calls)} tool calls ({names}); {errors} failed"),
            source_message_ids=_union([], (c.message_id for c in calls)),
        )
        self.out.add(op)

    def _experiences(self, calls: Sequence[ToolCall]) -> None:
        by_tool: dict[str, list[ToolCall]] = {}
        for c in calls:
            by_tool.setdefault(c.name, []).append(c)
        for tool, seq in by_tool.items():
            failed: ToolCall | None = None
            for c in seq:
                if c.status in _ERROR_STATUSES:
                    failed = failed or c  # the first error of a streak explains it best
                elif c.status in _OK_STATUSES and failed is not None:
                    between = calls[calls.index(failed) + 1: calls.index(c)]
                    self._lesson(tool, failed, c, [b for b in between if b.name != tool])
                    failed = None
            if failed is not None:
                self.out.skip(SKIP_TOOL_UNRESOLVED,
                              f"{tool} failed with {one_line(failed.output, 120)!r} and did "
                              "not succeed afterwards", failed.message_id)

    def _lesson(self, tool: str, failed: ToolCall, fixed: ToolCall,
                between: Sequence[ToolCall]) -> None:
        error = one_line(failed.output, 160) or "an error"
        change = _input_change(failed.tool_input, fixed.tool_input)
        steps = "; ".join(f"{b.name} {_short_json(b.tool_input, 80)} [{b.status}]"
                          for b in between[:3])
        line = (f"Lesson: {tool} failed with {error!r} "
                f"(input {_short_json(failed.tool_input, 120)})"
                f" then succeeded with input {_short_json(fixed.tool_input, 120)}"
                + (f"; changed {change}" if change else "")
                + (f"; in between: {steps}" if steps else "") + ".")
        fix = (f"changing {change}" if change else f"running {between[0].name}" if between
               else "a retry")
        op = MemoryOperation(
            memory_type="experiences", fields={"experience_name": f"{tool} failure recovery"},
            content=line,
            summary=one_line(f"{tool}: after {error!r}, {fix} made it succeed", 200),
            source_message_ids=_union([failed.message_id], [fixed.message_id]),
        )
        self.out.add(op)


def _input_change(before: Any, after: Any) -> str:
    if not isinstance(before, dict) or not isinstance(after, dict):
        return "" if before == after else (f"{_short_json(before, 60)} -> "
                                           f"{_short_json(after, 60)}")
    parts = []
    for key in sorted(set(before) | set(after), key=str):
        if before.get(key) != after.get(key):
            parts.append(f"{key}: {_short_json(before.get(key), 60)} -> "
                         f"{_short_json(after.get(key), 60)}")
    return "; ".join(parts[:4])


# --------------------------------------------------------------------------------------------
# LLM extractor.

MemoryTypeName = Literal["preferences", "entities", "events", "cases", "experiences",
                         "trajectories", "identity", "soul", "profile"]
# The schema's enum and the domain table must not drift apart.
assert set(get_args(MemoryTypeName)) == set(MEMORY_TYPES)


class LLMOperation(pydantic.BaseModel):
    """One operation as the LLM must write it."""

    model_config = pydantic.ConfigDict(extra="ignore")

    memory_type: MemoryTypeName
    fields: dict[str, str] = pydantic.Field(
        default_factory=dict,
        description="Template fields of the memory type; events also take date=YYYY-MM-DD")
    content: str = pydantic.Field(min_length=1, description="The memory, third person")
    summary: str = pydantic.Field(default="", description="One line")
    tags: list[str] = pydantic.Field(default_factory=list, description='"key=value" tags')
    source_message_ids: list[str] = pydantic.Field(default_factory=list)
    peer_id: str | None = pydantic.Field(
        default=None, description="Set when the memory is about a peer, not the user")


class LLMAnswer(pydantic.BaseModel):
    operations: list[LLMOperation]


class _Envelope(pydantic.BaseModel):
    # Items are validated one by one, so one bad operation is skipped instead of failing
    # (and retrying) the whole answer.
    operations: list[dict[str, Any]]


_OPERATION = pydantic.TypeAdapter(LLMOperation)
_ENVELOPE = pydantic.TypeAdapter(_Envelope)
ANSWER_SCHEMA: dict[str, Any] = pydantic.TypeAdapter(LLMAnswer).json_schema()
_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


class _InvalidAnswer(Exception):
    pass


def _system_prompt() -> str:
    lines = [
        "You extract long-term memories from a conversation between a user and an AI "
        "assistant. Answer with ONE JSON object matching the given JSON schema and nothing "
        "else: {\"operations\": [...]}. Answer {\"operations\": []} when nothing is worth "
        "remembering.",
        "Rules: remember only what the user (or a peer) states about themselves or their "
        "world; never turn the assistant's words into personal memories; write content in "
        "the third person; keep one topic per preference; resolve relative dates (yesterday, "
        "last Monday) against the message date and put it in fields.date as YYYY-MM-DD; "
        "list the [message ids] you used in source_message_ids.",
        "Memory types (memory_type: required fields -- what it holds):",
    ]
    for spec in MEMORY_TYPES.values():
        needed = ", ".join(spec.fields) or "none"
        if spec.name == "events":
            needed += ", date"
        lines.append(f"- {spec.name}: {needed} -- {spec.description} ({spec.mode})")
    return "\n".join(lines)


def render_conversation(messages: Sequence[SessionMessage], max_chars: int,
                        per_message_chars: int = 2000) -> str:
    """The conversation as prompt text, bounded: when too long the first message and the
    newest messages are kept and the middle is elided."""
    blocks: list[str] = []
    for msg in messages:
        head = f"[{msg.message_id}] {msg.role}"
        if msg.peer_id:
            head += f" (peer {msg.peer_id})"
        body: list[str] = []
        for part in msg.parts:
            if not isinstance(part, dict):
                continue
            kind = part.get("type")
            if kind == "text":
                body.append(str(part.get("text", "")))
            elif kind == "tool":
                body.append(f"<tool {part.get('tool_name')} [{part.get('tool_status')}] "
                            f"input={_short_json(part.get('tool_input'), 300)} "
                            f"output={one_line(str(part.get('tool_output') or ''), 300)}>")
            elif kind == "context":
                body.append(f"<context {part.get('uri')}: "
                            f"{one_line(str(part.get('abstract') or ''), 200)}>")
            elif kind == "image_url":
                body.append("<image>")
        text = "\n".join(body)
        if len(text) > per_message_chars:
            text = text[:per_message_chars] + " [...]"
        blocks.append(f"{head} {msg.created_at}:\n{text}")
    if sum(len(b) + 2 for b in blocks) <= max_chars or len(blocks) < 2:
        return "\n\n".join(blocks)[:max_chars]
    budget = max_chars - len(blocks[0]) - 64
    tail: list[str] = []
    for block in reversed(blocks[1:]):
        if budget - len(block) - 2 < 0:
            break
        tail.insert(0, block)
        budget -= len(block) + 2
    omitted = len(blocks) - 1 - len(tail)
    return "\n\n".join([blocks[0], f"[... {omitted} messages omitted ...]", *tail])[:max_chars]


class LLMExtractor:
    """Extraction by the configured LLM, answering JSON that matches `ANSWER_SCHEMA`.

    An answer that is not valid JSON for the envelope is retried (up to `max_retries` times)
    with the validation error fed back. When every attempt fails, or the LLM raises, the
    `fallback` extractor runs and a "llm_failed" skip records why; without a fallback a
    ProcessingError is raised. Individual operations with an unknown type or invalid fields
    are skipped as "invalid_operation".
    """

    def __init__(self, llm: LLM, *, max_retries: int = 2, fallback: Extractor | None = None,
                 max_prompt_chars: int = 24_000, max_tokens: int = 2048,
                 timeout_s: float = 60.0, max_operations: int = 200) -> None:
        self.llm = llm
        self.max_retries = max(max_retries, 0)
        self.fallback = fallback
        self.max_prompt_chars = max_prompt_chars
        self.max_tokens = max_tokens
        self.timeout_s = timeout_s
        self.max_operations = max_operations

    def extract(self, messages: Sequence[SessionMessage],
                ctx: ExtractionContext) -> ExtractionResult:
        usage: dict[str, Any] = {"extractor": "llm", "messages": len(messages), "llm_calls": 0,
                                 "prompt_tokens_est": 0, "completion_tokens_est": 0}
        out = _Collector(self.max_operations, 200)
        if not messages:
            out.skip(SKIP_EMPTY_ARCHIVE, "the archive has no messages")
            return out.result(usage)
        chat = [ChatMessage("system", _system_prompt()),
                ChatMessage("user", self._user_prompt(messages, ctx))]
        error = ""
        for _attempt in range(self.max_retries + 1):
            usage["llm_calls"] += 1
            usage["prompt_tokens_est"] += sum(estimate_tokens(m.content) for m in chat)
            try:
                answer = self.llm.complete(chat, json_schema=ANSWER_SCHEMA,
                                           max_tokens=self.max_tokens, timeout_s=self.timeout_s)
            except Exception as exc:
                # Any model failure means falling back; the adapter already retried transport
                # errors, so asking again here is pointless.
                error = f"LLM call failed: {type(exc).__name__}: {exc}"
                break
            usage["completion_tokens_est"] += estimate_tokens(answer)
            try:
                items = self._parse(answer)
            except _InvalidAnswer as exc:
                error = str(exc)
                chat = [*chat, ChatMessage("assistant", answer[:4000]), ChatMessage(
                    "user", f"That answer was invalid: {error}\nAnswer again with only the "
                            "JSON object matching the schema.")]
                continue
            self._convert(items, messages, ctx, out)
            usage["attempts"] = usage["llm_calls"]
            return out.result(usage)
        usage["attempts"] = usage["llm_calls"]
        detail = f"after {usage['llm_calls']} attempts: {error}"
        if self.fallback is None:
            raise ProcessingError(f"LLM memory extraction failed {detail}")
        result = self.fallback.extract(messages, ctx)
        usage["fallback"] = result.usage
        skipped = [{"reason": SKIP_LLM_FAILED, "detail": one_line(detail, 300)}, *result.skipped]
        return ExtractionResult(result.operations, skipped, usage)

    def _user_prompt(self, messages: Sequence[SessionMessage], ctx: ExtractionContext) -> str:
        peers = "enabled" if ctx.peer_memories else "disabled (ignore what peers say)"
        return (f"User id: {ctx.user_id}. Session {ctx.session_id}, {ctx.archive_id}. "
                f"Now: {ctx.now_iso or 'unknown'}. Peer memories: {peers}.\n\n"
                f"Conversation:\n{render_conversation(messages, self.max_prompt_chars)}")

    @staticmethod
    def _parse(answer: str) -> list[dict[str, Any]]:
        m = _FENCE.match(answer)
        text = m.group(1) if m else answer.strip()
        try:
            envelope = _ENVELOPE.validate_json(text)
        except pydantic.ValidationError as exc:
            raise _InvalidAnswer(one_line(str(exc), 1000)) from None
        return envelope.operations

    def _convert(self, items: list[dict[str, Any]], messages: Sequence[SessionMessage],
                 ctx: ExtractionContext, out: _Collector) -> None:
        known_ids = {m.message_id for m in messages}
        peers = {m.peer_id for m in messages if m.peer_id}
        for item in items:
            label = f"{item.get('memory_type')!s}: {one_line(str(item.get('content', '')), 120)}"
            try:
                parsed = _OPERATION.validate_python(item)
            except pydantic.ValidationError as exc:
                out.skip(SKIP_INVALID_OPERATION, f"{label} ({one_line(str(exc), 160)})")
                continue
            ids = [i for i in parsed.source_message_ids if i in known_ids]
            if parsed.peer_id is not None:
                if not ctx.peer_memories:
                    out.skip(SKIP_PEER_DISABLED, label, ids[0] if ids else None)
                    continue
                if parsed.peer_id not in peers:
                    out.skip(SKIP_INVALID_OPERATION, f"{label} (unknown peer "
                             f"{parsed.peer_id!r})", ids[0] if ids else None)
                    continue
            fields = dict(parsed.fields)
            if parsed.memory_type == "preferences" and not fields.get("user", "").strip():
                fields["user"] = parsed.peer_id or ctx.user_id
            tags = parsed.tags
            if parsed.memory_type == "events":
                tags = [*ctx.event_tags, *tags]
            op = MemoryOperation(memory_type=parsed.memory_type, fields=fields,
                                 content=parsed.content.strip(),
                                 summary=one_line(parsed.summary), tags=tags,
                                 source_message_ids=ids, peer_id=parsed.peer_id)
            try:
                validate_operation(op)
            except InvalidArgument as exc:
                out.skip(SKIP_INVALID_OPERATION, f"{label} ({exc.message})",
                         ids[0] if ids else None)
                continue
            out.add(op)
