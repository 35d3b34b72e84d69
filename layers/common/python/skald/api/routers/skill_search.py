"""/api/v1/skills/find: agent skills by meaning, one hit per skill package. Served with the
other retrieval routes (it needs the embedder and reads the index)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from skald.api.deps import ContainerDep, DataIdentity
from skald.api.envelope import Envelope, ok
from skald.api.openapi import Ok, VikingUriIn, errors
from skald.api.telemetry import Operation, wanted
from skald.services.skills.results import SkillsFound

router = APIRouter(prefix="/api/v1/skills")


class FindSkillsBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str
    limit: int = Field(10, ge=1, le=1000)
    score_threshold: float | None = None
    level: list[int] | None = None
    telemetry: bool | dict[str, Any] = False
    target_uri: VikingUriIn | None = None


@router.post("/find", response_model=Ok[SkillsFound], responses=errors(404, 503))
def find_skills(body: FindSkillsBody, identity: DataIdentity, c: ContainerDep) -> Envelope:
    op = Operation("skills.find") if wanted(body.telemetry) else None
    found = c.skill_search.find(
        identity,
        body.query,
        limit=body.limit,
        score_threshold=body.score_threshold,
        level=body.level,
        target_uri=body.target_uri,
    )
    return ok(found) if op is None else ok(found, telemetry=op.report())
