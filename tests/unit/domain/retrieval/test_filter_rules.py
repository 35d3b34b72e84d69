"""IndexFilter rules shared by the index adapters: the URI canonical form, scopes, the time
field and levels, and the validated filter tree both adapters compile."""

from __future__ import annotations

from typing import Any

import pytest

from skald.domain.retrieval.filter_tree import (
    MAX_TREE_DEPTH,
    AllOf,
    AnyOf,
    Numbers,
    Prefix,
    Range,
    Strings,
    parse_tree,
)
from skald.domain.retrieval.index_filter import check_time_field, level_list, norm_uri, scope_uris


def test_norm_uri_drops_trailing_slashes_but_keeps_a_scheme_root() -> None:
    assert norm_uri("viking://r/a/") == "viking://r/a"
    assert norm_uri("viking://r/a//") == "viking://r/a"
    assert norm_uri("viking://") == "viking://"
    assert norm_uri("viking:///") == "viking://"
    assert norm_uri("viking://r/a.md") == "viking://r/a.md"


def test_a_scheme_root_scope_covers_everything() -> None:
    assert scope_uris(["viking://r/a/", "viking://u"]) == ["viking://r/a", "viking://u"]
    assert scope_uris(["viking://r", "viking://"]) is None
    assert scope_uris([]) == []


def test_time_field_and_levels() -> None:
    check_time_field("updated_at")
    check_time_field("created_at")
    with pytest.raises(ValueError, match="time_field must be updated_at or created_at"):
        check_time_field("written_at")
    assert level_list(1) == [1]
    assert level_list([0, 2]) == [0, 2]


def test_parse_tree_builds_typed_nodes() -> None:
    tree = parse_tree(
        {
            "op": "and",
            "conds": [
                {"op": "must", "field": "uri", "conds": ["viking://r/a/"]},
                {"op": "must_not", "field": "tags", "conds": "k=v"},
                {
                    "op": "or",
                    "conds": [
                        {"op": "must", "field": "level", "conds": [0, 1.0]},
                        {"op": "range", "field": "updated_at", "lt": 5, "gte": 1},
                        {"op": "prefix", "field": "owner", "prefix": "al"},
                    ],
                },
            ],
        }
    )
    assert tree == AllOf(
        (
            Strings("uri", ("viking://r/a",), False),
            Strings("tags", ("k=v",), True),
            AnyOf(
                (
                    Numbers("level", (0.0, 1.0), False),
                    Range("updated_at", (("lt", 5.0), ("gte", 1.0))),
                    Prefix("owner", "al"),
                )
            ),
        )
    )


@pytest.mark.parametrize(
    ("node", "message"),
    [
        ([], "filter node must be an object, got list"),
        ({"op": "xor"}, "unknown filter op 'xor'"),
        ({"op": "and", "conds": []}, "needs a non-empty 'conds' list"),
        ({"op": "and", "conds": [{"op": "must"}], "x": 1}, r"does not take \['x'\]"),
        ({"op": "must", "field": "colour", "conds": ["red"]}, "unknown filter field 'colour'"),
        ({"op": "must", "field": "uri", "conds": []}, "needs a non-empty 'conds' list"),
        ({"op": "must", "field": "uri", "conds": [3]}, "takes strings, got 3"),
        ({"op": "must", "field": "level", "conds": [True]}, "takes numbers, got True"),
        ({"op": "range", "field": "level"}, "takes one or more of gte, gt, lte, lt, got none"),
        ({"op": "range", "field": "level", "eq": 1}, r"got \['eq'\]"),
        ({"op": "range", "field": "uri", "gte": 1}, "needs a numeric field, not 'uri'"),
        ({"op": "range", "field": "level", "gte": "1"}, "takes numbers"),
        ({"op": "prefix", "field": "uri", "prefix": 1}, "needs a string 'prefix'"),
        ({"op": "prefix", "field": "level", "prefix": "1"}, "does not apply to the numeric field"),
    ],
)
def test_parse_tree_rejects_malformed_nodes(node: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_tree(node)


def test_parse_tree_limits_nesting() -> None:
    node: dict[str, Any] = {"op": "must", "field": "level", "conds": [0]}
    for _ in range(MAX_TREE_DEPTH):
        node = {"op": "and", "conds": [node]}
    assert isinstance(parse_tree(node), AllOf)
    with pytest.raises(ValueError, match="nests deeper"):
        parse_tree({"op": "and", "conds": [node]})


# OpenViking's other spellings (skald.domain.retrieval.filter_forms).


def test_a_plain_field_match_is_an_and_of_musts() -> None:
    assert parse_tree({"type": "resource"}) == Strings("context_type", ("resource",), False)
    assert parse_tree({"context_type": ["memory", "skill"], "level": 2}) == AllOf(
        (Strings("context_type", ("memory", "skill"), False), Numbers("level", (2.0,), False))
    )
    assert parse_tree({"level": {"gte": 1}}) == Range("level", (("gte", 1.0),))


def test_openviking_wrappers_aliases_and_time_ranges() -> None:
    assert parse_tree(
        {
            "filter": {
                "op": "must",
                "field": "parent_uri",
                "conds": ["viking://r/a/"],
                "para": "-d=0",
            }
        }
    ) == Strings("parent", ("viking://r/a",), False)
    assert parse_tree(
        {"op": "time_range", "field": "updated_at", "gte": "2026-01-01T00:00:00Z", "lt": 1.8e9}
    ) == Range("updated_at", (("gte", 1767225600.0), ("lt", 1.8e9)))
    assert parse_tree({"updated_at": {"gte": "2026-01-01"}}) == Range(
        "updated_at", (("gte", 1767225600.0),)
    )


def test_unsupported_openviking_forms_are_named() -> None:
    with pytest.raises(ValueError, match="para"):
        parse_tree({"op": "must", "field": "uri", "conds": ["viking://r"], "para": "-d=2"})
    with pytest.raises(ValueError, match="neither a number nor an ISO date"):
        parse_tree({"op": "range", "field": "created_at", "gte": "yesterday"})
    with pytest.raises(ValueError, match="unknown filter field"):
        parse_tree({"colour": "blue"})
