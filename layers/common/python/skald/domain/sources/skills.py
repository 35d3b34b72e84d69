"""Agent skills: a SKILL.md (YAML frontmatter with name and description, then a Markdown body)
read from text, a dict or an MCP tool definition, validated and rendered back.

The rules follow the Agent Skills format as OpenViking applies it: a name of at most 64 ASCII
letters, digits, `_` and `-`; a description; `allowed-tools` as a space-separated string or a
list; optional `tags` and `metadata`. Stored skills live in a package directory
`<root>/<name>/` whose `SKILL.md` is the definition; other files of the package sit beside it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from skald.domain.errors import InvalidArgument

SKILL_FILE = "SKILL.md"
MAX_NAME_CHARS = 64
MAX_DESCRIPTION_CHARS = 1024
MAX_BODY_LINES = 500  # advice of the format, a warning in strict validation

# `---` line, the YAML, a closing `---` line, then the body (possibly empty).
_FRONTMATTER = re.compile(
    r"\A---[ \t]*\r?\n(.*?)(?:\r?\n)?^---[ \t]*(?:\r?\n(.*))?\Z", re.DOTALL | re.MULTILINE
)
_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass
class Skill:
    name: str
    description: str
    body: str
    tags: list[str] = field(default_factory=list)
    allowed_tools: list[str] = field(default_factory=list)
    metadata: dict[str, Any] | None = None


# -------------------------------------------------------------------------------- names


def validate_skill_name(name: object) -> str:
    """The stripped name, or INVALID_ARGUMENT saying what is wrong with it."""
    if name is None:
        raise InvalidArgument("Skill must have a 'name' field", {"field": "name"})
    if not isinstance(name, str) or not name.strip():
        raise InvalidArgument("Skill 'name' must be a non-empty string", {"field": "name"})
    normalized = name.strip()
    if len(normalized) > MAX_NAME_CHARS:
        raise InvalidArgument(
            f"Skill name cannot exceed {MAX_NAME_CHARS} characters",
            {"field": "name", "max_length": MAX_NAME_CHARS, "actual_length": len(normalized)},
        )
    if not normalized.isascii() or not _NAME.match(normalized):
        raise InvalidArgument(
            f"Invalid skill name: {normalized[:80]}",
            {
                "field": "name",
                "reason": "a skill name may only contain ASCII "
                "letters, digits, underscores and hyphens",
            },
        )
    return normalized


# -------------------------------------------------------------------------------- parsing


def split_skill_md(text: str) -> tuple[dict[str, Any], str]:
    """The frontmatter (a mapping) and the body of SKILL.md text; INVALID_ARGUMENT when the
    frontmatter is missing or is not a YAML mapping."""
    match = _FRONTMATTER.match(text.lstrip("\ufeff"))
    if match is None:
        raise InvalidArgument(
            "SKILL.md must start with YAML frontmatter between '---' lines", {"field": "data"}
        )
    try:
        meta = yaml.safe_load(match.group(1) or "")
    except yaml.YAMLError as exc:
        raise InvalidArgument(
            f"Invalid YAML frontmatter: {exc}".splitlines()[0], {"field": "data"}
        ) from None
    if not isinstance(meta, dict):
        raise InvalidArgument("SKILL.md frontmatter must be a YAML mapping", {"field": "data"})
    return meta, (match.group(2) or "").strip()


def normalize_allowed_tools(value: object) -> list[str]:
    """`allowed-tools`: a list of strings, or one string split on spaces and commas outside
    parentheses (`Bash(git add:*) Read`)."""
    if value is None:
        return []
    if isinstance(value, list):
        if not all(isinstance(tool, str) for tool in value):
            raise InvalidArgument(
                "Skill 'allowed-tools' must be a space-separated string or a list of strings",
                {"field": "allowed-tools"},
            )
        return [tool for tool in value if tool.strip()]
    if not isinstance(value, str):
        raise InvalidArgument(
            "Skill 'allowed-tools' must be a space-separated string or a list of strings",
            {"field": "allowed-tools"},
        )
    return _split_tools(value)


def _split_tools(value: str) -> list[str]:
    """One string of tools, split on spaces and commas outside parentheses."""
    tools: list[str] = []
    current: list[str] = []
    depth = 0
    for char in value.strip():
        depth += (char == "(") - (char == ")")
        if depth < 0:
            break
        if depth == 0 and (char.isspace() or char == ","):
            if current:
                tools.append("".join(current))
                current = []
            continue
        current.append(char)
    if depth != 0:
        raise InvalidArgument(
            "Skill 'allowed-tools' has unbalanced parentheses", {"field": "allowed-tools"}
        )
    if current:
        tools.append("".join(current))
    return tools


def _tags(value: object) -> list[str]:
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    return [str(t) for t in items if str(t).strip()]


def _skill(meta: dict[str, Any], body: str, *, description_required: bool) -> Skill:
    name = validate_skill_name(meta.get("name"))
    description = meta.get("description")
    if description is None and description_required:
        raise InvalidArgument("Skill must have a 'description' field", {"field": "description"})
    if description is not None and not isinstance(description, str):
        raise InvalidArgument("Skill 'description' must be a string", {"field": "description"})
    tools = meta.get("allowed_tools")
    if not tools:
        tools = meta.get("allowed-tools")
    metadata = meta.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise InvalidArgument("Skill 'metadata' must be a mapping", {"field": "metadata"})
    return Skill(
        name,
        (description or "").strip(),
        body.strip(),
        _tags(meta.get("tags")),
        normalize_allowed_tools(tools),
        metadata,
    )


def parse_skill_md(text: str) -> Skill:
    meta, body = split_skill_md(text)
    return _skill(meta, body, description_required=True)


def is_mcp_tool(data: dict[str, Any]) -> bool:
    """An MCP tool definition (`tools/list` item): it carries an `inputSchema`."""
    return "inputSchema" in data


def skill_from_mcp_tool(tool: dict[str, Any]) -> Skill:
    """A skill describing one MCP tool: its name (underscores as hyphens), description and
    parameters."""
    raw = tool.get("name")
    if not isinstance(raw, str) or not raw.strip():
        raise InvalidArgument("MCP tool definition must have a 'name'", {"field": "name"})
    name = validate_skill_name(raw.strip().replace("_", "-"))
    description = tool.get("description") or ""
    if not isinstance(description, str):
        raise InvalidArgument("MCP tool 'description' must be a string", {"field": "description"})
    schema = tool.get("inputSchema")
    if schema is not None and not isinstance(schema, dict):
        raise InvalidArgument("MCP tool 'inputSchema' must be an object", {"field": "inputSchema"})
    lines = [f"# {name}", ""]
    if description:
        lines += [description.strip(), ""]
    props = (schema or {}).get("properties")
    if isinstance(props, dict) and props:
        required = (schema or {}).get("required") or []
        lines += ["## Parameters", ""]
        for pname, info in props.items():
            info = info if isinstance(info, dict) else {}
            need = "required" if pname in required else "optional"
            text = str(info.get("description") or "").strip()
            lines.append(
                f"- **{pname}** ({info.get('type', 'any')}, {need})" + (f": {text}" if text else "")
            )
        lines.append("")
    lines += [
        "## Usage",
        "",
        f"Call the MCP tool `{raw.strip()}` when the task matches the description above.",
    ]
    return Skill(name, description.strip(), "\n".join(lines))


def skill_from_data(data: object) -> Skill:
    """A skill from a request's `data`: SKILL.md text, a skill dict (name, description,
    content) or an MCP tool definition."""
    if (
        data is None
        or (isinstance(data, (str, dict, list)) and not data)
        or (isinstance(data, str) and not data.strip())
    ):
        raise InvalidArgument(
            "Skill data is empty: send SKILL.md text, a skill object or an MCP tool definition",
            {"field": "data"},
        )
    if isinstance(data, str):
        return parse_skill_md(data)
    if isinstance(data, dict):
        if is_mcp_tool(data):
            return skill_from_mcp_tool(data)
        body = data.get("content", data.get("body")) or ""
        if not isinstance(body, str):
            raise InvalidArgument("Skill 'content' must be a string", {"field": "content"})
        if body.lstrip("\ufeff").startswith("---"):
            # content given as a whole SKILL.md: its frontmatter fills what the dict leaves out
            meta, body = split_skill_md(body)
            data = {**meta, **{k: v for k, v in data.items() if k not in {"content", "body"}}}
        return _skill(data, body, description_required=False)
    raise InvalidArgument(
        f"Unsupported skill data of type {type(data).__name__}: send SKILL.md text or an object",
        {"field": "data"},
    )


def render_skill_md(skill: Skill) -> str:
    meta: dict[str, Any] = {"name": skill.name, "description": skill.description}
    if skill.allowed_tools:
        meta["allowed-tools"] = " ".join(skill.allowed_tools)
    if skill.tags:
        meta["tags"] = skill.tags
    if skill.metadata is not None:
        meta["metadata"] = skill.metadata
    head = yaml.safe_dump(meta, allow_unicode=True, sort_keys=False)
    return f"---\n{head}---\n\n{skill.body}\n" if skill.body else f"---\n{head}---\n"


def skill_header(text: str) -> dict[str, Any] | None:
    """name, description, tags and allowed_tools of stored SKILL.md text; None when it is not
    a readable skill (listings skip such directories)."""
    try:
        meta, _ = split_skill_md(text)
        skill = _skill(meta, "", description_required=False)
    except InvalidArgument:
        return None
    return {
        "name": skill.name,
        "description": skill.description,
        "tags": skill.tags,
        "allowed_tools": skill.allowed_tools,
    }


# -------------------------------------------------------------------------------- validation


def _issue(rule: str, message: str, field_name: str = "") -> dict[str, str]:
    issue = {"rule": rule, "message": message}
    if field_name:
        issue["field"] = field_name
    return issue


def _read_skill(data: object) -> tuple[dict[str, Any], str] | dict[str, str]:
    """The header and body of what was sent (a mapping or SKILL.md text), or the issue that
    says why it cannot be read."""
    if isinstance(data, dict):
        return dict(data), str(data.get("content") or "")
    if isinstance(data, str):
        try:
            return split_skill_md(data)
        except InvalidArgument as exc:
            return _issue("yaml_format", exc.message, "data")
    return _issue("yaml_format", f"Unsupported data type: {type(data).__name__}", "data")


def _name_advice(name: str, skill_dir_name: str | None) -> list[tuple[str, str]]:
    """(rule, message) of the format advice on a skill's name."""
    advice: list[tuple[str, str]] = []
    n = name.strip()
    d = (skill_dir_name or "").strip()
    if d and n != d:
        advice.append(("name_matches_directory", f"name '{n}' does not match directory name '{d}'"))
    if len(n) > MAX_NAME_CHARS:
        advice.append(("name_max_length", f"name must not exceed {MAX_NAME_CHARS} characters"))
    if not n.isascii() or not _NAME.match(n):
        advice.append(
            (
                "name_allowed_characters",
                "name may only contain letters, numbers, underscores, and hyphens",
            )
        )
    return advice


