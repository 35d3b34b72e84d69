"""The rule extractor's detectors of facts that evolve: changes of tool or habit and
retractions ("I moved from Poetry to uv", "I no longer ..."), reporting lines, tools and
platforms in use, recurring schedules, and error-then-fix sequences told in words."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from skald.domain.memory.types import MemoryOperation, Retraction, one_line
from skald.ports import SessionMessage
from skald.services.extraction import lexicon as lex
from skald.services.extraction.common import message_text
from skald.services.extraction.text import (
    Speaker,
    clean_object,
    short_name,
    third_person,
    topic_of,
    word_list,
)


@dataclass
class Facts:
    ops: list[MemoryOperation]
    retractions: list[Retraction]
    claimed: set[str]  # names a generic entity detector must not report again


def _op(
    msg: SessionMessage,
    speaker: Speaker,
    memory_type: str,
    fields: dict[str, str],
    content: str,
    summary: str,
) -> MemoryOperation:
    return MemoryOperation(
        memory_type=memory_type,
        fields=fields,
        content=content,
        summary=one_line(summary),
        source_message_ids=[msg.message_id],
        peer_id=speaker.peer_id,
    )


def drop_confirmation(obj: str) -> str:
    """ "uv, that's still true" -> "uv": a confirmation states nothing new."""
    return clean_object(lex.CONFIRMATION_TAIL.sub("", clean_object(obj)))


def retraction_phrase(obj: str) -> str:
    """The thing a retraction is about: "use Poetry" -> "Poetry", "work at Acme" -> "Acme"."""
    words = word_list(drop_confirmation(obj))
    while words and words[0].lower() in lex.RETRACT_LEAD:
        words.pop(0)
    words = word_list(lex.WHEN_TAIL.sub("", lex.TOOL_TAIL.sub("", " ".join(words))))
    return " ".join(words[:5])


def _subject(who: str, speaker: Speaker) -> str:
    return (
        speaker.poss_cap + " team"
        if who.lower() in {"we", "our team", "my team", "the team", "our company"}
        else speaker.subj
    )


def changes(msg: SessionMessage, clause: str, speaker: Speaker, owner: str) -> Facts:
    """Switches ("I moved from Poetry to uv") and retractions ("I no longer use Poetry")."""
    out = Facts([], [], set())
    m = lex.SWITCH.search(clause) or lex.INSTEAD.search(clause)
    if m:
        old = retraction_phrase(m.group("old"))
        new = clean_object(lex.TOOL_TAIL.sub("", drop_confirmation(m.group("new"))))
        topic = topic_of(new)
        if old and topic:
            out.retractions.append(Retraction(old, [msg.message_id], speaker.peer_id))
            line = f"{speaker.subj} switched from {old} to {third_person(new)}."
            out.ops.append(
                _op(msg, speaker, "preferences", {"user": owner, "topic": topic}, line, line)
            )
        return out
    for pattern in lex.RETRACT:
        m = pattern.search(clause)
        if m:
            phrase = retraction_phrase(m.group("obj"))
            if phrase:
                out.retractions.append(Retraction(phrase, [msg.message_id], speaker.peer_id))
            break
    return out


def reporting(msg: SessionMessage, sentence: str, speaker: Speaker) -> Facts:
    """ "My manager is Dana Whitfield" -> a profile line and a person entity."""
    out = Facts([], [], set())
    for pattern in lex.REPORTS_TO:
        for m in pattern.finditer(sentence):
            name = m.group("name").strip()
            if name.lower() in lex.CAP_STOPWORDS or name.lower() in out.claimed:
                continue
            groups = m.groupdict()
            rel = " ".join((groups.get("rel") or "manager").lower().split())
            line = (
                f"{speaker.poss_cap} {rel} is {name}."
                if rel != "manager"
                else f"{speaker.poss_cap} manager is {name}."
            )
            out.claimed.add(name.lower())
            out.ops.append(_op(msg, speaker, "profile", {}, line, line))
            fact = f"{name} is {speaker.poss} {rel}."
            out.ops.append(
                _op(
                    msg,
                    speaker,
                    "entities",
                    {"category": "person", "name": name},
                    f'{fact}\nMentioned by {speaker.label}: "{one_line(sentence, 200)}"',
                    f"{name} (person): {fact}",
                )
            )
    for m in lex.DIRECT_REPORT.finditer(sentence):
        name = (m.group("name") or m.group("name2") or "").strip()
        if not name or name.lower() in lex.CAP_STOPWORDS or name.lower() in out.claimed:
            continue
        out.claimed.add(name.lower())
        line = f"{name} reports to {speaker.subj}."
        out.ops.append(_op(msg, speaker, "profile", {}, line, line))
        out.ops.append(
            _op(
                msg,
                speaker,
                "entities",
                {"category": "person", "name": name},
                f"{name} reports to {speaker.subj}.\nMentioned by {speaker.label}: "
                f'"{one_line(sentence, 200)}"',
                f"{name} (person): reports to {speaker.subj}",
            )
        )
    return out


def tools(msg: SessionMessage, clause: str, speaker: Speaker) -> Facts:
    """ "We use Snowflake and dbt" -> one tool entity each."""
    out = Facts([], [], set())
    m = lex.TOOLS.search(clause)
    if not m or lex.SWITCH.search(clause) or lex.INSTEAD.search(clause):
        return out
    obj = lex.TOOL_TAIL.sub("", drop_confirmation(m.group("obj")))
    subject = _subject(m.group("who"), speaker)
    for raw in lex.TOOL_SPLIT.split(obj):
        name = clean_object(raw)
        words = name.split()
        while words and words[0].lower() in lex.TOOL_STOP:
            words.pop(0)
        name = " ".join(words)
        if not name or len(words) > 4 or len(name) < 2 or not any(c.isalpha() for c in name):
            continue
        if words[0].lower() in lex.VAGUE_HEADS or words[0].lower() in {"to", "be", "not"}:
            continue  # "we used to ...", "I use to be ...": no tool
        fact = f"{subject} uses {name}."
        out.claimed.add(name.lower())
        out.ops.append(
            _op(
                msg,
                speaker,
                "entities",
                {"category": "tool", "name": name},
                f'{fact}\nMentioned by {speaker.label}: "{one_line(clause, 200)}"',
                f"{name} (tool): {fact}",
            )
        )
    return out


def schedule(msg: SessionMessage, sentence: str, speaker: Speaker) -> Facts:
    """ "Our standup is every weekday at 9:30" -> a schedule entity named after the routine."""
    out = Facts([], [], set())
    m = lex.SCHEDULE_WHEN.search(sentence)
    if not m:
        return out
    when = " ".join(m.group("when").split())
    when = when[:1].lower() + when[1:]
    if not lex.SCHEDULE_TIME.search(when):
        at = lex.SCHEDULE_TIME.search(sentence[m.end() :])
        if at:
            when += f" at {at.group('time').strip()}"
    before = word_list(sentence[: m.start()])
    after = word_list(sentence[m.end() :])
    what = [w for w in before if w.lower() not in lex.SCHEDULE_LEAD]
    if not what:
        # "Every Monday we have a retro": the routine follows the expression.
        what = [w for w in after if w.lower() not in lex.SCHEDULE_LEAD and not re.match(r"\d", w)]
    name = short_name(what[-3:] if before and what else what[:3], 3)
    if len(name.replace(" ", "")) < 3 or name.split()[0] in lex.VAGUE_HEADS:
        return out
    line = f"Schedule: {name} {when}."
    said = f'{speaker.label.capitalize()} said: "{one_line(sentence, 200)}"'
    out.ops.append(
        _op(
            msg,
            speaker,
            "entities",
            {"category": "schedule", "name": name},
            f"{line}\n{said}",
            f"{name} (schedule): {when}",
        )
    )
    return out


def error_fixes(messages: Sequence[SessionMessage]) -> list[MemoryOperation]:
    """An experience for every problem a user reported in words that a later user message
    says is fixed ("fixed it by pinning numpy", or "that worked" after an assistant's
    suggestion)."""
    found: list[MemoryOperation] = []
    problem: tuple[SessionMessage, str] | None = None
    last_assistant = ""
    for msg in messages:
        text = message_text(msg)
        if msg.role == "assistant":
            last_assistant = text
            continue
        if msg.role != "user" or msg.peer_id is not None or not text.strip():
            continue
        if problem is not None and lex.FIX_CUE.search(text):
            fix = _fix_of(text, last_assistant)
            if fix:
                found.append(_experience(problem, msg, fix))
                problem = None
                continue
        if (
            lex.ERROR_CUE.search(text)
            and not text.rstrip().endswith("?")
            or lex.ERROR_NAME.search(text)
        ):
            problem = (msg, _error_of(text))
    return found


def _error_of(text: str) -> str:
    named = lex.ERROR_NAME.search(text)
    if named:
        err = re.split(r"\s+(?:when|while|after|if|whenever)\s", named.group("err"))[0]
        return one_line(err.strip().rstrip(".`'\""), 160)
    sentence = next(
        (s for s in re.split(r"(?<=[.!?])\s+|\n+", text) if lex.ERROR_CUE.search(s)), text
    )
    return one_line(sentence.strip(), 160)


def _fix_of(text: str, suggestion: str) -> str:
    for sentence in re.split(r"(?<=[.!?])\s+|\n+", text):
        cue = lex.FIX_CUE.search(sentence)
        if not cue:
            continue
        detail = lex.FIX_DETAIL.search(sentence[cue.start() :])
        if detail and len(word_list(detail.group("how"))) >= 2:
            return one_line(third_person(sentence.strip()), 200)
    first = next((s for s in re.split(r"(?<=[.!?])\s+|\n+", suggestion) if s.strip()), "")
    return one_line(f"the assistant's suggestion: {first.strip()}", 200) if first else ""


def _experience(
    problem: tuple[SessionMessage, str], fixed: SessionMessage, fix: str
) -> MemoryOperation:
    msg, error = problem
    name = short_name(word_list(error), 6) or "problem"
    content = "\n".join(
        [
            f"Problem: {error}",
            f"Fix: {fix}",
            f"Lesson: after {error.rstrip('.')}, {fix[:1].lower()}{fix[1:]}",
        ]
    )
    return MemoryOperation(
        memory_type="experiences",
        fields={"experience_name": name},
        content=content,
        summary=one_line(f"{error} - fixed: {fix}", 200),
        source_message_ids=[msg.message_id, fixed.message_id],
    )
