"""How new statements revise the memories already written (shared by both extractors).

A memory file holds fact lines. When a new operation lands on a file:
- a new line that restates an old one (same fact words, fillers such as "still", "now" or
  "that's still true" aside) is not added again;
- a new line that fills the same slot as an old one ("User's manager is X" after "User's
  manager is Y", "User lives in Oslo" after "User lives in Rome") supersedes it;
- in a preference file (one topic per file) a line of the opposite polarity ("User no longer
  drinks coffee" after "User loves coffee") supersedes the old one.
A retraction ("I no longer use Poetry", or an LLM naming an existing line) removes every line
of the user's personal memories that states the retracted phrase; a file left without a fact
line is deleted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?")


# Words that change the emphasis of a statement, not the fact it states.
def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_FILLERS = _words(
    "still now really also currently again indeed true that that's thats this is are was as "
    "before the a an and of to just yes yep definitively definitely always usually"
)
_NEGATIONS = _words(
    "not no never don't doesn't dont doesnt longer stopped quit dislikes dislike hates hate "
    "cannot can't nor"
)
# Canonical fact lines (as the extractors write them) and the slot each one fills.
_SLOTS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"^(?P<who>.+?)\s+(?:works|worked)\s+(?:at|for)\s", re.I), "employer"),
    (re.compile(r"^(?P<who>.+?)\s+(?:works\s+as|is\s+working\s+as)\s", re.I), "job"),
    (re.compile(r"^(?P<who>.+?)'s\s+(?:job|role|position|title)\s+is\s", re.I), "job"),
    (re.compile(r"^(?P<who>.+?)\s+(?:lives\s+in|moved\s+to)\s", re.I), "home"),
    (re.compile(r"^(?P<who>.+?)'s\s+(?:manager|boss)\s+is\s", re.I), "manager"),
    (re.compile(r"^(?P<who>.+?)\s+reports\s+to\s", re.I), "manager"),
    (re.compile(r"^(?P<who>.+?)\s+is\s+\d{1,3}\s+years?\s+old\b", re.I), "age"),
    (re.compile(r"^(?P<who>.+?)'s\s+name\s+is\s", re.I), "name"),
    (re.compile(r"^(?P<who>.+?)\s+wants\s+to\s+be\s+called\s", re.I), "called"),
    (re.compile(r"^(?P<who>)(?:name):\s", re.I), "name"),
    (re.compile(r"^(?P<who>)(?:preferred\s+name):\s", re.I), "called"),
    (re.compile(r"^(?P<who>)(?:schedule):\s", re.I), "schedule"),
]
_LIST_MARKER = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_COMPARED = re.compile(r"\b(?:over|than|instead\s+of|rather\s+than|not)\b", re.I)


def _stem(word: str) -> str:
    word = word.replace("’", "'")
    if word.endswith("'s"):
        word = word[:-2]
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def fact_words(line: str) -> frozenset[str]:
    """The words that carry a line's fact: lower-cased, lightly stemmed, fillers dropped."""
    words = (w.casefold() for w in _WORD.findall(_LIST_MARKER.sub("", line)))
    return frozenset(_stem(w) for w in words if w not in _FILLERS)


def is_fact_line(line: str) -> bool:
    return any(ch.isalnum() for ch in line)


def restates(new: str, old: str) -> bool:
    """True when `new` states nothing `old` does not already state."""
    n, o = fact_words(new), fact_words(old)
    if not n or not o:
        return False
    if negative(new) != negative(old):
        return False
    return n <= o or len(n & o) / len(n | o) >= 0.8


def negative(line: str) -> bool:
    words = {w.casefold().replace("’", "'") for w in _WORD.findall(line)}
    return bool(words & _NEGATIONS)


def slot_of(line: str) -> str | None:
    text = _LIST_MARKER.sub("", line).strip()
    for pattern, slot in _SLOTS:
        m = pattern.match(text)
        if m:
            return f"{m.group('who').strip().casefold()}|{slot}"
    return None


