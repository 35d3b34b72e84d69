"""Memory types, memory paths (sanitised, never outside the memory root) and memory bodies."""

from __future__ import annotations

import re
from datetime import date

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from skald.domain.errors import InvalidArgument
from skald.domain.memory.types import (
    MAX_SEGMENT_BYTES,
    MAX_SEGMENT_CHARS,
    MEMORY_TYPES,
    MemoryOperation,
    memory_path,
    memory_tags,
    operation_key,
    parse_memory_body,
    render_memory,
    sanitize_segment,
    validate_operation,
)
from skald.domain.paths.uri import from_canonical, parse_uri
from skald.domain.text.memoryfile import split_memory_fields, with_memory_fields

WHEN = date(2026, 5, 7)
ROOT = "viking://user/alice/memories"


def path(op: MemoryOperation, ts: str = "20260507-101500", suffix: str = "_archive_001") -> str:
    return memory_path(op, session_ts=ts, archive_suffix=suffix, when=WHEN)


def op(memory_type: str, content: str = "x", summary: str = "", **fields: str) -> MemoryOperation:
    return MemoryOperation(
        memory_type=memory_type, fields=dict(fields), content=content, summary=summary
    )


# --------------------------------------------------------------------------------------------
# The table


def test_table_matches_api_section_6() -> None:
    expected = {
        "preferences": ("preferences/{user}/{topic}.md", "upsert"),
        "entities": ("entities/{category}/{name}.md", "upsert"),
        "events": ("events/{YYYY}/{MM}/{DD}/{event_name}.md", "add_only"),
        "cases": ("cases/{case_name}.md", "upsert"),
        "experiences": ("experiences/{experience_name}.md", "upsert"),
        "trajectories": ("trajectories/{name}_{session_ts}{archive_suffix}.md", "add_only"),
        "identity": ("identity.md", "upsert"),
        "soul": ("soul.md", "upsert"),
        "profile": ("profile.md", "upsert"),
    }
    assert {k: (v.template, v.mode) for k, v in MEMORY_TYPES.items()} == expected
    for spec in MEMORY_TYPES.values():
        placeholders = set(re.findall(r"\{(\w+)\}", spec.template))
        assert set(spec.fields) <= placeholders


# --------------------------------------------------------------------------------------------
# Paths


def test_paths_of_every_type() -> None:
    assert (
        path(op("preferences", user="alice", topic="Communication Style"))
        == "preferences/alice/communication-style.md"
    )
    assert (
        path(op("entities", category="Person", name="Anna  Schmidt"))
        == "entities/person/anna-schmidt.md"
    )
    assert (
        path(op("events", event_name="Shipped the Migration"))
        == "events/2026/05/07/shipped-the-migration.md"
    )
    assert path(op("events", event_name="trip", date="2025-12-31")) == "events/2025/12/31/trip.md"
    assert path(op("cases", case_name="Flaky CI")) == "cases/flaky-ci.md"
    assert (
        path(op("experiences", experience_name="run_tests failure recovery"))
        == "experiences/run_tests-failure-recovery.md"
    )
    assert (
        path(op("trajectories", name="Fix the tests"))
        == "trajectories/fix-the-tests_20260507-101500_archive_001.md"
    )
    assert path(op("identity")) == "identity.md"
    assert path(op("soul")) == "soul.md"
    assert path(op("profile")) == "profile.md"


def test_names_are_slugs() -> None:
    assert (
        path(op("preferences", user="alice", topic="Concise answers, code first!"))
        == "preferences/alice/concise-answers-code-first.md"
    )
    assert path(op("cases", case_name="  C++ & C# -- builds ")) == "cases/c-c-builds.md"
    assert path(op("entities", category="Tool", name="Größe dbt")) == "entities/tool/größe-dbt.md"
    assert path(op("cases", case_name="!!!")) == "cases/untitled.md"


