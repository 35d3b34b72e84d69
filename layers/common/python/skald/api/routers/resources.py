"""/api/v1/resources: temp uploads and add_resource."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, File, Form, UploadFile
from pydantic import BaseModel, ConfigDict

from skald.api.deps import Admitted, ContainerDep, DataIdentity, StorageAdmitted
from skald.api.envelope import Envelope, ok
from skald.api.openapi import Ok, VikingUriIn, errors
from skald.domain.errors import PayloadTooLarge
from skald.services.ingest.resources import AddResourceRequest
from skald.services.ingest.results import Added, TempUpload

router = APIRouter(prefix="/api/v1/resources")


class AddResourceBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str | None = None
    temp_file_id: str | None = None
    add_type: str | None = None
    to: VikingUriIn | None = None
    parent: VikingUriIn | None = None
    create_parent: bool = False
    reason: str = ""
    instruction: str = ""
    wait: bool = False
    strict: bool = False
    internal_task: bool = False
    source_name: str | None = None
    ignore_dirs: str | None = None
    include: str | None = None
    exclude: str | None = None
    directly_upload_media: bool = True
    preserve_structure: bool | None = None
    args: dict[str, Any] | None = None
    telemetry: bool | dict[str, Any] = False
    watch_interval: float = 0
    is_active: bool = True
    processing_mode: Literal["semantic_and_vectors", "vectors_only"] = "semantic_and_vectors"
    tags: list[str] | None = None
    tag_mode: str = "replace"
    acl: dict[str, Any] | None = None


@router.post("/temp_upload", response_model=Ok[TempUpload], dependencies=[StorageAdmitted])
async def temp_upload(
    identity: DataIdentity,
    c: ContainerDep,
    file: Annotated[UploadFile, File()],
    telemetry: Annotated[bool, Form()] = False,
    upload_mode: Annotated[str | None, Form()] = None,
) -> Envelope:
    limit = c.settings.max_upload_bytes
    chunks: list[bytes] = []
    size = 0
    while chunk := await file.read(1024 * 1024):
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge("Upload", size, limit)
        chunks.append(chunk)
    temp_id = c.resources.temp_upload(identity, file.filename or "upload", b"".join(chunks))
    return ok(TempUpload(temp_id))


@router.post("", response_model=Ok[Added], responses=errors(404, 409, 504), dependencies=[Admitted])
def add_resource(body: AddResourceBody, identity: DataIdentity, c: ContainerDep) -> Envelope:
    req = AddResourceRequest(
        temp_file_id=body.temp_file_id,
        path=body.path,
        to=body.to,
        parent=body.parent,
        source_name=body.source_name,
        create_parent=body.create_parent,
        ignore_dirs=body.ignore_dirs,
        include=body.include,
        exclude=body.exclude,
        tags=body.tags,
        tag_mode=body.tag_mode,
    )
    return ok(
        c.content.add_resource(
            identity,
            req,
            wait=body.wait,
            processing_mode=body.processing_mode,
            watch_interval=body.watch_interval,
            reason=body.reason,
            instruction=body.instruction,
        )
    )
