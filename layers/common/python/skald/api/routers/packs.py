"""/api/v1/pack: export, import, backup and restore `.ovpack` files."""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import quote

from fastapi import APIRouter
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict

from skald.api.deps import Admitted, ContainerDep, DataIdentity, uri_of
from skald.api.envelope import Envelope, ok
from skald.api.openapi import Ok, VikingUriIn, errors
from skald.services.ingest.results import UriResult

router = APIRouter(prefix="/api/v1/pack")

OnConflict = Literal["fail", "overwrite", "skip"]
VectorMode = Literal["auto", "recompute", "require"]
_ZIP: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The .ovpack (a zip archive)",
        "content": {"application/zip": {"schema": {"type": "string", "format": "binary"}}},
    }
}


class ExportBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    uri: VikingUriIn
    include_vectors: bool = False


class BackupBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    include_vectors: bool = False


class ImportBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    temp_file_id: str
    parent: VikingUriIn
    on_conflict: OnConflict | None = None
    vector_mode: VectorMode | None = None


class RestoreBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    temp_file_id: str
    on_conflict: OnConflict | None = None
    vector_mode: VectorMode | None = None


def _pack(data: bytes, name: str) -> Response:
    return Response(
        data,
        media_type="application/zip",
        headers={"Content-Disposition": f"attachment; filename*=UTF-8''{quote(name)}.ovpack"},
    )


@router.post("/export", response_class=Response, responses={**_ZIP, **errors(404, 413)})
def export(body: ExportBody, identity: DataIdentity, c: ContainerDep) -> Response:
    uri = uri_of(identity, body.uri)
    return _pack(c.packs.export(identity, uri, body.include_vectors), uri.name or "export")


@router.post("/backup", response_class=Response, responses={**_ZIP, **errors(403, 413)})
def backup(identity: DataIdentity, c: ContainerDep, body: BackupBody | None = None) -> Response:
    include = body.include_vectors if body is not None else False
    return _pack(c.packs.backup(identity, include), "openviking-backup")


@router.post(
    "/import",
    response_model=Ok[UriResult],
    responses=errors(404, 409, 413),
    dependencies=[Admitted],
)
def import_pack(body: ImportBody, identity: DataIdentity, c: ContainerDep) -> Envelope:
    return ok(
        c.packs.import_pack(
            identity,
            body.temp_file_id,
            uri_of(identity, body.parent),
            on_conflict=body.on_conflict,
            vector_mode=body.vector_mode,
        )
    )


@router.post(
    "/restore",
    response_model=Ok[UriResult],
    responses=errors(403, 404, 409, 413),
    dependencies=[Admitted],
)
def restore(body: RestoreBody, identity: DataIdentity, c: ContainerDep) -> Envelope:
    return ok(
        c.packs.restore(
            identity, body.temp_file_id, on_conflict=body.on_conflict, vector_mode=body.vector_mode
        )
    )
