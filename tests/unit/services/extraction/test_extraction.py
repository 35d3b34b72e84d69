"""Memory extraction from archived messages: the deterministic extractor on realistic
conversations, and the LLM extractor against a scripted fake LLM."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import date
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skald.domain.errors import ProcessingError
from skald.domain.memory.types import (
    MemoryOperation,
    memory_path,
    render_memory,
    validate_operation,
)
from skald.ports import LLM, ChatMessage, SessionMessage
from skald.services.extraction import (
    ANSWER_SCHEMA,
    DeterministicExtractor,
    ExtractionContext,
    ExtractionResult,
    Extractor,
    LLMExtractor,
    find_date,
    render_conversation,
)

DAY = "2026-05-07T10:00:00Z"  # a Thursday


class Conversation:
    def __init__(self) -> None:
        self.messages: list[SessionMessage] = []

    def add(
        self,
        role: str,
        text: str | None = None,
        *,
        at: str = DAY,
        peer: str | None = None,
        parts: list[dict[str, Any]] | None = None,
    ) -> SessionMessage:
        n = len(self.messages) + 1
        msg = SessionMessage(
            seq=n,
            message_id=f"m{n}",
            role=role,
            parts=parts if parts is not None else [{"type": "text", "text": text}],
            created_at=at,
            tokens=10,
            peer_id=peer,
        )
        self.messages.append(msg)
        return msg

    def user(self, text: str, **kw: Any) -> SessionMessage:
        return self.add("user", text, **kw)

    def assistant(self, text: str, **kw: Any) -> SessionMessage:
        return self.add("assistant", text, **kw)

    def tool(
        self,
        tool_id: str,
        name: str,
        status: str,
        tool_input: dict[str, Any],
        output: str,
        **kw: Any,
    ) -> SessionMessage:
        part = {
            "type": "tool",
            "tool_id": tool_id,
            "tool_name": name,
            "tool_input": tool_input,
            "tool_output": output,
            "tool_status": status,
        }
        return self.add("assistant", parts=[part], **kw)


def ctx(**kw: Any) -> ExtractionContext:
    base: dict[str, Any] = {
        "user_id": "alice",
        "session_id": "s1",
        "archive_id": "archive_001",
        "now_iso": "2026-05-08T09:00:00Z",
    }
    base.update(kw)
    return ExtractionContext(**base)


def run(conv: Conversation, **kw: Any) -> ExtractionResult:
    return DeterministicExtractor().extract(conv.messages, ctx(**kw))


def paths(result: ExtractionResult) -> dict[str, MemoryOperation]:
    return {
        memory_path(
            op, session_ts="20260507-100000", archive_suffix="_archive_001", when=date(2026, 5, 7)
        ): op
        for op in result.operations
    }


def of_type(result: ExtractionResult, memory_type: str) -> list[MemoryOperation]:
    return [op for op in result.operations if op.memory_type == memory_type]


def reasons(result: ExtractionResult) -> list[str]:
    return [s["reason"] for s in result.skipped]


# --------------------------------------------------------------------------------------------
# Deterministic extractor: personal statements


def test_preferences_with_topics_and_third_person_content() -> None:
    conv = Conversation()
    conv.user("I prefer concise answers with code examples. I don't like long explanations.")
    conv.user("Honestly, I love green tea over coffee, and I always use pytest for testing.")
    conv.user(
        "My favourite editor is Neovim. I hate meetings before 10am. I'm a big fan of type hints."
    )
    conv.user("I really like to keep my functions small.")
    result = run(conv)
    prefs = {p: op.content for p, op in paths(result).items() if p.startswith("preferences/")}
    assert prefs == {
        "preferences/alice/concise-answers-with-code-examples.md": (
            "User prefers concise answers with code examples."
        ),
        "preferences/alice/long-explanations.md": "User does not like long explanations.",
        "preferences/alice/green-tea.md": "User loves green tea over coffee.",
        "preferences/alice/testing.md": "User always uses pytest for testing.",
        "preferences/alice/editor.md": "User's favourite editor is Neovim.",
        "preferences/alice/meetings-before-10am.md": "User hates meetings before 10am.",
        "preferences/alice/type-hints.md": "User is a fan of type hints.",
        "preferences/alice/keep-my-functions-small.md": "User likes to keep their functions small.",
    }
    op = paths(result)["preferences/alice/testing.md"]
    assert op.fields == {"user": "alice", "topic": "testing"}
    assert op.summary == "User always uses pytest for testing."
    assert op.source_message_ids == ["m2"] and op.peer_id is None


def test_requests_are_not_preferences() -> None:
    conv = Conversation()
    conv.user("I'd like a summary of the design doc. I would like it in bullet points.")
    result = run(conv)
    assert not of_type(result, "preferences")
    assert "no_memory_found" in reasons(result)


def test_identity_and_one_profile_file_accumulating_lines() -> None:
    conv = Conversation()
    conv.user("Hi! My name is Anna Schmidt, but call me Annie.")
    conv.user("I work at Acme Corp and I live in Berlin. I'm a backend engineer.")
    conv.user("My job is building payment systems. I'm 34 years old.")
    result = run(conv)
    identity = of_type(result, "identity")
    assert len(identity) == 1
    assert identity[0].content.splitlines() == ["Preferred name: Annie", "Name: Anna Schmidt"]
    assert identity[0].summary == "User wants to be called Annie."
    profile = of_type(result, "profile")
    assert len(profile) == 1
    # Newest first, like the file merge.
    assert profile[0].content.splitlines() == [
        "User is 34 years old.",
        "User's job is building payment systems.",
        "User is a backend engineer.",
        "User lives in Berlin.",
        "User works at Acme Corp.",
    ]
    assert profile[0].source_message_ids == ["m2", "m3"]
    assert "profile.md" in paths(result) and "identity.md" in paths(result)
    # The user's own name is not an entity.
    assert not any("anna" in p for p in paths(result) if p.startswith("entities/"))


def test_dated_events_resolved_against_the_message_date() -> None:
    conv = Conversation()
    conv.user("Yesterday I finally shipped the billing migration.")
    conv.user("Last Monday we had a planning meeting with the platform team.")
    conv.user("On 2026-05-20 I fly to Lisbon for the conference.")
    conv.user("On May 2 we adopted the new release process.")
    conv.user("Three days ago the staging cluster ran out of disk.")
    conv.user("Next Friday the quarterly review takes place.")
    conv.user("Tomorrow I start the new onboarding project.", at="2026-05-31T22:00:00+02:00")
    result = run(conv)
    events = {
        p: op
        for p, op in paths(result).items()
        if p.startswith("events/") and "conversation" not in p
    }
    assert sorted(events) == [
        "events/2026/05/02/adopted-the-new-release-process.md",
        "events/2026/05/04/had-a-planning-meeting.md",
        "events/2026/05/04/the-staging-cluster-ran-out.md",
        "events/2026/05/06/shipped-the-billing-migration.md",
        "events/2026/05/15/the-quarterly-review-takes-place.md",
        "events/2026/05/20/fly-to-lisbon-for-the-conference.md",
        "events/2026/06/01/start-the-new-onboarding-project.md",
    ]
    shipped = events["events/2026/05/06/shipped-the-billing-migration.md"]
    assert shipped.fields["date"] == "2026-05-06"
    assert shipped.content.splitlines() == [
        'Date: 2026-05-06 (from "Yesterday", said on 2026-05-07)',
        "Who: user",
        'What: "Yesterday I finally shipped the billing migration."',
    ]
    assert shipped.summary == "2026-05-06: Yesterday I finally shipped the billing migration."
    assert "event_date=2026-05-06" in shipped.tags and "session=s1" in shipped.tags


def test_find_date_expressions() -> None:
    thursday = date(2026, 5, 7)
    cases = {
        "the day before yesterday we met": date(2026, 5, 5),
        "this morning I ran": thursday,
        "last Thursday it rained": date(2026, 4, 30),
        "next Thursday it rains": date(2026, 5, 14),
        "this Saturday we hike": date(2026, 5, 9),
        "this Thursday is today": thursday,
        "this coming Thursday": date(2026, 5, 14),
        "next Monday": date(2026, 5, 11),
        "last Friday": date(2026, 5, 1),
        "on the 3rd of March 2025 I moved": date(2025, 3, 3),
        "Dec 24, 2026 is the party": date(2026, 12, 24),
        "in two weeks we launch": date(2026, 5, 21),
        "a week ago it broke": date(2026, 4, 30),
    }
    for text, expected in cases.items():
        hit = find_date(text, thursday)
        assert hit is not None and hit.day == expected, text
    assert find_date("no date here, may I?", thursday) is None
    hit = find_date("on 2026-02-30 nothing", thursday)
    assert hit is not None and hit.day is None


def test_event_skips_have_reasons() -> None:
    conv = Conversation()
    conv.user("On 2026-02-30 we released version two of the app.")
    conv.user("Today is great.")
    conv.user("Tomorrow can you remind me about the dentist appointment.")
    result = run(conv)
    assert not [op for op in of_type(result, "events") if "event_kind=conversation" not in op.tags]
    assert {"invalid_date", "too_short", "request_not_event"} <= set(reasons(result))


def test_one_conversation_event_per_archive() -> None:
    conv = Conversation()
    conv.user("Hi, can you help me fix the flaky billing tests?", at="2026-05-06T23:50:00Z")
    conv.assistant("Sure. Which test fails?", at="2026-05-06T23:51:00Z")
    conv.user("test_refund fails on CI only.", at="2026-05-07T00:10:00Z")
    conv.add(
        "user",
        parts=[{"type": "image_url", "image_url": {"url": "https://x/y.png"}}],
        at="2026-05-07T00:11:00Z",
    )
    result = run(conv, event_tags=["project=billing"])
    convs = [op for op in of_type(result, "events") if "event_kind=conversation" in op.tags]
    assert len(convs) == 1
    event = convs[0]
    assert event.fields == {"event_name": "conversation can you help me fix", "date": "2026-05-07"}
    assert event.tags[0] == "project=billing" and "archive=archive_001" in event.tags
    assert event.summary == (
        'Conversation: "Hi, can you help me fix the flaky billing tests?"; '
        "4 messages (3 user, 1 assistant)"
    )
    assert 'First user message: "Hi, can you help me fix the flaky billing tests?"' in event.content
    assert "Images: 1" in event.content
    assert event.source_message_ids == ["m1", "m4"]
    assert "events/2026/05/07/conversation-can-you-help-me-fix.md" in paths(result)


def test_entities_people_pets_organisations_places() -> None:
    conv = Conversation()
    conv.user("My colleague Tom Berg reviews all my pull requests.")
    conv.user("My dog's name is Rex. I joined Initech in 2020.")
    conv.user("I work for Globex Corporation. Next week I'm flying to Lisbon.")
    conv.user("We met Maria Lopez and the people from Stark Industries Inc at the expo.")
    result = run(conv)
    entities = {p: op for p, op in paths(result).items() if p.startswith("entities/")}
    assert sorted(entities) == [
        "entities/organization/globex-corporation.md",
        "entities/organization/initech.md",
        "entities/organization/stark-industries-inc.md",
        "entities/other/maria-lopez.md",
        "entities/person/tom-berg.md",
        "entities/pet/rex.md",
        "entities/place/lisbon.md",
    ]
    tom = entities["entities/person/tom-berg.md"]
    assert tom.fields == {"category": "person", "name": "Tom Berg"}
    assert tom.content.splitlines() == [
        "Tom Berg is the user's colleague.",
        'Mentioned by user: "My colleague Tom Berg reviews all my pull requests."',
    ]
    assert entities["entities/pet/rex.md"].content.startswith("Rex is the user's dog.")
    assert entities["entities/organization/globex-corporation.md"].content.startswith(
        "User works at Globex Corporation."
    )


def test_sentence_initial_words_and_acronyms_are_not_entities() -> None:
    conv = Conversation()
    conv.user("Yesterday Anna called. The JSON API returns HTTP 500. Please Help.")
    result = run(conv)
    assert not of_type(result, "entities")


# --------------------------------------------------------------------------------------------
# Deterministic extractor: tools


def tool_conversation() -> Conversation:
    conv = Conversation()
    conv.user("Hello! Please run the test suite for the billing service.")
    conv.tool("t1", "run_tests", "running", {"path": "tests/"}, "")
    conv.tool(
        "t1",
        "run_tests",
        "error",
        {"path": "tests/"},
        "ModuleNotFoundError: No module named 'yaml'",
    )
    conv.tool("t2", "shell", "completed", {"cmd": "pip install pyyaml"}, "Successfully installed")
    conv.tool("t3", "run_tests", "completed", {"path": "tests/", "args": "-x"}, "12 passed")
    conv.tool("t4", "deploy", "error", {"env": "prod"}, "403 Forbidden")
    conv.assistant("Tests pass now; deploying failed with 403.")
    return conv


def test_trajectory_of_ordered_tool_calls() -> None:
    result = run(tool_conversation())
    [traj] = of_type(result, "trajectories")
    assert traj.fields == {"name": "run the test suite"}
    assert traj.content.splitlines() == [
        "Tool calls: 4 (2 completed, 2 failed)",
        '1. run_tests [error] input: {"path": "tests/"} -> output: ModuleNotFoundError: No '
        "module named 'yaml'",
        '2. shell [completed] input: {"cmd": "pip install pyyaml"} -> output: Successfully '
        "installed",
        '3. run_tests [completed] input: {"args": "-x", "path": "tests/"} -> output: 12 passed',
        '4. deploy [error] input: {"env": "prod"} -> output: 403 Forbidden',
    ]
    assert traj.summary == "4 tool calls (run_tests x2, shell, deploy); 2 failed"
    assert traj.source_message_ids == ["m3", "m4", "m5", "m6"]
    assert "trajectories/run-the-test-suite_20260507-100000_archive_001.md" in paths(result)


def test_experience_for_error_then_success_and_unresolved_error_skipped() -> None:
    result = run(tool_conversation())
    [exp] = of_type(result, "experiences")
    assert exp.fields == {"experience_name": "run_tests failure recovery"}
    assert exp.content == (
        "Lesson: run_tests failed with \"ModuleNotFoundError: No module named 'yaml'\" "
        '(input {"path": "tests/"}) then succeeded with input {"args": "-x", "path": '
        '"tests/"}; changed args: null -> "-x"; in between: shell {"cmd": "pip install '
        'pyyaml"} [completed].'
    )
    assert exp.summary.startswith('run_tests: after "ModuleNotFoundError')
    unresolved = [s for s in result.skipped if s["reason"] == "tool_error_unresolved"]
    assert len(unresolved) == 1 and unresolved[0]["detail"].startswith("deploy failed")
    assert result.usage["tool_calls"] == 4


def test_no_tools_no_trajectory() -> None:
    conv = Conversation()
    conv.user("I prefer dark mode.")
    result = run(conv)
    assert not of_type(result, "trajectories") and not of_type(result, "experiences")


# --------------------------------------------------------------------------------------------
# Deterministic extractor: who speaks


def test_peer_statements_skipped_when_peer_memories_are_off() -> None:
    conv = Conversation()
    conv.user("I love hiking. My name is Bob Stone.", peer="bob")
    conv.user("I prefer tea.")
    result = run(conv, peer_memories=False)
    assert all(op.peer_id is None for op in result.operations)
    assert [op.fields["topic"] for op in of_type(result, "preferences")] == ["tea"]
    peer_skips = [s for s in result.skipped if s["reason"] == "peer_memory_disabled"]
    assert len(peer_skips) == 2 and all(s["message_id"] == "m1" for s in peer_skips)


def test_peer_statements_become_peer_memories_when_enabled() -> None:
    conv = Conversation()
    conv.user(
        "I love hiking. My name is Bob Stone. Yesterday I ran a marathon in Oslo.", peer="bob"
    )
    result = run(conv, peer_memories=True)
    by_type = {
        op.memory_type: op for op in result.operations if "event_kind=conversation" not in op.tags
    }
    assert by_type["preferences"].peer_id == "bob"
    assert by_type["preferences"].fields == {"user": "bob", "topic": "hiking"}
    assert by_type["preferences"].content == "bob loves hiking."
    assert by_type["identity"].peer_id == "bob"
    assert by_type["events"].peer_id == "bob" and "Who: peer bob" in by_type["events"].content


def test_assistant_messages_never_produce_personal_memories() -> None:
    conv = Conversation()
    conv.assistant(
        "My name is Skald. I prefer short answers. I work at Anthropic Labs. "
        "Yesterday I helped you ship the release."
    )
    result = run(conv)
    assert {op.memory_type for op in result.operations} == {"events"}  # the archive event only
    assert reasons(result).count("assistant_message") >= 3
    assert "no_memory_found" in reasons(result)


def test_skip_reasons() -> None:
    conv = Conversation()
    conv.user("I prefer tea.")
    conv.user("I prefer tea.")
    conv.user("I like it. I like you.")
    conv.user("Do you think I prefer coffee?")
    conv.user("```\nI prefer tabs\n```")
    result = run(conv)
    assert [op.fields["topic"] for op in of_type(result, "preferences")] == ["tea"]
    assert reasons(result) == ["duplicate", "vague_object", "vague_object", "question"]
    dup = result.skipped[0]
    assert dup == {
        "reason": "duplicate",
        "detail": "preferences: User prefers tea.",
        "message_id": "m2",
    }


def test_empty_archive_and_no_memory() -> None:
    empty = DeterministicExtractor().extract([], ctx())
    assert empty.operations == [] and reasons(empty) == ["empty_archive"]
    conv = Conversation()
    conv.user("ok thanks")
    result = run(conv)
    assert reasons(result) == ["no_memory_found"]
    assert [op.memory_type for op in result.operations] == ["events"]


def test_bad_created_at_falls_back_to_now() -> None:
    conv = Conversation()
    conv.user("Yesterday I deployed the search service.", at="not a date")
    result = run(conv)
    days = sorted(op.fields["date"] for op in of_type(result, "events"))
    assert days == ["2026-05-07", "2026-05-08"]  # the event, and the archive event on "now"


def test_invalid_event_tags_are_reported_not_fatal() -> None:
    conv = Conversation()
    conv.user("I prefer tea.")
    result = run(conv, event_tags=["nope", "team=core"])
    [event] = of_type(result, "events")
    assert event.tags[0] == "team=core"
    assert "invalid_tag" in reasons(result)


def test_every_operation_is_valid_and_renders_and_runs_are_deterministic() -> None:
    conv = tool_conversation()
    conv.user(
        "My name is Anna. I work at Acme Corp. I prefer tea. My colleague Tom Berg "
        "said yesterday that we shipped the new invoicing flow."
    )
    first, second = run(conv), run(conv)
    assert first == second
    for op in first.operations:
        validate_operation(op)
        body = render_memory(op, existing=None)
        assert body.startswith("# Summary\n\n")
        assert render_memory(op, existing=body) == body


def test_limits() -> None:
    conv = Conversation()
    conv.user(" ".join(f"I prefer flavour{i}." for i in range(10)))
    result = DeterministicExtractor(max_operations=3).extract(conv.messages, ctx())
    assert len(result.operations) == 3
    assert "limit_reached" in reasons(result)


def test_is_an_extractor() -> None:
    extractor: Extractor = DeterministicExtractor()
    assert isinstance(extractor, Extractor)
    assert isinstance(LLMExtractor(ScriptedLLM([])), Extractor)
    assert isinstance(extractor.extract([], ctx()), ExtractionResult)


# --------------------------------------------------------------------------------------------
# LLM extractor


class ScriptedLLM:
    """Answers from a script; an Exception in the script is raised instead."""

    def __init__(self, answers: Sequence[str | Exception]) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[list[ChatMessage], dict[str, Any] | None]] = []

    def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        json_schema: dict[str, Any] | None = None,
        max_tokens: int = 1024,
        timeout_s: float = 30.0,
    ) -> str:
        self.calls.append((list(messages), json_schema))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def llm_conversation() -> Conversation:
    conv = Conversation()
    conv.user("I prefer concise answers. Yesterday I moved to Lisbon.")
    conv.assistant("Noted!")
    return conv


VALID = json.dumps(
    {
        "operations": [
            {
                "memory_type": "preferences",
                "fields": {"topic": "communication style"},
                "content": "User prefers concise answers.",
                "summary": "Prefers concise answers",
                "source_message_ids": ["m1", "m99"],
            },
            {
                "memory_type": "events",
                "fields": {"event_name": "moved to lisbon", "date": "2026-05-06"},
                "content": "User moved to Lisbon.",
                "tags": ["city=lisbon"],
                "source_message_ids": ["m1"],
            },
            {"memory_type": "profile", "content": "User lives in Lisbon.", "extra_key": "ignored"},
        ]
    }
)


def test_llm_valid_answer() -> None:
    llm = ScriptedLLM([VALID])
    assert isinstance(llm, LLM)
    result = LLMExtractor(llm).extract(llm_conversation().messages, ctx(event_tags=["project=x"]))
    assert len(llm.calls) == 1
    chat, schema = llm.calls[0]
    assert schema == ANSWER_SCHEMA and "operations" in json.dumps(schema)
    assert chat[0].role == "system" and "preferences" in chat[0].content
    assert "[m1] user" in chat[1].content and "I prefer concise answers." in chat[1].content
    pref, event, profile = result.operations
    assert pref.fields == {"topic": "communication style", "user": "alice"}
    assert pref.source_message_ids == ["m1"]  # unknown ids are dropped
    assert event.tags == ["project=x", "city=lisbon"]
    assert profile.summary == "" and profile.content == "User lives in Lisbon."
    assert result.skipped == []
    assert result.usage["extractor"] == "llm" and result.usage["llm_calls"] == 1
    assert paths(result).keys() == {
        "preferences/alice/communication-style.md",
        "events/2026/05/06/moved-to-lisbon.md",
        "profile.md",
    }


def test_llm_invalid_then_valid_retries_with_the_error() -> None:
    llm = ScriptedLLM(["Sure! Here are the memories: preferences...", f"```json\n{VALID}\n```"])
    result = LLMExtractor(llm, max_retries=2).extract(llm_conversation().messages, ctx())
    assert len(llm.calls) == 2
    retry_chat = llm.calls[1][0]
    assert retry_chat[-2] == ChatMessage("assistant", "Sure! Here are the memories: preferences...")
    assert retry_chat[-1].role == "user" and "invalid" in retry_chat[-1].content
    assert "JSON" in retry_chat[-1].content
    assert len(result.operations) == 3 and result.usage["llm_calls"] == 2


def test_llm_always_invalid_falls_back() -> None:
    llm = ScriptedLLM(["nope", '{"ops": []}', '{"operations": "x"}'])
    result = LLMExtractor(llm, max_retries=2, fallback=DeterministicExtractor()).extract(
        llm_conversation().messages, ctx()
    )
    assert len(llm.calls) == 3
    assert result.skipped[0]["reason"] == "llm_failed"
    assert "after 3 attempts" in result.skipped[0]["detail"]
    assert result.usage["fallback"]["extractor"] == "deterministic"
    topics = [op.fields["topic"] for op in result.operations if op.memory_type == "preferences"]
    assert topics == ["concise answers"]


def test_llm_failure_without_fallback_raises() -> None:
    llm = ScriptedLLM(["nope", "still nope"])
    with pytest.raises(ProcessingError):
        LLMExtractor(llm, max_retries=1).extract(llm_conversation().messages, ctx())


def test_llm_exception_falls_back_without_retrying() -> None:
    llm = ScriptedLLM([TimeoutError("model timed out"), VALID])
    result = LLMExtractor(llm, fallback=DeterministicExtractor()).extract(
        llm_conversation().messages, ctx()
    )
    assert len(llm.calls) == 1
    assert result.skipped[0]["reason"] == "llm_failed"
    assert "TimeoutError" in result.skipped[0]["detail"]


def test_llm_invalid_operations_are_skipped_individually() -> None:
    answer = json.dumps(
        {
            "operations": [
                {"memory_type": "skills", "fields": {"skill_name": "x"}, "content": "c"},
                {"memory_type": "telepathy", "content": "c"},
                {"memory_type": "entities", "fields": {"name": "Anna"}, "content": "c"},
                {
                    "memory_type": "events",
                    "fields": {"event_name": "x", "date": "soon"},
                    "content": "c",
                },
                {"memory_type": "profile", "content": ""},
                {"memory_type": "profile", "content": "User is a chef.", "peer_id": "bob"},
                {"memory_type": "cases", "fields": {"case_name": "flaky ci"}, "content": "Pin it."},
                {"memory_type": "cases", "fields": {"case_name": "Flaky CI"}, "content": "Pin it."},
            ]
        }
    )
    llm = ScriptedLLM([answer])
    result = LLMExtractor(llm).extract(llm_conversation().messages, ctx())
    assert [op.memory_type for op in result.operations] == ["cases"]
    assert reasons(result) == ["invalid_operation"] * 5 + ["peer_memory_disabled", "duplicate"]


def test_llm_peer_operations_when_enabled() -> None:
    conv = llm_conversation()
    conv.user("I am a chef.", peer="bob")
    answer = json.dumps(
        {
            "operations": [
                {"memory_type": "profile", "content": "bob is a chef.", "peer_id": "bob"},
                {"memory_type": "profile", "content": "carol is a pilot.", "peer_id": "carol"},
                {
                    "memory_type": "preferences",
                    "fields": {"topic": "food"},
                    "content": "Likes food.",
                    "peer_id": "bob",
                },
            ]
        }
    )
    result = LLMExtractor(ScriptedLLM([answer])).extract(conv.messages, ctx(peer_memories=True))
    assert [(op.memory_type, op.peer_id) for op in result.operations] == [
        ("profile", "bob"),
        ("preferences", "bob"),
    ]
    assert result.operations[1].fields["user"] == "bob"
    assert reasons(result) == ["invalid_operation"]


def test_llm_empty_archive_makes_no_call() -> None:
    llm = ScriptedLLM([])
    result = LLMExtractor(llm).extract([], ctx())
    assert llm.calls == [] and reasons(result) == ["empty_archive"]


def test_prompt_is_bounded() -> None:
    conv = Conversation()
    for i in range(300):
        conv.user(f"message number {i} " + "lorem ipsum " * 40)
    text = render_conversation(conv.messages, 8000)
    assert len(text) <= 8000
    assert text.startswith("[m1] user") and "[m300] user" in text
    assert "messages omitted" in text
    llm = ScriptedLLM(['{"operations": []}'])
    LLMExtractor(llm, max_prompt_chars=8000).extract(conv.messages, ctx())
    assert len(llm.calls[0][0][1].content) < 8000 + 500


_WORDS = st.sampled_from(
    [
        "I",
        "prefer",
        "like",
        "my",
        "name",
        "is",
        "Anna",
        "Lee",
        "work",
        "at",
        "Acme",
        "Corp",
        "yesterday",
        "on",
        "2026-05-07",
        "May",
        "7",
        "last",
        "Monday",
        "colleague",
        "dog",
        "Rex",
        ".",
        "?",
        ",",
        "and",
        "\n",
        "```",
        "call",
        "me",
        "live",
        "in",
        "Berlin",
        "favourite",
        "tea",
    ]
)
_TEXT = st.one_of(st.text(max_size=200), st.lists(_WORDS, max_size=40).map(" ".join))
_PART = st.one_of(
    _TEXT.map(lambda t: {"type": "text", "text": t}),
    st.fixed_dictionaries(
        {
            "type": st.just("tool"),
            "tool_id": st.sampled_from(["a", "b", ""]),
            "tool_name": st.sampled_from(["x", "y"]),
            "tool_status": st.sampled_from(["error", "completed", "running"]),
            "tool_input": st.dictionaries(st.text(max_size=3), st.integers()),
            "tool_output": st.text(max_size=30),
        }
    ),
    st.just({"type": "image_url", "image_url": {"url": "u"}}),
    st.just({"weird": True}),
)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["user", "assistant", "system"]),
            st.lists(_PART, max_size=3),
            st.sampled_from([DAY, "2026-01-31T23:00:00-05:00", "", "garbage"]),
            st.sampled_from([None, "bob", "bad/peer"]),
        ),
        max_size=6,
    ),
    st.booleans(),
)
def test_property_any_conversation_gives_valid_operations(
    raw: list[tuple[str, list[dict[str, Any]], str, str | None]], peers: bool
) -> None:
    conv = Conversation()
    for role, parts, at, peer in raw:
        conv.add(role, parts=parts, at=at, peer=peer)
    result = run(conv, peer_memories=peers)
    for op in result.operations:
        validate_operation(op)
        paths(ExtractionResult([op]))
        if op.peer_id is not None:
            assert peers and op.peer_id == "bob"
    assert all(isinstance(s["reason"], str) and s["reason"] for s in result.skipped)


def test_evolving_facts_reporting_tools_schedules_and_fixes() -> None:
    conv = Conversation()
    conv.user("I moved from Poetry to uv, I now always use uv.")
    conv.user("My manager is Dana Whitfield.")
    conv.user("We use Snowflake, dbt and Airflow for analytics.")
    conv.user("We use to go hiking on weekends.")
    conv.user("Every Monday we have a retro.")
    conv.user("I no longer drink coffee.")
    conv.user("The nightly backup failed with a lock timeout.")
    conv.user("Fixed it by setting lock_timeout to 30s before the dump.")
    result = run(conv)
    got = {
        p: op.content.splitlines()[0]
        for p, op in paths(result).items()
        if not p.startswith("events/")
    }
    assert got["preferences/alice/uv.md"] == "User always uses uv."
    assert got["profile.md"] == "User's manager is Dana Whitfield."
    assert got["entities/person/dana-whitfield.md"] == "Dana Whitfield is the user's manager."
    assert {p for p in got if p.startswith("entities/tool/")} == {
        "entities/tool/snowflake.md",
        "entities/tool/dbt.md",
        "entities/tool/airflow.md",
    }
    assert got["entities/schedule/hiking.md"] == "Schedule: hiking on weekends."
    assert got["entities/schedule/retro.md"] == "Schedule: retro every Monday."
    assert not any("/other/" in p for p in got)
    exp = next(op for p, op in paths(result).items() if p.startswith("experiences/"))
    assert "lock timeout" in exp.content and "lock_timeout to 30s" in exp.content
    assert exp.source_message_ids == ["m7", "m8"]
    assert [(r.phrase, r.source_message_ids) for r in result.retractions] == [
        ("Poetry", ["m1"]),
        ("coffee", ["m6"]),
    ]


def test_retractions_of_questions_and_assistants_are_not_kept() -> None:
    conv = Conversation()
    conv.user("Do I no longer use Poetry?")
    conv.assistant("I no longer use Poetry.")
    assert run(conv).retractions == []
