"""Deterministic summaries used when no LLM is configured (and as the overview tier of context
assembly): Markdown heading trees, code signatures, memory `# Summary` sections, data keys."""

from __future__ import annotations

import ast
import html
import json
import re
from dataclasses import dataclass

from skald.domain.text.memoryfile import split_memory_fields, split_provenance, strip_memory_fields

MARKDOWN_EXT = frozenset({".md", ".markdown", ".mdx", ".rst", ".txt", ""})
CODE_EXT = frozenset(
    {
        ".py",
        ".js",
        ".jsx",
        ".ts",
        ".tsx",
        ".go",
        ".rs",
        ".java",
        ".kt",
        ".c",
        ".h",
        ".cc",
        ".cpp",
        ".hpp",
        ".cs",
        ".rb",
        ".php",
        ".swift",
        ".scala",
        ".sh",
        ".lua",
        ".sql",
    }
)
DATA_EXT = frozenset({".json", ".yaml", ".yml", ".toml"})
HTML_EXT = frozenset({".html", ".htm", ".xml"})

_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_SIGNATURE = re.compile(
    r"^\s*(?:export\s+)?(?:pub\s+)?(?:public\s+|private\s+|protected\s+|static\s+|async\s+)*"
    r"(?:def|class|function|func|fn|interface|struct|enum|trait|type|impl|module)\s+"
    r"[A-Za-z_][\w<>, ]*.*$"
)
_TAG = re.compile(r"<[^>]+>")
_SCRIPT = re.compile(r"<(script|style)\b.*?</\1>", re.DOTALL | re.IGNORECASE)


def suffix_of(name: str) -> str:
    dot = name.rfind(".")
    return name[dot:].lower() if dot > 0 else ""


def html_to_text(text: str) -> str:
    text = _SCRIPT.sub(" ", text)
    text = re.sub(r"<br\s*/?>|</p>|</h[1-6]>|</li>|</div>", "\n", text, flags=re.IGNORECASE)
    text = _TAG.sub(" ", text)
    text = html.unescape(text)
    return "\n".join(re.sub(r"[ \t]+", " ", line).strip() for line in text.splitlines())


def searchable_text(name: str, text: str) -> str:
    """What gets embedded and indexed for a file. A memory file's provenance (archive URIs,
    message ids) is metadata, not text to match."""
    text, fields = split_memory_fields(text)
    if fields is not None:
        text = split_provenance(text)[1]
    if suffix_of(name) in HTML_EXT:
        return html_to_text(text)
    return text


def first_paragraph(text: str, *, skip_headings: bool = True) -> str:
    para: list[str] = []
    in_fence = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            in_fence = not in_fence
            if para:
                break
            continue
        if in_fence:
            continue
        if not stripped:
            if para:
                break
            continue
        if skip_headings and _HEADING.match(stripped):
            if para:
                break
            continue
        if stripped.startswith("---") and not para:
            continue
        para.append(stripped)
    return " ".join(para)


def markdown_headings(text: str) -> list[tuple[int, str, int]]:
    """(level, title, 1-based line) for every ATX heading outside code fences."""
    out: list[tuple[int, str, int]] = []
    in_fence = False
    for i, line in enumerate(text.splitlines(), 1):
        if line.strip().startswith("```"):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        m = _HEADING.match(line)
        if m:
            out.append((len(m.group(1)), m.group(2).strip(), i))
    return out


def python_signatures(text: str) -> list[str]:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return generic_signatures(text)
    out: list[str] = []

    def visit(nodes: list[ast.stmt], indent: str) -> None:
        for node in nodes:
            if isinstance(node, ast.ClassDef):
                bases = ", ".join(ast.unparse(b) for b in node.bases)
                out.append(
                    f"{indent}class {node.name}({bases})" if bases else f"{indent}class {node.name}"
                )
                visit(node.body, indent + "    ")
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                prefix = "async def" if isinstance(node, ast.AsyncFunctionDef) else "def"
                ret = f" -> {ast.unparse(node.returns)}" if node.returns else ""
                out.append(f"{indent}{prefix} {node.name}({ast.unparse(node.args)}){ret}")

    visit(tree.body, "")
    return out


def generic_signatures(text: str) -> list[str]:
    out = []
    for line in text.splitlines():
        if _SIGNATURE.match(line) and len(line) < 200:
            out.append(line.rstrip().rstrip("{").rstrip())
    return out


