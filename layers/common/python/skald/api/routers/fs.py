"""/api/v1/fs: ls, tree, stat, attrs, mkdir, mv, cp, rm, set_tags."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict

from skald.api.deps import Admitted, ContainerDep, DataIdentity, uri_of
from skald.api.envelope import Envelope, ok
from skald.api.openapi import Ok, UriOrIdQuery, UriQuery, VikingUriIn, errors
from skald.domain.wire import WireUri
from skald.services.fs.browse import ListOptions
from skald.services.fs.results import Attrs, Entry, Stat
from skald.services.fs.results import Listing as Page
from skald.services.ingest.results import Copied, Moved, Removed, Tagged, UriResult

router = APIRouter(prefix="/api/v1/fs")


class MkdirBody(BaseModel):
    uri: VikingUriIn
    description: str | None = None
    acl: dict[str, Any] | None = None


class MoveBody(BaseModel):
    from_uri: VikingUriIn
    to_uri: VikingUriIn


class CopyBody(BaseModel):
    from_uri: VikingUriIn
    to_uri: VikingUriIn
    recursive: bool = False


class SetTagsBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    uri: VikingUriIn
    tags: list[str] | None = None
    mode: str = "replace"
    recursive: bool = False
    telemetry: bool | dict[str, Any] = False


class Listing(Ok[list[Entry] | list[WireUri]]):
    """ls and tree: entries (URIs only with `simple=true`) and whether more remain."""

    has_more: bool


def listed(listing: Page) -> Envelope:
    kind = list[Entry] if listing.entries and isinstance(listing.entries[0], Entry) else list[str]
    return ok(listing.entries, full=True, kind=kind, has_more=listing.has_more)


def _options(**kw: Any) -> ListOptions:
    limit = kw.pop("limit")
    if limit is not None:
        kw["node_limit"] = limit
    kw["extra_fields"] = kw["extra_fields"] or []
    kw["tags"] = kw["tags"] or []
    return ListOptions(**kw)


@router.get("/ls", response_model=Listing, responses=errors(404))
def ls(
    identity: DataIdentity,
    c: ContainerDep,
    uri: UriQuery,
    simple: bool = False,
    recursive: bool = False,
    output: str = "agent",
    abs_limit: int = 256,
    include_abstract: bool | None = None,
    include_overview: bool | None = None,
    overview_limit: int = 4000,
    show_all_hidden: bool = False,
    node_limit: int = 1000,
    offset: int = 0,
    limit: int | None = None,
    sort_by: str | None = None,
    sort_order: str = "asc",
    extra_fields: Annotated[list[str] | None, Query()] = None,
    tags: Annotated[list[str] | None, Query()] = None,
    include_tags: bool = False,
) -> Envelope:
    opts = _options(
        simple=simple,
        recursive=recursive,
        output=output,
        abs_limit=abs_limit,
        include_abstract=include_abstract,
        include_overview=include_overview,
        overview_limit=overview_limit,
        show_all_hidden=show_all_hidden,
        node_limit=node_limit,
        offset=offset,
        limit=limit,
        sort_by=sort_by,
        sort_order=sort_order,
        extra_fields=extra_fields,
        tags=tags,
        include_tags=include_tags,
        rel_paths=recursive,
    )
    return listed(c.browse.list_entries(identity, uri_of(identity, uri), opts))


@router.get("/tree", response_model=Listing, responses=errors(404))
def tree(
    identity: DataIdentity,
    c: ContainerDep,
    uri: UriQuery,
    output: str = "agent",
    abs_limit: int = 256,
    include_abstract: bool | None = None,
    include_overview: bool | None = None,
    overview_limit: int = 4000,
    show_all_hidden: bool = False,
    directories_only: bool = False,
    node_limit: int = 1000,
    offset: int = 0,
    limit: int | None = None,
    level_limit: int = 3,
    extra_fields: Annotated[list[str] | None, Query()] = None,
    tags: Annotated[list[str] | None, Query()] = None,
    include_tags: bool = False,
) -> Envelope:
    opts = _options(
        output=output,
        abs_limit=abs_limit,
        include_abstract=include_abstract,
        include_overview=include_overview,
        overview_limit=overview_limit,
        show_all_hidden=show_all_hidden,
        directories_only=directories_only,
        node_limit=node_limit,
        offset=offset,
        limit=limit,
        level_limit=level_limit,
        extra_fields=extra_fields,
        tags=tags,
        include_tags=include_tags,
        rel_paths=True,
    )
    return listed(c.browse.list_entries(identity, uri_of(identity, uri), opts))


@router.get("/stat", response_model=Ok[Stat], responses=errors(404))
def stat(identity: DataIdentity, c: ContainerDep, uri: UriOrIdQuery) -> Envelope:
    return ok(c.browse.stat(identity, uri_of(identity, uri)), full=True)


@router.get("/attrs", response_model=Ok[Attrs], responses=errors(404))
def attrs(identity: DataIdentity, c: ContainerDep, uri: UriQuery) -> Envelope:
    return ok(c.browse.attrs(identity, uri_of(identity, uri)))


@router.post("/mkdir", response_model=Ok[UriResult], responses=errors(409), dependencies=[Admitted])
def mkdir(body: MkdirBody, identity: DataIdentity, c: ContainerDep) -> Envelope:
    return ok(c.content.mkdir(identity, uri_of(identity, body.uri), body.description), full=True)


@router.post("/mv", response_model=Ok[Moved], responses=errors(404, 409), dependencies=[Admitted])
def mv(body: MoveBody, identity: DataIdentity, c: ContainerDep) -> Envelope:
    return ok(
        c.content.mv(identity, uri_of(identity, body.from_uri), uri_of(identity, body.to_uri)),
        full=True,
    )


@router.post("/cp", response_model=Ok[Copied], responses=errors(404, 409), dependencies=[Admitted])
def cp(body: CopyBody, identity: DataIdentity, c: ContainerDep) -> Envelope:
    return ok(
        c.content.cp(
            identity, uri_of(identity, body.from_uri), uri_of(identity, body.to_uri), body.recursive
        )
    )


@router.delete("", response_model=Ok[Removed], responses=errors(404, 504), dependencies=[Admitted])
def rm(
    identity: DataIdentity,
    c: ContainerDep,
    uri: UriQuery,
    recursive: bool = False,
    wait: bool = False,
) -> Envelope:
    return ok(
        c.content.rm(identity, uri_of(identity, uri), recursive=recursive, wait=wait), full=True
    )


@router.post(
    "/attrs/set_tags", response_model=Ok[Tagged], responses=errors(404), dependencies=[Admitted]
)
def set_tags(body: SetTagsBody, identity: DataIdentity, c: ContainerDep) -> Envelope:
    return ok(
        c.content.set_tags(
            identity, uri_of(identity, body.uri), body.tags, body.mode, body.recursive
        )
    )