def validate_skill_format(
    data: object, *, strict: bool, skill_dir_name: str | None = None, source_path: str | None = None
) -> dict[str, Any]:
    """A report, never an error: `valid`, the parsed header, `errors` and `warnings`. Format
    advice (name length and characters, directory name, description length) is an error in
    strict mode and a warning otherwise."""
    errors: list[dict[str, str]] = []
    warnings: list[dict[str, str]] = []
    base = {"strict": strict, "source_path": source_path or ""}
    read = _read_skill(data)
    if isinstance(read, dict):
        return {"valid": False, **base, "errors": [read], "warnings": []}
    meta, body = read
    name, description = meta.get("name"), meta.get("description")
    if not isinstance(name, str) or not name.strip():
        errors.append(_issue("name_required", "name is required", "name"))
    if not isinstance(description, str) or not description.strip():
        errors.append(_issue("description_required", "description is required", "description"))

    def advice(rule: str, message: str, field_name: str) -> None:
        (errors if strict else warnings).append(_issue(rule, message, field_name))

    if isinstance(name, str) and name.strip():
        for rule, message in _name_advice(name, skill_dir_name):
            advice(rule, message, "name")
    if isinstance(description, str) and len(description) > MAX_DESCRIPTION_CHARS:
        advice(
            "description_max_length",
            f"description must not exceed {MAX_DESCRIPTION_CHARS} characters",
            "description",
        )
    tools: list[str] = []
    try:
        raw_tools = meta.get("allowed_tools") or meta.get("allowed-tools")
        tools = normalize_allowed_tools(raw_tools)
    except InvalidArgument as exc:
        errors.append(_issue("allowed_tools_format", exc.message, "allowed-tools"))
    body_lines = len(body.splitlines())
    if strict and body_lines > MAX_BODY_LINES:
        warnings.append(
            _issue("body_max_lines", f"SKILL.md body exceeds {MAX_BODY_LINES} lines", "content")
        )
    return {
        "valid": not errors,
        **base,
        "name": name if isinstance(name, str) else "",
        "description": description if isinstance(description, str) else "",
        "tags": _tags(meta.get("tags")),
        "allowed_tools": tools,
        "body_lines": body_lines,
        "skill_dir_name": skill_dir_name or "",
        "errors": errors,
        "warnings": warnings,
    }
