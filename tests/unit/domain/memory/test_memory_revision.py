"""The rules by which new statements revise existing memories (domain, no I/O)."""

from __future__ import annotations

from skald.domain.memory.revision import in_scope, mentions, restates, revise, slot_of
from skald.domain.memory.types import (
    MemoryOperation,
    dropped_lines,
    parse_memory_body,
    render_memory,
    retract_memory,
)
from skald.domain.text.memoryfile import (
    memory_body,
    split_provenance,
    with_memory_fields,
    with_provenance,
)


def pref(content: str, topic: str = "uv") -> MemoryOperation:
    return MemoryOperation("preferences", {"user": "alice", "topic": topic}, content, content)


def test_restatements_with_fillers_are_not_new() -> None:
    assert restates("User always uses uv, still true.", "User always uses uv.")
    assert restates("User now uses uv.", "User always uses uv (switched from Poetry).")
    assert not restates("User does not like tea.", "User likes tea.")
    assert not restates("User uses uv and ruff.", "User uses uv.")


def test_slots() -> None:
    assert slot_of("User's manager is Dana.") == slot_of("User reports to Omar.") == "user|manager"
    assert slot_of("User works at Acme.") == "user|employer"
    assert slot_of("User lives in Oslo.") == slot_of("User moved to Rome.") == "user|home"
    assert slot_of("Schedule: standup every weekday at 9:30.") == "|schedule"
    assert slot_of("User likes tea.") is None


def test_same_slot_supersedes_and_restatement_keeps_the_file() -> None:
    rev = revise(
        ["User's manager is Dana.", "User lives in Oslo."],
        ["User reports to Omar."],
        by_polarity=False,
    )
    assert rev.superseded == ["User's manager is Dana."]
    assert rev.kept_old == ["User lives in Oslo."] and rev.added == ["User reports to Omar."]
    first = render_memory(pref("User always uses uv."), existing=None)
    again = render_memory(pref("User always uses uv, that's still true."), existing=first)
    assert again == first


def test_opposite_polarity_supersedes_in_a_preference_file() -> None:
    first = render_memory(pref("User loves coffee.", "coffee"), existing=None)
    second = render_memory(pref("User does not drink coffee any more.", "coffee"), existing=first)
    assert parse_memory_body(second)[1] == "User does not drink coffee any more."
    assert dropped_lines(first, second) == ["User loves coffee."]


def test_retraction_scope() -> None:
    assert in_scope("preferences/alice/python-packaging.md", "Poetry")
    assert in_scope("profile.md", "Acme")
    assert in_scope("entities/organization/acme-robotics.md", "Acme")
    assert not in_scope("entities/person/anna-lee.md", "Acme")
    assert mentions("User always uses Poetry.", "Poetry")
    # the second term of a comparison is no fact about it
    assert not mentions("User prefers green tea over coffee.", "coffee")


def test_retract_memory_removes_lines_or_the_whole_file() -> None:
    body = render_memory(
        MemoryOperation("profile", {}, "User works at Acme.\nUser lives in Oslo.", "Works at Acme"),
        existing=None,
    )
    new, removed = retract_memory("profile.md", body, ["Acme"]) or ("", [])
    assert removed == ["User works at Acme."]
    assert new is not None and "Acme" not in new and "User lives in Oslo." in new
    only = render_memory(pref("User always uses Poetry.", "poetry"), existing=None)
    assert retract_memory("preferences/alice/poetry.md", only, ["Poetry"]) == (
        None,
        ["User always uses Poetry."],
    )
    assert retract_memory("preferences/alice/poetry.md", only, ["Rust"]) is None
    # elsewhere only a verbatim line is retracted
    entity = render_memory(
        MemoryOperation("entities", {"category": "person", "name": "Anna"}, "Anna uses Poetry."),
        existing=None,
    )
    assert retract_memory("entities/person/anna.md", entity, ["Poetry"]) is None
    assert retract_memory("entities/person/anna.md", entity, ["Anna uses Poetry."]) == (
        None,
        ["Anna uses Poetry."],
    )


def test_provenance_frontmatter_round_trip() -> None:
    body = render_memory(pref("User always uses uv."), existing=None)
    meta = {
        "archive": "viking://user/alice/sessions/s/history/archive_001",
        "message_ids": ["m1", "m2"],
    }
    raw = with_memory_fields(with_provenance(body, meta), {"version": 1})
    assert raw.startswith("---\narchive: ")
    assert split_provenance(raw)[0] == meta
    assert memory_body(raw).strip() == body.strip()
    assert parse_memory_body(raw) == parse_memory_body(body)
    # rendering over a file with provenance keeps the body rules
    assert render_memory(pref("User always uses uv."), existing=raw).strip() == body.strip()
