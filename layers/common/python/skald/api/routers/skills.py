"""/api/v1/skills: add, list, validate, show, replace and remove agent skills (find is in
skill_search, served with the other retrieval routes)."""

from __future__ import annotations

from typing import Annotated, Any, Self

from fastapi import APIRouter, Path
from pydantic import BaseModel, ConfigDict, model_validator

from skald.api.deps import Admitted, ContainerDep, DataIdentity
from skald.api.envelope import Envelope, ok
from skald.api.openapi import Ok, UriQuery, VikingUriIn, errors
from skald.services.skills.results import (
    SkillAdded,
    SkillDetail,
    SkillList,
    SkillRemoved,
    SkillsAdded,
    SkillsInPackage,
    SkillValidation,
)

router = APIRouter(prefix="/api/v1/skills")

# ASCII letters, digits, `_` and `-`, at most 64 (the domain rule, documented for clients)
SkillName = Annotated[str, Path(pattern=r"^[A-Za-z0-9_-]{1,64}$")]


# ------------------------------------------------------------------------ bodies


class UpdateSkillBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # SKILL.md text, a skill object (name, description, content) or an MCP tool definition
    data: Any = None
    temp_file_id: str | None = None
    wait: bool = False
    timeout: float | None = None
    source_metadata: dict[str, Any] | None = None
    target_uri: VikingUriIn | None = None
    telemetry: bool | dict[str, Any] = False

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if self.data is None and not self.temp_file_id:
            raise ValueError("Either 'data' or 'temp_file_id' must be provided")
        return self


class AddSkillBody(UpdateSkillBody):
    # a zip of several packages: the ones to add (`*`: all); list_only names them, adds none
    skills: list[str] | None = None
    list_only: bool = False


class ValidateSkillBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    data: Any
    strict: bool = False
    source_path: str | None = None
    skill_dir_name: str | None = None
    target_uri: VikingUriIn | None = None


# ------------------------------------------------------------------------ routes


@router.post(
    "",
    response_model=Ok[SkillAdded | SkillsAdded | SkillsInPackage],
    responses=errors(404, 409, 504),
    dependencies=[Admitted],
)
def add_skill(body: AddSkillBody, identity: DataIdentity, c: ContainerDep) -> Envelope:
    return ok(
        c.skills.add(
            identity,
            body.data,
            temp_file_id=body.temp_file_id,
            target_uri=body.target_uri,
            wait=body.wait,
            source_metadata=body.source_metadata,
            names=body.skills,
            list_only=body.list_only,
            timeout_s=body.timeout,
        )
    )


@router.get("", response_model=Ok[SkillList], responses=errors(404))
def list_skills(
    identity: DataIdentity,
    c: ContainerDep,
    node_limit: int = 1000,
    target_uri: UriQuery | None = None,
) -> Envelope:
    return ok(c.skills.listing(identity, node_limit, target_uri), full=True)


@router.post("/validate", response_model=Ok[SkillValidation])
def validate_skill(body: ValidateSkillBody, identity: DataIdentity, c: ContainerDep) -> Envelope:
    return ok(
        c.skills.validate(
            body.data,
            strict=body.strict,
            skill_dir_name=body.skill_dir_name,
            source_path=body.source_path,
        ),
        full=True,
    )


@router.get("/{skill_name}", response_model=Ok[SkillDetail], responses=errors(404))
def get_skill(
    skill_name: SkillName,
    identity: DataIdentity,
    c: ContainerDep,
    target_uri: UriQuery | None = None,
    include_content: bool | None = None,
    include_files: bool = True,
    include_integrity: bool = False,
    include_source: bool = False,
    level: int | None = None,
) -> Envelope:
    return ok(
        c.skills.show(
            identity,
            skill_name,
            target_uri=target_uri,
            include_content=include_content,
            include_files=include_files,
            include_integrity=include_integrity,
            include_source=include_source,
            level=level,
        ),
        full=True,
    )


@router.put(
    "/{skill_name}",
    response_model=Ok[SkillAdded],
    responses=errors(404, 504),
    dependencies=[Admitted],
)
def update_skill(
    skill_name: SkillName, body: UpdateSkillBody, identity: DataIdentity, c: ContainerDep
) -> Envelope:
    return ok(
        c.skills.update(
            identity,
            skill_name,
            body.data,
            temp_file_id=body.temp_file_id,
            target_uri=body.target_uri,
            wait=body.wait,
            source_metadata=body.source_metadata,
            timeout_s=body.timeout,
        )
    )


@router.delete(
    "/{skill_name}", response_model=Ok[SkillRemoved], responses=errors(404), dependencies=[Admitted]
)
def delete_skill(
    skill_name: SkillName,
    identity: DataIdentity,
    c: ContainerDep,
    target_uri: UriQuery | None = None,
) -> Envelope:
    return ok(c.skills.delete(identity, skill_name, target_uri), full=True)
