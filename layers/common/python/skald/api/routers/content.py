"""/api/v1/content: read, abstract, overview, download, write, batch-write, set_tags."""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import quote

from fastapi import APIRouter
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from skald.api.deps import Admitted, ContainerDep, DataIdentity, uri_of
from skald.api.envelope import Envelope, ok
from skald.api.openapi import Ok, UriOrIdQuery, UriQuery, VikingUriIn, errors
from skald.api.routers.fs import SetTagsBody
from skald.domain.paths.names import ABSTRACT, OVERVIEW
from skald.domain.text.outline import split_frontmatter
from skald.services.ingest.content import BatchOperation
from skald.services.ingest.results import BatchWritten, Reindexed, Tagged, Written

router = APIRouter(prefix="/api/v1/content")

ProcessingMode = Literal["semantic_and_vectors", "vectors_only"]


class WriteBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    uri: VikingUriIn
    content: str
    mode: str = "replace"
    wait: bool = False
    telemetry: bool | dict[str, Any] = False
    processing_mode: ProcessingMode = "semantic_and_vectors"
    tags: list[str] | None = None
    tag_mode: Literal["replace", "append", "clear"] = "replace"
    acl: dict[str, Any] | None = None
    edit_source: Literal["manual", "agent", "compile"] = "agent"


class BatchOp(BaseModel):
    model_config = ConfigDict(extra="forbid")
    uri: VikingUriIn
    content: str | None = None
    content_base64: str | None = None
    mode: str = "replace"
    expected_sha256: str | None = None
    tags: list[str] | None = None
    tag_mode: str = "replace"
    acl: dict[str, Any] | None = None


class BatchWriteBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    root_uri: VikingUriIn
    operations: list[BatchOp] = Field(max_length=1000)
    wait: bool = True
    telemetry: bool | dict[str, Any] = False
    skip_conflicts: bool = False
    defer_processing: bool = False
    processing_mode: ProcessingMode = "semantic_and_vectors"
    edit_source: Literal["manual", "agent", "compile"] = "agent"


@router.get("/read", response_model=Ok[str], responses=errors(404))
def read(
    identity: DataIdentity,
    c: ContainerDep,
    uri: UriOrIdQuery,
    offset: int = 0,
    limit: int = -1,
    raw: bool = False,
) -> Envelope:
    text = c.fs.read_text(
        identity, uri_of(identity, uri), offset=max(offset, 0), limit=limit, raw=raw
    )
    return ok(text, full=True)


def _sidecar(identity: DataIdentity, c: ContainerDep, uri: str, name: str) -> str:
    directory, text = c.fs.sidecar(identity, uri_of(identity, uri), name)
    if text is not None:
        return split_frontmatter(text)[1]
    kind = "abstract" if name == ABSTRACT else "overview"
    sep = " " if name == ABSTRACT else "\n\n"
    return f"# {directory}{sep}[Directory {kind} is not ready]"


@router.get("/abstract", response_model=Ok[str], responses=errors(404))
def abstract(identity: DataIdentity, c: ContainerDep, uri: UriQuery) -> Envelope:
    return ok(_sidecar(identity, c, uri, ABSTRACT), full=True)


@router.get("/overview", response_model=Ok[str], responses=errors(404))
def overview(identity: DataIdentity, c: ContainerDep, uri: UriQuery) -> Envelope:
    return ok(_sidecar(identity, c, uri, OVERVIEW), full=True)


@router.get(
    "/download",
    response_class=Response,
    responses={
        200: {
            "description": "The file's bytes",
            "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
            },
        },
        **errors(404),
    },
)
def download(identity: DataIdentity, c: ContainerDep, uri: UriQuery) -> Response:
    target = uri_of(identity, uri)
    data = c.fs.read_bytes(identity, target)
    name = quote(target.name)
    return Response(
        data,
        media_type="application/octet-stream",
        headers={"Content-Disposition": f"attachment; filename*=UTF-8''{name}"},
    )


@router.post(
    "/write", response_model=Ok[Written], responses=errors(404, 409, 504), dependencies=[Admitted]
)
def write(body: WriteBody, identity: DataIdentity, c: ContainerDep) -> Envelope:
    result = c.content.write(
        identity,
        uri_of(identity, body.uri),
        body.content,
        mode=body.mode,
        wait=body.wait,
        processing_mode=body.processing_mode,
        tags=body.tags,
        tag_mode=body.tag_mode,
    )
    return ok(result)


@router.post(
    "/batch-write",
    response_model=Ok[BatchWritten],
    responses=errors(404, 409, 504),
    dependencies=[Admitted],
)
def batch_write(body: BatchWriteBody, identity: DataIdentity, c: ContainerDep) -> Envelope:
    ops = [
        BatchOperation(
            uri_of(identity, op.uri),
            op.content,
            op.content_base64,
            op.mode,
            op.expected_sha256,
            op.tags,
            op.tag_mode,
        )
        for op in body.operations
    ]
    result = c.content.batch_write(
        identity,
        uri_of(identity, body.root_uri),
        ops,
        wait=body.wait,
        skip_conflicts=body.skip_conflicts,
        defer_processing=body.defer_processing,
        processing_mode=body.processing_mode,
    )
    return ok(result)


@router.post("/set_tags", response_model=Ok[Tagged], responses=errors(404), dependencies=[Admitted])
def set_tags(body: SetTagsBody, identity: DataIdentity, c: ContainerDep) -> Envelope:
    return ok(
        c.content.set_tags(
            identity, uri_of(identity, body.uri), body.tags, body.mode, body.recursive
        )
    )


class ReindexBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    uri: VikingUriIn
    mode: ProcessingMode = "vectors_only"
    force: bool = False
    wait: bool = True
    recursive: bool = True
    tags: list[str] | None = None
    tag_mode: str = "replace"


@router.post(
    "/reindex", response_model=Ok[Reindexed], responses=errors(404, 504), dependencies=[Admitted]
)
def reindex(body: ReindexBody, identity: DataIdentity, c: ContainerDep) -> Envelope:
    return ok(
        c.content.reindex(
            identity,
            uri_of(identity, body.uri),
            mode=body.mode,
            wait=body.wait,
            recursive=body.recursive,
            tags=body.tags,
            tag_mode=body.tag_mode,
        )
    )
