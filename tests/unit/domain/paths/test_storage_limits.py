"""Names and paths every blob store can hold, upload names made addressable, and lone
surrogate escapes found in JSON text."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skald.api.guards import lone_surrogate_at
from skald.domain.errors import InvalidArgument, InvalidURI
from skald.domain.paths.names import attrs_name
from skald.domain.paths.uri import (
    KEY_MAX_BYTES,
    MAX_DEPTH,
    MAX_PATH_BYTES,
    MAX_SEGMENT_BYTES,
    NAME_MAX_BYTES,
    VikingURI,
    addressable_name,
    check_storable,
    parse_uri,
)
from skald.domain.text.parsed import sidecar_name


def test_every_name_derived_from_the_longest_name_fits_a_filesystem() -> None:
    longest = "é" * (MAX_SEGMENT_BYTES // 2)  # two bytes each
    assert len(longest.encode()) == MAX_SEGMENT_BYTES
    for derived in (sidecar_name(longest), attrs_name(longest)):
        assert len(derived.encode()) <= NAME_MAX_BYTES
    assert len(sidecar_name(longest + "x").encode()) > NAME_MAX_BYTES


def test_the_longest_key_fits_s3() -> None:
    account = "a" * 255
    parts: list[str] = []
    while sum(len(p) + 1 for p in parts) + len("resources") + 200 <= MAX_PATH_BYTES:
        parts.append("p" * 199)
    parts.append("n" * (MAX_PATH_BYTES - len("/".join(["resources", *parts])) - 1))
    uri = check_storable(VikingURI("resources", tuple(parts)))
    parent_key = uri.parent.blob_key(account) if uri.parent else account
    assert len(f"{parent_key}/{sidecar_name(uri.name)}".encode()) <= KEY_MAX_BYTES
    with pytest.raises(InvalidURI):
        check_storable(VikingURI("resources", (*parts[:-1], parts[-1] + "n")))


def test_storable_limits() -> None:
    check_storable(VikingURI("resources", ("x" * MAX_SEGMENT_BYTES,)))
    with pytest.raises(InvalidURI, match="longer than 242 bytes"):
        check_storable(VikingURI("resources", ("x" * (MAX_SEGMENT_BYTES + 1),)))
    check_storable(VikingURI("resources", ("d",) * (MAX_DEPTH - 1)))
    with pytest.raises(InvalidURI, match="deeper than"):
        check_storable(VikingURI("resources", ("d",) * MAX_DEPTH))


def test_parse_refuses_depth_before_anything_else() -> None:
    with pytest.raises(InvalidURI, match="deeper than"):
        parse_uri("viking://resources/" + "/".join(["a"] * 1000), user_id="u")
    # existing names up to NAME_MAX stay readable
    assert parse_uri("viking://resources/" + "y" * 255, user_id="u").name == "y" * 255
    with pytest.raises(InvalidURI):
        parse_uri("viking://resources/" + "y" * 256, user_id="u")
    with pytest.raises(InvalidURI, match="surrogate"):
        parse_uri("viking://resources/a\ud800", user_id="u")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("a%00b.md", "a_00b.md"),
        ("a%2fb.md", "a_2fb.md"),
        ("%2e%2e.md", "_2e_2e.md"),
        ("a%5Cb", "a_5Cb"),
        ("a{x}.md", "a(x).md"),
        ("a/b\\c", "a_b_c"),
        ("t\tab\n", "t_ab_"),
        ("ok%41.md", "ok%41.md"),
        ("x\ud800y", "x\ufffdy"),
        (" spaced ", "spaced"),
    ],
)
def test_addressable_names(name: str, expected: str) -> None:
    assert addressable_name(name) == expected


@pytest.mark.parametrize("name", ["", ".", "..", "  ", " .. "])
def test_names_that_cannot_be_made_addressable(name: str) -> None:
    with pytest.raises(InvalidArgument):
        addressable_name(name)


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1, max_size=40))
def test_an_addressable_name_parses_back_to_itself(name: str) -> None:
    try:
        cleaned = addressable_name(name)
    except InvalidArgument:
        return
    uri = VikingURI("resources", ("up", cleaned))
    assert parse_uri(str(uri), user_id="u") == uri


@pytest.mark.parametrize(
    ("body", "offset"),
    [
        (b'{"a":"\\ud800"}', 6),
        (b'{"a":"\\udc00"}', 6),
        (b'{"a":"x\\ud800\\u0041"}', 7),
        (b'{"a":"\\ud800\\ud800\\udc00"}', 6),
        (b'["\\uDBFF"]', 2),
    ],
)
def test_lone_surrogates_are_found(body: bytes, offset: int) -> None:
    assert lone_surrogate_at(body) == offset


@pytest.mark.parametrize(
    "body",
    [
        b'{"a":"\\ud83d\\ude00"}',
        b'{"a":"\\\\ud800"}',
        b'{"a":"\\\\\\\\ud800"}',
        b'{"a":"plain"}',
        b'{"a":"\\u00e9\\n\\t"}',
        '{"a":"\U0001f600"}'.encode(),
    ],
)
def test_valid_text_passes(body: bytes) -> None:
    assert lone_surrogate_at(body) is None


@settings(max_examples=300, deadline=None)
@given(
    st.recursive(
        st.text() | st.integers(),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
        max_leaves=8,
    )
)
def test_json_of_valid_text_never_flags(value: object) -> None:
    body = json.dumps(value).encode()  # ensure_ascii: non-ASCII as escapes, astral as pairs
    assert lone_surrogate_at(body) is None
