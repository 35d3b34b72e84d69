"""Text handling of the rule extractor: sentences and clauses, third-person rewriting,
topics and names, entity categories, and date expressions resolved against the day a message
was written."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, timedelta

from skald.domain.errors import InvalidArgument
from skald.domain.memory.types import MemoryOperation, one_line
from skald.domain.paths.tags import parse_tag
from skald.services.extraction import lexicon as lex


def short_name(words: Sequence[str], limit: int) -> str:
    """A file name from the first words of a phrase, without fillers at either end."""
    kept = list(words)
    while kept and kept[0].lower() in lex.LEADING_FILLER:
        kept.pop(0)
    kept = kept[:limit]
    while kept and kept[-1].lower() in lex.NAME_TAIL_DROP:
        kept.pop()
    return " ".join(kept).lower()


@dataclass(frozen=True)
class Speaker:
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


def third_person(text: str) -> str:
    for pattern, repl in lex.PRONOUNS_3RD:
        text = pattern.sub(repl, text)
    return text


def clean_object(raw: str) -> str:
    return raw.strip().rstrip(".!?…:;,").strip().strip("\"'").strip()


def word_list(text: str) -> list[str]:
    words = (w.rstrip(".'-") for w in re.findall(r"[^\W_][\w'+#.-]*", text))
    return [w for w in words if w]


def topic_of(obj: str) -> str:
    """A short, deterministic file name for a preference: the object without qualifiers.
    "pytest for testing" -> "testing"; "green tea over coffee" -> "green tea"."""
    text = clean_object(obj)
    m = re.match(r"^(?P<x>.+?)\s+for\s+(?P<y>.+)$", text, lex.FLAGS)
    if m:
        text = m.group("y")
    if not text.lower().startswith("to "):
        text = re.sub(r"\s+to\s+.*$", "", text, flags=lex.FLAGS)
    text = lex.TOPIC_CUT.sub("", text)
    words = [w.rstrip(".") for w in word_list(text)]
    while words and words[0].lower() in lex.TOPIC_DROP:
        words.pop(0)
    while words and words[-1].lower() in lex.TOPIC_TAIL_DROP:
        words.pop()
    return " ".join(words[:5]).lower()


def head_name(text: str) -> str | None:
    """The leading run of capitalised words of `text` ("Acme Corp in Berlin" -> "Acme Corp")."""
    m = re.match(lex.NAME, text.strip())
    if not m:
        return None
    name = m.group(0).strip()
    return name if name.lower() not in lex.CAP_STOPWORDS else None


def category_by_suffix(name: str) -> str:
    words = name.lower().replace(".", "").split()
    if words[-1] in lex.ORG_SUFFIXES or words[0] in lex.ORG_PREFIXES:
        return "organization"
    if words[-1] in lex.PLACE_SUFFIXES or words[0] in lex.PLACE_PREFIXES:
        return "place"
    return "other"


def strip_code(text: str) -> str:
    return lex.INLINE_CODE.sub(" ", lex.CODE_BLOCK.sub("\n", text))


def split_sentences(text: str) -> list[str]:
    return [s.strip() for s in lex.SENTENCES.split(text) if s and s.strip()]


def split_clauses(sentence: str) -> list[str]:
    return [c.strip() for c in lex.CLAUSES.split(sentence) if c and c.strip()]


@dataclass
class Candidate:
    op: MemoryOperation
    detail: str


@dataclass
class DateHit:
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
            return date(year, lex.MONTHS[m.group("mon").lower()], int(m.group("d")))
    except ValueError:
        return None
    if kind == "relative":
        return base + timedelta(days=lex.RELATIVE_DAYS[" ".join(m.group("w").lower().split())])
    if kind == "weekday":
        target = lex.WEEKDAYS[m.group("wd").lower()]
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
    n = int(raw) if raw.isdigit() else lex.NUMBERS[raw]
    days = n * (7 if m.group("unit").lower().startswith("week") else 1)
    return base - timedelta(days=days) if kind == "ago" else base + timedelta(days=days)


def find_date(sentence: str, base: date) -> DateHit | None:
    """The first date expression of `sentence`, resolved relative to `base` (the day the
    message was written)."""
    best: DateHit | None = None
    for kind, pattern in lex.DATE_PATTERNS:
        m = pattern.search(sentence)
        if m and (best is None or m.start() < best.start):
            best = DateHit(_resolve_date(kind, m, base), m.start(), m.end(), m.group(0))
    return best


def tag_list(key: str, value: str) -> list[str]:
    """[`key=value`] as a valid tag, or [] when it cannot be one."""
    try:
        k, v = parse_tag(f"{key}={one_line(value, 200)}")
    except InvalidArgument:
        return []
    return [f"{k}={v}"]