def test_user_ids_keep_their_case_names_do_not() -> None:
    assert path(op("preferences", user="Alice", topic="Tea")) == "preferences/Alice/tea.md"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("../../etc/passwd", "-..-etc-passwd"),
        ("..", "untitled"),
        (".", "untitled"),
        ("", "untitled"),
        ("   ", "untitled"),
        (".abstract", "abstract"),
        ("...hidden...", "hidden"),
        ("a/b\\c", "a-b-c"),
        ("tab\there\nnewline\x00nul\x7fdel", "tab here newlinenuldel"),
        ("zero\u200bwidth", "zerowidth"),
        ("full\uff0fwidth\uff0eslash", "full-width.slash"),
        ("{calendar:today}", "-calendar-today-"),
        ("%2e%2E%2f", "-2e-2e-2f"),
        ("C++ & C#", "c++ & c#"),
        ("Größe", "größe"),
    ],
)
def test_sanitize_segment(raw: str, expected: str) -> None:
    assert sanitize_segment(raw) == expected


def test_long_names_are_cut_but_trajectory_suffix_survives() -> None:
    long = "word " * 100
    p = path(op("cases", case_name=long))
    seg = p.split("/")[-1]
    assert len(seg) <= MAX_SEGMENT_CHARS and seg.endswith(".md")
    traj = path(op("trajectories", name=long)).split("/")[-1]
    assert len(traj) <= MAX_SEGMENT_CHARS
    assert traj.endswith("_20260507-101500_archive_001.md")
    wide = path(op("cases", case_name="𝔘" * 200)).split("/")[-1]
    assert len(wide.encode("utf-8")) <= MAX_SEGMENT_BYTES


def test_hostile_caller_values_stay_in_one_segment() -> None:
    p = path(op("trajectories", name="n"), ts="../../x", suffix="/../../y")
    assert p.count("/") == 1
    assert ".." not in p.split("/")


_TYPES = st.sampled_from(sorted(MEMORY_TYPES))
_FIELD_TEXT = st.text(max_size=300)


@settings(max_examples=300, deadline=None)
@given(
    memory_type=_TYPES,
    values=st.dictionaries(
        st.sampled_from(
            [
                "user",
                "topic",
                "category",
                "name",
                "event_name",
                "case_name",
                "experience_name",
                "other",
            ]
        ),
        _FIELD_TEXT,
        max_size=8,
    ),
    ts=_FIELD_TEXT,
    suffix=_FIELD_TEXT,
    day=st.dates(),
)
def test_property_paths_never_leave_the_memory_root(
    memory_type: str, values: dict[str, str], ts: str, suffix: str, day: date
) -> None:
    operation = MemoryOperation(memory_type=memory_type, fields=values, content="c")
    rel = memory_path(operation, session_ts=ts, archive_suffix=suffix, when=day)
    segments = rel.split("/")
    assert len(segments) == len(MEMORY_TYPES[memory_type].template.split("/"))
    assert segments[-1].endswith(".md")
    for seg in segments:
        assert seg and seg not in {".", ".."} and not seg.startswith(".")
        assert "\\" not in seg and not re.search(r"[\x00-\x1f\x7f]", seg)
        assert len(seg) <= MAX_SEGMENT_CHARS
        assert len(seg.encode("utf-8")) <= MAX_SEGMENT_BYTES
    if memory_type != "trajectories":
        assert " " not in segments[-1] and segments[-1] == segments[-1].lower()
    root = from_canonical(ROOT)
    uri = from_canonical(f"{ROOT}/{rel}")
    assert uri.is_within(root)
    assert uri.relative_to(root) == rel
    # The same URI is accepted unchanged at the API edge (no `{}` variables, no %2f...).
    assert str(parse_uri(f"{ROOT}/{rel}", user_id="alice")) == f"{ROOT}/{rel}"


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_property_sanitize_is_idempotent(raw: str) -> None:
    once = sanitize_segment(raw)
    assert sanitize_segment(once) == once


def test_unknown_type_has_no_path() -> None:
    with pytest.raises(InvalidArgument):
        path(op("skills", skill_name="x"))


def test_operation_key_follows_the_file() -> None:
    a = op("preferences", user="alice", topic="Green Tea")
    b = op("preferences", user="alice", topic="green  tea")
    c = op("preferences", user="alice", topic="coffee")
    assert operation_key(a) == operation_key(b) != operation_key(c)
    assert operation_key(op("profile")) == operation_key(op("profile", content="other"))