def memory_summary(text: str) -> str | None:
    """The `# Summary` section of a memory file, if any."""
    body = strip_memory_fields(text)
    m = re.search(
        r"^#{1,3}\s*Summary\s*$(.*?)(?=^#{1,3}\s|\Z)",
        body,
        re.MULTILINE | re.DOTALL | re.IGNORECASE,
    )
    if not m:
        return None
    # the summary is the first paragraph under the heading; the memory's content follows
    first = m.group(1).strip().split("\n\n", 1)[0].strip()
    return first or None


def data_keys(name: str, text: str) -> list[str]:
    if suffix_of(name) == ".json":
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            return []
        if isinstance(value, dict):
            return [str(k) for k in list(value)[:40]]
        return []
    keys = []
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z_][\w.-]*)\s*[:=]", line)
        if m:
            keys.append(m.group(1))
    return keys[:40]


@dataclass(frozen=True)
class FileOutline:
    abstract: str  # one line, at most abstract_max_chars
    overview: str  # outline, at most overview_max_chars


def clip(text: str, limit: int) -> str:
    """Cuts at a word boundary and marks the cut (only for generated summaries)."""
    text = text.strip()
    if len(text) <= limit:
        return text
    cut = text[: max(limit - 1, 1)]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip() + "…"


def outline_file(
    name: str, text: str, *, abstract_max: int = 256, overview_max: int = 4000
) -> FileOutline:
    suffix = suffix_of(name)
    body = strip_memory_fields(text)
    summary = memory_summary(text)
    lines: list[str]
    if summary:
        abstract = summary.splitlines()[0]
        overview = summary
    elif suffix in CODE_EXT:
        sigs = python_signatures(body) if suffix == ".py" else generic_signatures(body)
        doc = _leading_comment(body)
        abstract = doc or (
            f"{name}: " + ", ".join(s.strip() for s in sigs[:6])
            if sigs
            else first_paragraph(body, skip_headings=False)
        )
        overview = "\n".join(([doc, ""] if doc else []) + sigs) or first_paragraph(body)
    elif suffix in DATA_EXT:
        keys = data_keys(name, body)
        abstract = f"{name}: keys " + ", ".join(keys[:12]) if keys else first_paragraph(body)
        overview = "Keys: " + ", ".join(keys) if keys else body[:overview_max]
    else:
        plain = html_to_text(body) if suffix in HTML_EXT else body
        heads = markdown_headings(plain)
        para = first_paragraph(plain)
        title = heads[0][1] if heads else ""
        abstract = f"{title}: {para}" if title and para else (title or para)
        lines = [f"{'  ' * (lvl - 1)}- {t}" for lvl, t, _ in heads]
        overview = "\n".join(lines + (["", para] if para else [])) if lines else para
    abstract = " ".join(abstract.split())
    return FileOutline(clip(abstract, abstract_max), clip(overview, overview_max))


def directory_abstract(name: str, folders: int, files: int, lines: list[str]) -> str:
    """A directory's L0 without an LLM: what it holds, counted over every child (a large
    directory's listing shows a sample), then the first listed child's abstract."""
    parts = [
        f"{n} {kind}{'s' if n != 1 else ''}"
        for n, kind in ((files, "file"), (folders, "folder"))
        if n
    ]
    head = f"{name}: " + (" and ".join(parts) if parts else "empty")
    first = next((ln.split(": ", 1)[1] for ln in lines if ": " in ln), "")
    return f"{head}. {first}" if first else head


def _leading_comment(text: str) -> str:
    m = re.match(r'\s*(?:"""(.*?)"""|\'\'\'(.*?)\'\'\')', text, re.DOTALL)
    if m:
        doc = (m.group(1) or m.group(2) or "").strip()
        return " ".join(doc.split("\n\n")[0].split())
    lines = []
    for line in text.splitlines():
        s = line.strip()
        if s.startswith(("#!", "// SPDX", "# -*-")):
            continue
        if s.startswith(("//", "#", "--")):
            lines.append(s.lstrip("/#- ").strip())
        elif s.startswith(("/*", "*")):
            lines.append(s.lstrip("/* ").strip())
        else:
            break
    return " ".join(x for x in lines if x)


def split_frontmatter(text: str) -> tuple[dict[str, str], str]:
    """The `---` YAML-style frontmatter of a sidecar (its freshness ledger) and the body."""
    if not text.startswith("---\n"):
        return {}, text
    end = text.find("\n---\n", 4)
    if end < 0:
        return {}, text
    meta: dict[str, str] = {}
    for line in text[4:end].splitlines():
        key, sep, value = line.partition(":")
        if sep:
            meta[key.strip()] = value.strip()
    return meta, text[end + 5 :].lstrip("\n")