def mentions(line: str, phrase: str) -> bool:
    """A retracted `phrase` matches a line that is the phrase itself or that holds every
    fact word of it."""
    want = fact_words(phrase)
    if not want:
        return False
    if _same_line(line, phrase):
        return True
    # "User prefers tea over coffee" does not state coffee: a comparison's second term is
    # no fact about it.
    head = _COMPARED.split(line, maxsplit=1)[0]
    return want <= fact_words(head)


@dataclass
class Revision:
    """An old file's lines after a new operation: what stays, what the new content adds,
    and what it superseded or merely restated."""

    kept_old: list[str]
    added: list[str]
    superseded: list[str]
    restated: list[str]
    # the old line each restated new line matched
    confirmed: list[str]
    # the new lines in their order, each restated one in its old wording
    ordered: list[str]


def revise(old_lines: Sequence[str], new_lines: Sequence[str], *, by_polarity: bool) -> Revision:
    """Applies the restatement, slot and (for one-topic files) polarity rules."""
    new_facts = [ln for ln in new_lines if is_fact_line(ln)]
    added: list[str] = []
    restated: list[str] = []
    confirmed: list[str] = []
    ordered: list[str] = []
    for line in new_lines:
        if not is_fact_line(line):
            added.append(line)
            ordered.append(line)
            continue
        same_slot = slot_of(line)
        # The same line first: a line that merely restates an earlier one ("0" and "0\b"
        # share their fact words) must not claim that line's match, or a second merge of the
        # same content would move it.
        match = next(
            (old for old in old_lines if is_fact_line(old) and _same_line(line, old)), None
        ) or next(
            (
                old
                for old in old_lines
                if is_fact_line(old)
                and restates(line, old)
                and (same_slot is None or slot_of(old) == same_slot)
            ),
            None,
        )
        if match is None:
            added.append(line)
            ordered.append(line)
        else:
            restated.append(line)
            if match not in confirmed:
                confirmed.append(match)
                ordered.append(match)
    fresh = [ln for ln in added if is_fact_line(ln)]
    slots = {s for s in (slot_of(ln) for ln in fresh) if s}
    polarity = {negative(ln) for ln in fresh}
    kept: list[str] = []
    superseded: list[str] = []
    for old in old_lines:
        if not is_fact_line(old):
            kept.append(old)
            continue
        slot = slot_of(old)
        filled = slot is not None and slot in slots
        flipped = (
            by_polarity
            and bool(fresh)
            and len(polarity) == 1
            and negative(old) not in polarity
            and not any(restates(old, n) for n in new_facts)
        )
        if old not in confirmed and (filled or flipped):
            superseded.append(old)
        else:
            kept.append(old)
    if not any(is_fact_line(ln) for ln in added):
        added = []
    return Revision(kept, added, superseded, restated, confirmed, ordered)


def _same_line(line: str, phrase: str) -> bool:
    def norm(text: str) -> str:
        return " ".join(_LIST_MARKER.sub("", text).split()).casefold().strip(" .")

    return norm(line) == norm(phrase)


def in_scope(path: str, phrase: str) -> bool:
    """Whether a retracted phrase may remove lines of the memory at `path` (relative to the
    memory root) by their words: the user's profile, identity and preferences always, an
    entity only when its file is named after the phrase ("Acme" -> `.../acme-corp.md`; an
    entity's quotes mention many things). Elsewhere only a verbatim line is removed."""
    stem = path.rsplit("/", 1)[-1].removesuffix(".md")
    if path in {"profile.md", "identity.md"} or path.startswith("preferences/"):
        return True
    want = fact_words(phrase)
    return bool(want) and want <= fact_words(stem.replace("-", " ").replace("_", " "))


def retract(
    lines: Iterable[str], phrases: Sequence[str], *, by_words: bool
) -> tuple[list[str], list[str]]:
    """(kept, removed): the lines that are a retracted phrase, or (with `by_words`) that hold
    every fact word of one, are removed."""
    kept: list[str] = []
    removed: list[str] = []
    for line in lines:
        hit = is_fact_line(line) and any(
            _same_line(line, p) or (by_words and mentions(line, p)) for p in phrases
        )
        (removed if hit else kept).append(line)
    return kept, removed