def test_memory_tags() -> None:
    o = op("events", event_name="x")
    o.tags = ["project=billing", "project=billing"]
    assert memory_tags(o) == ["memory_type=events", "project=billing"]


# --------------------------------------------------------------------------------------------
# Validation


def test_validate_accepts_a_complete_operation() -> None:
    validate_operation(op("preferences", user="alice", topic="tea"))
    validate_operation(op("events", event_name="x", date="2026-05-06"))
    validate_operation(op("profile", content="", summary="only a summary"))


@pytest.mark.parametrize(
    "bad",
    [
        op("skills", skill_name="x"),
        op("nonsense"),
        op("preferences", user="alice"),
        op("preferences", user="alice", topic="   "),
        op("entities", name="Anna"),
        op("events"),
        op("events", event_name="x", date="2026-02-30"),
        op("events", event_name="x", date="yesterday"),
        op("profile", content="  ", summary=""),
        MemoryOperation("profile", content="x", tags=["no-equals"]),
        MemoryOperation("profile", content="x", peer_id="bad/peer"),
        MemoryOperation("cases", fields={"case_name": 3}, content="x"),  # type: ignore[dict-item]
    ],
)
def test_validate_rejects(bad: MemoryOperation) -> None:
    with pytest.raises(InvalidArgument):
        validate_operation(bad)


# --------------------------------------------------------------------------------------------
# Bodies


def test_new_file_body() -> None:
    o = op(
        "preferences",
        "User prefers concise answers.",
        "Prefers concise answers",
        user="alice",
        topic="communication style",
    )
    assert render_memory(o, existing=None) == (
        "# Summary\n\nPrefers concise answers\n\nUser prefers concise answers.\n"
    )


def test_summary_defaults_to_the_first_content_line_and_is_one_line() -> None:
    o = op("profile", "- Works at Acme.\n- Lives in Berlin.")
    assert render_memory(o, existing=None).startswith("# Summary\n\nWorks at Acme.\n\n")
    o = op("profile", "x", "line one\nline two")
    assert "\n\nline one line two\n\n" in render_memory(o, existing=None)


def test_profile_merge_is_newest_first_without_duplicates() -> None:
    first = render_memory(
        op("profile", "User works at Acme.\nUser lives in Berlin.", "Works at Acme"), existing=None
    )
    stored = with_memory_fields(first, {"memory_type": "profile", "version": 1})
    second = render_memory(
        op("profile", "User lives in  berlin.\nUser is a backend engineer.", "Backend engineer"),
        existing=stored,
    )
    summary, content = parse_memory_body(second)
    assert summary == "Backend engineer"
    # the restated line leads again in its first wording; nothing is written twice
    assert content.splitlines() == [
        "User lives in Berlin.",
        "User is a backend engineer.",
        "User works at Acme.",
    ]
    assert "MEMORY_FIELDS" not in second


def test_preferences_and_identity_merge_like_profile() -> None:
    old = render_memory(op("identity", "Name: Anna\nPreferred name: Annie", "Anna"), existing=None)
    new = render_memory(
        op("identity", "Name: Anna Schmidt\nName: Anna", "Anna Schmidt"), existing=old
    )
    assert parse_memory_body(new) == (
        "Anna Schmidt",
        "Name: Anna Schmidt\nName: Anna\nPreferred name: Annie",
    )


def test_bullets_and_case_do_not_make_a_line_new() -> None:
    old = render_memory(
        op("preferences", "- User likes tea.", user="a", topic="tea"), existing=None
    )
    new = render_memory(op("preferences", "user likes TEA.", user="a", topic="tea"), existing=old)
    # a restatement leaves the file as it was
    assert new == old


def test_entities_append_new_facts_in_order() -> None:
    old = render_memory(
        op("entities", "Anna is the user's colleague.", "Anna", category="person", name="anna"),
        existing=None,
    )
    new = render_memory(
        op(
            "entities",
            "Anna reviews the PRs.\nAnna is the user's colleague.",
            "Anna, colleague and reviewer",
            category="person",
            name="anna",
        ),
        existing=old,
    )
    assert parse_memory_body(new) == (
        "Anna, colleague and reviewer",
        "Anna is the user's colleague.\nAnna reviews the PRs.",
    )


