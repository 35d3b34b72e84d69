"""The results of the skill routes and of the agent helpers, as the HTTP edge and the MCP tools
serialise them (docs/api.md, "Skills"). A None marked OMIT_NONE is a key the wire leaves out."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any

from pydantic import Field

from skald.domain.wire import OMIT_NONE, WireUri
from skald.services.ingest.results import ProcessingStatus
from skald.services.sessions.commit import Committed


class SkillStatus(StrEnum):
    SUCCESS = "success"  # every package of the request was stored


@dataclass(slots=True, kw_only=True)
class SkillSummary:
    type: str = "skill"
    name: str
    uri: WireUri
    root_uri: WireUri
    skill_md_uri: WireUri
    description: str
    tags: list[str]
    allowed_tools: list[str]


@dataclass(slots=True, kw_only=True)
class SkillHit(SkillSummary):
    score: float
    match_reason: str
    level: int
    abstract: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SkillFile:
    name: str
    uri: WireUri
    path: str
    is_dir: bool
    kind: str  # directory | definition | auxiliary
    size: Annotated[int | None, OMIT_NONE] = None  # with include_integrity
    sha256: Annotated[str | None, OMIT_NONE] = None


def _not_asked(value: Any) -> bool:
    return value is NOT_ASKED


# `source` without include_source: left out; asked for and never recorded: null.
NOT_ASKED: dict[str, Any] = {}


@dataclass(slots=True, kw_only=True)
class SkillDetail(SkillSummary):
    """show: the levels and parts asked for."""

    abstract: Annotated[str | None, OMIT_NONE] = None
    overview: Annotated[str | None, OMIT_NONE] = None
    content: Annotated[str | None, OMIT_NONE] = None
    content_sha256: Annotated[str | None, OMIT_NONE] = None
    files: Annotated[list[SkillFile] | None, OMIT_NONE] = None
    revision: Annotated[str | None, OMIT_NONE] = None  # with include_integrity
    # where the package came from: a client's own source_metadata, kept as it was sent
    source: Annotated[dict[str, Any] | None, Field(exclude_if=_not_asked)] = field(
        default_factory=lambda: NOT_ASKED
    )


@dataclass(slots=True, kw_only=True)
class SkillList:
    """`root_uris` without a target, `root_uri` with one."""

    root_uris: Annotated[list[WireUri] | None, OMIT_NONE] = None
    root_uri: Annotated[WireUri | None, OMIT_NONE] = None
    skills: list[SkillSummary]
    total: int


@dataclass(slots=True, kw_only=True)
class SkillsFound:
    root_uris: Annotated[list[WireUri] | None, OMIT_NONE] = None
    root_uri: Annotated[WireUri | None, OMIT_NONE] = None
    skills: list[SkillHit]
    total: int


@dataclass(slots=True, kw_only=True)
class SkillAdded:
    status: SkillStatus
    name: str
    uri: WireUri
    root_uri: WireUri
    skill_md_uri: WireUri
    auxiliary_files: int
    source: str  # inline_content | temp_upload
    task_id: str
    semantic_status: ProcessingStatus
    action: Annotated[str | None, OMIT_NONE] = None  # "update" from a replace


@dataclass(frozen=True, slots=True)
class SkillsAdded:
    """Several packages of one upload, added together."""

    status: SkillStatus
    installed: list[SkillAdded]
    total: int


@dataclass(frozen=True, slots=True)
class PackagedSkill:
    name: str
    description: str
    uri: WireUri


@dataclass(frozen=True, slots=True)
class SkillsInPackage:
    """`list_only`: the skills the request holds; nothing was written."""

    skills: list[PackagedSkill]
    total: int


@dataclass(frozen=True, slots=True)
class SkillRemoved:
    name: str
    uri: WireUri
    root_uri: WireUri
    estimated_deleted_count: int
    task_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SkillIssue:
    rule: str
    message: str
    field: Annotated[str | None, OMIT_NONE] = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SkillValidation:
    """A report, never an error; the header's keys only when the data could be read."""

    valid: bool
    strict: bool
    source_path: str
    name: Annotated[str | None, OMIT_NONE] = None
    description: Annotated[str | None, OMIT_NONE] = None
    tags: Annotated[list[str] | None, OMIT_NONE] = None
    allowed_tools: Annotated[list[str] | None, OMIT_NONE] = None
    body_lines: Annotated[int | None, OMIT_NONE] = None
    skill_dir_name: Annotated[str | None, OMIT_NONE] = None
    errors: list[SkillIssue]
    warnings: list[SkillIssue]


# ------------------------------------------------------------------------ agent helpers


@dataclass(frozen=True, slots=True)
class Edited:
    uri: WireUri
    replacements: int
    written_bytes: int
    sha256: str
    task_id: str | None
    semantic_status: ProcessingStatus


@dataclass(frozen=True, slots=True, kw_only=True)
class Remembered(Committed):
    """The commit's answer and the messages added before it."""

    messages_added: int
    message_ids: list[str]
