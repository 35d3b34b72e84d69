"""SKILL.md rules: parsing, names, allowed-tools, MCP tool definitions, rendering, validation."""

from __future__ import annotations

import pytest

from skald.domain.errors import InvalidArgument
from skald.domain.sources.skills import (
    Skill,
    normalize_allowed_tools,
    parse_skill_md,
    render_skill_md,
    skill_from_data,
    skill_from_mcp_tool,
    skill_header,
    validate_skill_format,
    validate_skill_name,
)


def test_parse_reads_the_frontmatter_and_the_body() -> None:
    skill = parse_skill_md(
        "---\nname: pdf\ndescription: Read PDFs.\nallowed-tools: Read "
        "Bash(pdftotext:*)\ntags: forms\nmetadata: {v: 2}\n---\n\n# PDF\n"
    )
    assert skill == Skill(
        "pdf", "Read PDFs.", "# PDF", ["forms"], ["Read", "Bash(pdftotext:*)"], {"v": 2}
    )


@pytest.mark.parametrize(
    "text",
    [
        "---\nname: s\ndescription: d\n---",  # no newline after the closing line
        "\ufeff---\r\nname: s\r\ndescription: d\r\n---\r\nbody",  # BOM and CRLF
    ],
)
def test_parse_accepts_common_variants(text: str) -> None:
    assert parse_skill_md(text).name == "s"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("no frontmatter", "frontmatter"),
        ("---\nname: s\ndescription: d\n", "frontmatter"),  # never closed
        ("---\n- a list\n---\n", "mapping"),
        ("---\nname: [x\n---\n", "YAML"),
        ("---\ndescription: d\n---\n", "'name'"),
        ("---\nname: s\n---\n", "'description'"),
        ("---\nname: 'a b'\ndescription: d\n---\n", "Invalid skill name"),
        ("---\nname: s\ndescription: [1]\n---\n", "string"),
        ("---\nname: s\ndescription: d\nallowed-tools: 'Bash(x'\n---\n", "parentheses"),
    ],
)
def test_parse_refuses_with_a_clear_message(text: str, says: str) -> None:
    with pytest.raises(InvalidArgument, match=r"(?i)" + says.replace("[", r"\[")):
        parse_skill_md(text)


@pytest.mark.parametrize("name", ["", "  ", "../x", "a/b", "é", "a" * 65, None, 3])
def test_bad_names(name: object) -> None:
    with pytest.raises(InvalidArgument):
        validate_skill_name(name)


def test_names_are_stripped() -> None:
    assert validate_skill_name(" code_review-2 ") == "code_review-2"


def test_allowed_tools_split_outside_parentheses() -> None:
    assert normalize_allowed_tools("Bash(git add:*), Read  Write") == [
        "Bash(git add:*)",
        "Read",
        "Write",
    ]
    assert normalize_allowed_tools(["Read", " "]) == ["Read"]
    assert normalize_allowed_tools(None) == []
    with pytest.raises(InvalidArgument):
        normalize_allowed_tools([1])


def test_data_forms() -> None:
    assert skill_from_data({"name": "s", "description": "d", "content": "b"}).body == "b"
    whole = skill_from_data({"content": "---\nname: s\ndescription: d\n---\nbody"})
    assert (whole.name, whole.body) == ("s", "body")
    assert skill_from_data({"name": "s"}).description == ""  # a dict may omit it
    empties: list[object] = [None, "", "   ", {}, []]
    for empty in empties:
        with pytest.raises(InvalidArgument, match="empty"):
            skill_from_data(empty)
    with pytest.raises(InvalidArgument, match="Unsupported"):
        skill_from_data(3.5)


def test_mcp_tool_becomes_a_skill() -> None:
    skill = skill_from_mcp_tool(
        {
            "name": "get_weather",
            "description": "Weather now.",
            "inputSchema": {
                "properties": {"city": {"type": "string", "description": "City name"}},
                "required": ["city"],
            },
        }
    )
    assert skill.name == "get-weather" and skill.description == "Weather now."
    assert "- **city** (string, required): City name" in skill.body
    assert "`get_weather`" in skill.body
    assert skill_from_data({"name": "t", "inputSchema": {}}).name == "t"
    with pytest.raises(InvalidArgument, match="name"):
        skill_from_mcp_tool({"inputSchema": {}})


def test_render_round_trips() -> None:
    skill = Skill("s", "Does: things", "Body.", ["a"], ["Read", "Bash(x y)"], {"k": 1})
    assert parse_skill_md(render_skill_md(skill)) == skill
    assert skill_header(render_skill_md(skill)) == {
        "name": "s",
        "description": "Does: things",
        "tags": ["a"],
        "allowed_tools": ["Read", "Bash(x y)"],
    }
    assert skill_header("not a skill") is None


def test_validation_report() -> None:
    ok = validate_skill_format("---\nname: s\ndescription: d\n---\nbody", strict=True)
    assert ok["valid"] and ok["body_lines"] == 1 and ok["errors"] == ok["warnings"] == []
    bad = validate_skill_format({"description": "d" * 1100}, strict=False)
    assert not bad["valid"]
    assert [e["rule"] for e in bad["errors"]] == ["name_required"]
    assert [w["rule"] for w in bad["warnings"]] == ["description_max_length"]
    long = validate_skill_format("---\nname: s\ndescription: d\n---\n" + "x\n" * 501, strict=True)
    assert long["valid"] and long["warnings"][0]["rule"] == "body_max_lines"
    assert validate_skill_format(7, strict=False)["errors"][0]["rule"] == "yaml_format"