def test_add_only_appends_an_entry_and_keeps_the_old_one() -> None:
    one = op("events", "Shipped the migration.", "2026-05-06: shipped", event_name="ship")
    two = op("events", "Celebrated.", "2026-05-06: party", event_name="ship")
    first = render_memory(one, existing=None)
    both = render_memory(two, existing=with_memory_fields(first, {"v": 1}))
    assert both.startswith(first.rstrip("\n"))
    assert both.endswith("\n\n---\n\n2026-05-06: party\n\nCelebrated.\n")
    assert render_memory(two, existing=both) == both


@pytest.mark.parametrize("memory_type", sorted(MEMORY_TYPES))
def test_rendering_twice_changes_nothing(memory_type: str) -> None:
    fields = {f: "v" for f in MEMORY_TYPES[memory_type].fields}
    o = MemoryOperation(memory_type, fields, "line one\nline two\n\nline three", "summary")
    first = render_memory(o, existing=None)
    assert render_memory(o, existing=first) == first
    assert render_memory(o, existing=with_memory_fields(first, {"x": 1})) == first


def test_existing_text_without_summary_heading_is_content() -> None:
    merged = render_memory(
        op("profile", "User is a chef.", "Chef"), existing="Legacy note about the user.\n"
    )
    assert parse_memory_body(merged) == ("Chef", "User is a chef.\nLegacy note about the user.")
    assert render_memory(op("profile", "a", "b"), existing="  \n") == "# Summary\n\nb\n\na\n"


def test_trailer_round_trip() -> None:
    body = render_memory(op("profile", "User is a chef.", "Chef"), existing=None)
    stored = with_memory_fields(body, {"memory_type": "profile", "version": 1})
    stripped, fields = split_memory_fields(stored)
    assert fields == {"memory_type": "profile", "version": 1}
    assert stripped.rstrip() == body.rstrip()


def test_cases_keep_code_fences_when_appending() -> None:
    old = render_memory(
        op("cases", "Problem: flaky CI.\n```\nretry\n```", "Flaky CI", case_name="ci"),
        existing=None,
    )
    new = render_memory(
        op("cases", "Fix: pin the runner.\n```\npin\n```", "Flaky CI fixed", case_name="ci"),
        existing=old,
    )
    assert parse_memory_body(new)[1] == (
        "Problem: flaky CI.\n```\nretry\n```\nFix: pin the runner.\n```\npin\n```"
    )
    assert (
        render_memory(op("cases", "```\nretry\n```", "x", case_name="ci"), existing=new).count(
            "```"
        )
        == 4
    )


_LINES = st.lists(
    st.one_of(
        st.sampled_from(
            ["", "a", "A", "- a", "```", "---", "# Summary", "b c", "  b   c ", "0\x1e"]
        ),
        st.text(max_size=20),
    ),
    max_size=8,
).map("\n".join)


@settings(max_examples=200, deadline=None)
@given(memory_type=_TYPES, c1=_LINES, c2=_LINES, s1=st.text(max_size=30), s2=st.text(max_size=30))
# "0\b" restates "0" and "a" has no fact word: a second merge once moved "0\b" last.
@example(memory_type="identity", c1="", c2="0\n0\x08\na", s1="", s2="")
def test_property_merging_again_changes_nothing(
    memory_type: str, c1: str, c2: str, s1: str, s2: str
) -> None:
    fields = {f: "v" for f in MEMORY_TYPES[memory_type].fields}
    first = render_memory(MemoryOperation(memory_type, fields, c1, s1), existing=None)
    second_op = MemoryOperation(memory_type, fields, c2, s2)
    merged = render_memory(second_op, existing=with_memory_fields(first, {"version": 1}))
    assert render_memory(second_op, existing=with_memory_fields(merged, {"version": 2})) == merged
    assert split_memory_fields(with_memory_fields(merged, {}))[0].rstrip() == merged.rstrip()
