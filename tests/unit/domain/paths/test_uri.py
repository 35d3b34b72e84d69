"""viking:// URI rules, and the property that no accepted URI leaves its account's root."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skald.domain.errors import InvalidArgument, InvalidURI
from skald.domain.paths.uri import (
    ROOT,
    VikingURI,
    classify_uri,
    from_blob_key,
    parse_uri,
    validate_identifier,
)

NOW = datetime(2026, 5, 7, 12, 0, tzinfo=UTC)


def p(raw: str, user: str = "alice", privileged: bool = False) -> str:
    return str(parse_uri(raw, user_id=user, privileged=privileged, now=NOW))


def test_short_forms_and_aliases() -> None:
    assert p("viking://~/memories/x.md") == "viking://user/alice/memories/x.md"
    assert p("viking://~") == "viking://user/alice"
    assert (
        p("viking://session/s1/messages.jsonl") == "viking://user/alice/sessions/s1/messages.jsonl"
    )
    assert p("viking://resources/") == "viking://resources"
    assert p("viking://") == "viking://"
    assert parse_uri("viking://", user_id="a") == ROOT


def test_calendar_variables() -> None:
    assert (
        p("viking://~/memories/events/{calendar:today}")
        == "viking://user/alice/memories/events/2026/05/07"
    )
    assert p("viking://resources/{calendar:yesterday}") == "viking://resources/2026/05/06"
    assert p("viking://resources/{calendar:yq}/{calendar:week}") == "viking://resources/2026/Q2/W19"
    assert p("viking://resources/{calendar:ym}-{calendar:day}") == "viking://resources/2026/05-07"
    with pytest.raises(InvalidURI):
        p("viking://resources/{calendar:fortnight}")


@pytest.mark.parametrize(
    "raw",
    [
        "viking://resources/../x",
        "viking://resources/%2e%2e",
        "viking://resources/%2F",
        "viking://resources/a//b",
        "viking://resources/a\\b",
        "viking://temp/x",
        "viking://bogus",
        "resources/x",
        "",
        "viking://user/bad id/x",
        "viking://resources/" + "x" * 300,
    ],
)
def test_rejected(raw: str) -> None:
    with pytest.raises(InvalidURI):
        p(raw)


def test_reserved_user_segments() -> None:
    with pytest.raises(InvalidURI) as exc:
        p("viking://user/memories/x")
    assert "viking://~/memories" in exc.value.message
    assert p("viking://user/memories/x", privileged=True) == "viking://user/memories/x"


def test_identifiers() -> None:
    assert validate_identifier("a.b@c-d_e") == "a.b@c-d_e"
    for bad in ["", ".", "..", "a@b@c", "a b", "x" * 256, "é"]:
        with pytest.raises(InvalidArgument):
            validate_identifier(bad)
    with pytest.raises(InvalidArgument):
        validate_identifier("_sys", account=True)


def test_classify() -> None:
    c = classify_uri(parse_uri("viking://~/memories/preferences/alice/tea.md", user_id="alice"))
    assert (c.context_type, c.owner, c.memory_type) == ("memory", "alice", "preferences")
    assert str(c.memory_root) == "viking://user/alice/memories"
    c = classify_uri(parse_uri("viking://~/peers/bob/memories/profile.md", user_id="alice"))
    assert (c.context_type, c.peer, c.memory_type) == ("memory", "bob", "profile")
    c = classify_uri(parse_uri("viking://agent/skills/pdf/SKILL.md", user_id="a"))
    assert c.context_type == "skill" and str(c.skill_root) == "viking://agent/skills/pdf"
    assert str(c.skill_namespace) == "viking://agent/skills"
    assert classify_uri(parse_uri("viking://resources/x", user_id="a")).context_type == "resource"
    c = classify_uri(parse_uri("viking://session/s1", user_id="a"))
    assert (c.context_type, c.session_id) == ("memory", "s1")


def test_ancestors_and_within() -> None:
    u = VikingURI("resources", ("a", "b", "c.md"))
    assert u.ancestors() == ["viking://resources", "viking://resources/a", "viking://resources/a/b"]
    assert u.is_within(VikingURI("resources", ("a",)))
    assert not VikingURI("resources", ("ab",)).is_within(VikingURI("resources", ("a",)))


segment = st.text(alphabet=st.characters(blacklist_categories=["Cs"]), min_size=0, max_size=12)
raw_uris = st.builds(
    lambda parts, scope: "viking://" + "/".join([scope, *parts]),
    st.lists(
        st.one_of(
            segment,
            st.sampled_from(["..", ".", "%2e%2e", "%2F", "~", "", "a\\b", "{calendar:today}"]),
        ),
        max_size=6,
    ),
    st.sampled_from(
        ["resources", "user", "agent", "system", "session", "~", "temp", "x", "..", ""]
    ),
)


@settings(max_examples=400, deadline=None)
@given(raw=raw_uris, account=st.sampled_from(["acme", "a.b", "x-1"]))
def test_no_accepted_uri_escapes_the_account_root(raw: str, account: str) -> None:
    try:
        uri = parse_uri(raw, user_id="alice", now=NOW)
    except (InvalidURI, InvalidArgument):
        return
    key = uri.blob_key(account)
    assert key.startswith(f"{account}/")
    segments = key.split("/")
    assert ".." not in segments and "." not in segments
    assert all(s for s in segments[1:-1]) and "\\" not in key
    assert segments[-1] or uri.is_root
    back_account, back_uri = from_blob_key(key)
    assert back_account == account and back_uri == uri
    assert uri.scope in {None, "resources", "user", "agent", "system"}
    # the canonical form parses to itself
    assert parse_uri(str(uri), user_id="alice", privileged=True, now=NOW) == uri


def test_namespace_sidecars_are_not_skill_packages() -> None:
    for raw in ("viking://agent/skills/.overview.md", "viking://~/skills/.abstract.md"):
        c = classify_uri(parse_uri(raw, user_id="a"))
        assert c.context_type == "skill" and c.skill_root is None
    c = classify_uri(parse_uri("viking://agent/skills/pdf/.overview.md", user_id="a"))
    assert str(c.skill_root) == "viking://agent/skills/pdf"
