"""The rule-based memory extractor (`DeterministicExtractor`): offline, no model at all."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import date
from functools import partial
from typing import Any

from skald.domain.errors import InvalidArgument
from skald.domain.memory.types import MemoryOperation, Retraction, one_line
from skald.domain.paths.tags import parse_tag
from skald.domain.paths.uri import is_identifier
from skald.ports import SessionMessage
from skald.services.extraction import facts
from skald.services.extraction import lexicon as lex
from skald.services.extraction.archive import (
    add_conversation_event,
    add_experiences,
    add_trajectory,
)
from skald.services.extraction.common import (
    SKIP_ASSISTANT,
    SKIP_EMPTY_ARCHIVE,
    SKIP_INVALID_DATE,
    SKIP_INVALID_PEER,
    SKIP_INVALID_TAG,
    SKIP_NO_MEMORY,
    SKIP_PEER_DISABLED,
    SKIP_QUESTION,
    SKIP_REQUEST,
    SKIP_TOO_SHORT,
    SKIP_VAGUE,
    Collector,
    ExtractionContext,
    ExtractionResult,
    message_date,
    message_text,
    parse_day,
    tool_calls,
)
from skald.services.extraction.text import (
    Candidate,
    Speaker,
    category_by_suffix,
    clean_object,
    find_date,
    head_name,
    short_name,
    split_clauses,
    split_sentences,
    strip_code,
    tag_list,
    third_person,
    topic_of,
    word_list,
)


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

    def __init__(
        self, *, max_operations: int = 200, max_skipped: int = 200, max_text_chars: int = 20_000
    ) -> None:
        self.max_operations = max_operations
        self.max_skipped = max_skipped
        self.max_text_chars = max_text_chars

    def extract(
        self, messages: Sequence[SessionMessage], ctx: ExtractionContext
    ) -> ExtractionResult:
        run = _Run(self, ctx)
        return run.extract(messages)


class _Run:
    """State of one deterministic extraction."""

    def __init__(self, cfg: DeterministicExtractor, ctx: ExtractionContext) -> None:
        self.cfg = cfg
        self.ctx = ctx
        self.out = Collector(cfg.max_operations, cfg.max_skipped)
        self.fallback_day = parse_day(ctx.now_iso)
        self.own_names: set[str] = set()  # the speakers' own names are no entities
        self.entity_categories: dict[str, str] = {}
        self.personal_ops = 0
        self.event_tags = self._valid_tags(ctx.event_tags)
        self.retractions: list[Retraction] = []
        self.pending: list[Retraction] = []  # retractions of the message being read
        self.claimed: set[str] = set()  # names of the sentence already given a memory

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

    # ---------------------------------------------------------------- driver

    def extract(self, messages: Sequence[SessionMessage]) -> ExtractionResult:
        usage: dict[str, Any] = {
            "extractor": "deterministic",
            "messages": len(messages),
            "llm_calls": 0,
        }
        if not messages:
            self.out.skip(SKIP_EMPTY_ARCHIVE, "the archive has no messages")
            return self.out.result(usage)
        user_messages = 0
        for msg in messages:
            text = strip_code(message_text(msg))[: self.cfg.max_text_chars]
            if not text.strip():
                continue
            if msg.role == "user":
                user_messages += 1
            self._message(msg, text)
        for op in facts.error_fixes(messages):
            self.out.add(op)
        calls = tool_calls(messages)
        if not self.personal_ops and not self.retractions:
            self.out.skip(
                SKIP_NO_MEMORY,
                "no preference, identity, profile, event or entity "
                f"statement in {user_messages} user messages",
            )
        add_conversation_event(
            self.out, messages, calls, self.ctx, self.event_tags, self.fallback_day
        )
        if calls:
            add_trajectory(self.out, messages, calls)
            add_experiences(self.out, calls)
        usage["tool_calls"] = len(calls)
        result = self.out.result(usage)
        result.retractions = self.retractions
        return result

    def _dry(self, produce: Callable[[], list[Candidate]]) -> list[Candidate]:
        """Runs detectors without side effects: their candidates are only reported."""
        saved = (self.out, set(self.own_names), dict(self.entity_categories), self.pending)
        self.out = Collector(1 << 30, 1 << 30)
        self.pending = []
        try:
            return produce()
        finally:
            self.out, self.own_names, self.entity_categories, self.pending = saved

    def _message(self, msg: SessionMessage, text: str) -> None:
        if msg.role != "user":
            # Reported only: an assistant's "I prefer ..." is not the user's memory.
            if msg.role == "assistant":
                cands = self._dry(lambda: self._candidates(msg, text, Speaker(None)))
                for cand in cands:
                    self.out.skip(SKIP_ASSISTANT, cand.detail, msg.message_id)
            return
        speaker = Speaker(msg.peer_id)
        if msg.peer_id is not None and self.ctx.peer_memories and not is_identifier(msg.peer_id):
            self.out.skip(SKIP_INVALID_PEER, f"peer id {msg.peer_id!r}", msg.message_id)
            return
        self.pending = []
        for cand in self._candidates(msg, text, speaker):
            if msg.peer_id is not None and not self.ctx.peer_memories:
                self.out.skip(SKIP_PEER_DISABLED, cand.detail, msg.message_id)
            elif self.out.add(cand.op):
                self.personal_ops += 1
        for retraction in self.pending:
            if msg.peer_id is not None and not self.ctx.peer_memories:
                self.out.skip(
                    SKIP_PEER_DISABLED, f"retraction: {retraction.phrase}", msg.message_id
                )
            else:
                self.retractions.append(retraction)
        self.pending = []

    def _candidates(self, msg: SessionMessage, text: str, speaker: Speaker) -> list[Candidate]:
        base = message_date(msg) or self.fallback_day
        found: list[Candidate] = []
        for sentence in split_sentences(text):
            if sentence.rstrip().endswith("?"):
                # Questions state nothing; report what they would have looked like.
                for cand in self._dry(partial(self._sentence, msg, sentence, speaker, base)):
                    self.out.skip(SKIP_QUESTION, cand.detail, msg.message_id)
                continue
            found.extend(self._sentence(msg, sentence, speaker, base))
        return found

    def _sentence(
        self, msg: SessionMessage, sentence: str, speaker: Speaker, base: date | None
    ) -> list[Candidate]:
        found: list[Candidate] = []
        self.claimed = set()
        owner = speaker.peer_id or self.ctx.user_id
        for clause in split_clauses(sentence):
            found.extend(self._identity(msg, clause, speaker))
            found.extend(self._profile(msg, clause, speaker))
            change = facts.changes(msg, clause, speaker, owner)
            if change.ops or change.retractions:
                found.extend(self._facts(change, "change", clause))
                continue  # "I moved from X to Y" / "I no longer X" is no plain preference
            found.extend(self._preferences(msg, clause, speaker))
            found.extend(self._facts(facts.tools(msg, clause, speaker), "tools", clause))
        found.extend(self._facts(facts.reporting(msg, sentence, speaker), "reporting", sentence))
        found.extend(self._facts(facts.schedule(msg, sentence, speaker), "schedule", sentence))
        found.extend(self._entities(msg, sentence, speaker))
        event = self._event(msg, sentence, speaker, base)
        if event is not None:
            found.append(event)
        return found

    def _facts(self, found: facts.Facts, kind: str, text: str) -> list[Candidate]:
        self.claimed |= found.claimed
        self.pending.extend(found.retractions)
        return [Candidate(op, f"{kind}: {text}") for op in found.ops]

    def _op(
        self,
        msg: SessionMessage,
        speaker: Speaker,
        memory_type: str,
        fields: dict[str, str],
        content: str,
        summary: str,
        tags: list[str] | None = None,
    ) -> MemoryOperation:
        return MemoryOperation(
            memory_type=memory_type,
            fields=fields,
            content=content,
            summary=one_line(summary),
            tags=tags or [],
            source_message_ids=[msg.message_id],
            peer_id=speaker.peer_id,
        )

    # ---------------------------------------------------------------- personal statements

    def _preferences(self, msg: SessionMessage, clause: str, speaker: Speaker) -> list[Candidate]:
        for pattern, verb in lex.PREFERENCES:
            m = pattern.search(clause)
            if not m:
                continue
            obj = facts.drop_confirmation(m.group("obj"))
            groups = m.groupdict()
            if verb == "favourite":
                topic = topic_of(groups["topic"] or "")
                sentence = f"{speaker.poss_cap} favourite {topic} is {third_person(obj)}."
            else:
                if not verb and groups.get("adv"):
                    verb = f"{groups['adv'].lower()} uses"
                elif not verb:
                    verb = lex.VERB_3RD.get(groups["verb"].lower().split()[0], "cannot stand")
                topic = topic_of(obj)
                sentence = f"{speaker.subj} {verb} {third_person(obj)}."
            detail = f"preferences: {clause}"
            head = topic.split()[0] if topic else ""
            if head in lex.VAGUE_HEADS or obj.lower().split()[:1] == ["you"]:
                self.out.skip(SKIP_VAGUE, detail, msg.message_id)
                return []
            if len(topic.replace(" ", "")) < 2:
                self.out.skip(SKIP_TOO_SHORT, detail, msg.message_id)
                return []
            owner = speaker.peer_id or self.ctx.user_id
            op = self._op(
                msg, speaker, "preferences", {"user": owner, "topic": topic}, sentence, sentence
            )
            return [Candidate(op, detail)]
        return []

    def _identity(self, msg: SessionMessage, clause: str, speaker: Speaker) -> list[Candidate]:
        found: list[Candidate] = []
        for pattern, label in lex.IDENTITY:
            m = pattern.search(clause)
            if not m:
                continue
            name = clean_object(m.group("name"))
            if len(name) < 2 or name.lower() in lex.CAP_STOPWORDS:
                self.out.skip(SKIP_TOO_SHORT, f"identity: {clause}", msg.message_id)
                continue
            self.own_names.add(name.lower())
            line = f"{label}: {name}"
            summary = (
                f"{speaker.poss_cap} name is {name}."
                if label == "Name"
                else f"{speaker.subj} wants to be called {name}."
            )
            op = self._op(msg, speaker, "identity", {}, line, summary)
            found.append(Candidate(op, f"identity: {clause}"))
        return found

    def _profile(self, msg: SessionMessage, clause: str, speaker: Speaker) -> list[Candidate]:
        for pattern, template, category in lex.PROFILE:
            m = pattern.search(clause)
            if not m:
                continue
            obj = clean_object(m.group("obj"))
            detail = f"profile: {clause}"
            if len(obj) < 2 and not obj.isdigit():
                self.out.skip(SKIP_TOO_SHORT, detail, msg.message_id)
                return []
            line = template.format(
                subj=speaker.subj, poss_cap=speaker.poss_cap, obj=third_person(obj)
            )
            found = [Candidate(self._op(msg, speaker, "profile", {}, line, line), detail)]
            name = head_name(obj) if category else None
            if name and category and name.lower() not in self.own_names:
                fact = f"{speaker.subj} works at {name}." if category == "organization" else line
                found.append(self._entity(msg, speaker, category, name, fact, clause))
            return found
        return []

    def _entity(
        self,
        msg: SessionMessage,
        speaker: Speaker,
        category: str,
        name: str,
        fact: str,
        sentence: str,
    ) -> Candidate:
        self.entity_categories.setdefault(name.lower(), category)
        content = "\n".join([fact, f'Mentioned by {speaker.label}: "{one_line(sentence, 200)}"'])
        op = self._op(
            msg,
            speaker,
            "entities",
            {"category": category, "name": name},
            content,
            f"{name} ({category}): {fact}",
        )
        return Candidate(op, f"entities: {name} ({category})")

    def _entities(self, msg: SessionMessage, sentence: str, speaker: Speaker) -> list[Candidate]:
        found: list[Candidate] = []
        claimed: set[str] = set(self.claimed)

        def add(category: str, name: str, fact: str) -> None:
            key = name.lower()
            if key in claimed or key in self.own_names:
                return
            claimed.add(key)
            found.append(self._entity(msg, speaker, category, name, fact, sentence))

        for m in lex.RELATION_ENTITY.finditer(sentence):
            rel = " ".join(m.group("rel").lower().split())
            name = m.group("name")
            add("person", name, f"{name} is {speaker.poss} {rel}.")
        for m in lex.PET_ENTITY.finditer(sentence):
            rel = m.group("rel").lower()
            name = m.group("name")
            add("pet", name, f"{name} is {speaker.poss} {rel}.")
        for m in lex.PROFILE_NAMED.finditer(sentence):
            claimed.add(m.group("name").lower())  # the profile detector reports it
        for category, name, fact in _mentions(sentence, speaker):
            add(category, name, fact)
        # the claimed set grows as runs are added: a name repeated in the sentence is one entity
        for name in self._run_names(sentence, claimed):
            category = self.entity_categories.get(name.lower()) or category_by_suffix(name)
            add(category, name, f"{name} was mentioned by {speaker.label}.")
        return found

    def _run_names(self, sentence: str, claimed: set[str]) -> Iterator[str]:
        """The names of the sentence's capitalised runs not claimed yet (read lazily)."""
        for m in lex.CAP_RUN.finditer(sentence):
            name = self._trim_run(m.group(0))
            if name is not None and name.lower() not in claimed:
                yield name

    @staticmethod
    def _trim_run(run: str) -> str | None:
        tokens = run.split()
        # A possessive ends the name ("Anna Lee's laptop").
        for i, tok in enumerate(tokens):
            if tok.endswith("'s"):
                tokens = [*tokens[:i], tok[:-2]]
                break
        tokens = [t.rstrip(".,") for t in tokens]
        while tokens and (tokens[0].lower() in lex.CAP_STOPWORDS or not tokens[0][:1].isupper()):
            tokens.pop(0)
        while tokens and (tokens[-1].lower() in lex.CAP_STOPWORDS or not tokens[-1][:1].isupper()):
            tokens.pop()
        capitalised = [t for t in tokens if t[:1].isupper()]
        if len(capitalised) < 2 or all(t.isupper() for t in capitalised):
            return None  # single words are too ambiguous; all-caps runs are acronyms
        return " ".join(tokens)

    def _event(
        self, msg: SessionMessage, sentence: str, speaker: Speaker, base: date | None
    ) -> Candidate | None:
        if base is None:
            return None
        hit = find_date(sentence, base)
        if hit is None:
            return None
        detail = f"events: {sentence}"
        if hit.day is None:
            self.out.skip(SKIP_INVALID_DATE, detail, msg.message_id)
            return None
        if lex.REQUEST.search(sentence):
            self.out.skip(SKIP_REQUEST, detail, msg.message_id)
            return None
        rest = (sentence[: hit.start] + " " + sentence[hit.end :]).strip()
        words = word_list(rest)
        while words and words[0].lower() in lex.LEADING_FILLER:
            words.pop(0)
        if len(words) < 3:
            self.out.skip(SKIP_TOO_SHORT, detail, msg.message_id)
            return None
        name = short_name(words, 6)
        day = hit.day.isoformat()
        phrase = " ".join(hit.phrase.split())
        content = "\n".join(
            [
                f'Date: {day} (from "{phrase}", said on {base.isoformat()})',
                f"Who: {speaker.label}",
                f'What: "{one_line(sentence, 400)}"',
            ]
        )
        tags = [
            *self.event_tags,
            *tag_list("event_date", day),
            *tag_list("session", self.ctx.session_id),
            *tag_list("archive", self.ctx.archive_id),
        ]
        op = self._op(
            msg,
            speaker,
            "events",
            {"event_name": name, "date": day},
            content,
            f"{day}: {one_line(sentence, 200)}",
            tags,
        )
        return Candidate(op, detail)


def _mentions(sentence: str, speaker: Speaker) -> Iterator[tuple[str, str, str]]:
    """(category, name, fact) of the organisations studied or worked at and the places
    travelled to that the sentence names."""
    for m in lex.STUDY_ORG.finditer(sentence):
        name = m.group("name")
        if name.lower() not in lex.CAP_STOPWORDS:
            verb = " ".join(m.group("verb").lower().split())
            yield "organization", name, f"{speaker.subj} {verb} {name}."
    for m in lex.TRAVEL.finditer(sentence):
        name = m.group("name")
        if name.lower() not in lex.CAP_STOPWORDS:
            yield "place", name, f"{speaker.subj} mentioned going to {name}."
