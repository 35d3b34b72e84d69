"""/api/v1/watches: list, get, update, delete and trigger watches, by task id or by target
URI (`?to_uri=`), in OpenViking's shapes."""

from __future__ import annotations

from fastapi import APIRouter, Body
from pydantic import BaseModel, ConfigDict

from skald.api.deps import ContainerDep, DataIdentity
from skald.api.envelope import Envelope, ok
from skald.api.openapi import Ok, UriQuery, errors
from skald.services.ingest.watches import (
    Watch,
    WatchDeleted,
    WatchList,
    WatchScheduled,
    WatchView,
)

router = APIRouter(prefix="/api/v1/watches")


class UpdateWatchBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    watch_interval: float | None = None
    is_active: bool | None = None
    reason: str | None = None
    instruction: str | None = None


def _deleted(watch: Watch) -> WatchDeleted:
    return WatchDeleted(watch.task_id, watch.to_uri)


def _scheduled(watch: Watch) -> WatchScheduled:
    return WatchScheduled(watch.task_id, watch.to_uri)


@router.get("", response_model=Ok[WatchView | WatchList], responses=errors(404))
def list_watches(
    identity: DataIdentity,
    c: ContainerDep,
    active_only: bool = False,
    to_uri: UriQuery | None = None,
) -> Envelope:
    if to_uri:
        watch = c.watches.get(identity, None, to_uri)
        if active_only and not watch.is_active:
            watch = c.watches.get(identity, "-", None)  # the same 404 as a missing one
        return ok(watch.view())
    watches = c.watches.list(identity, active_only=active_only)
    return ok(WatchList([w.view() for w in watches], len(watches)))


@router.patch("", response_model=Ok[WatchView], responses=errors(404))
def update_watch_by_uri(
    to_uri: UriQuery,
    identity: DataIdentity,
    c: ContainerDep,
    body: UpdateWatchBody = Body(...),  # noqa: B008
) -> Envelope:
    return ok(c.watches.update(identity, None, to_uri, **body.model_dump()).view())


@router.delete("", response_model=Ok[WatchDeleted], responses=errors(404))
def delete_watch_by_uri(to_uri: UriQuery, identity: DataIdentity, c: ContainerDep) -> Envelope:
    return ok(_deleted(c.watches.delete(identity, None, to_uri)))


@router.post("/trigger", response_model=Ok[WatchScheduled], responses=errors(404))
def trigger_watch_by_uri(to_uri: UriQuery, identity: DataIdentity, c: ContainerDep) -> Envelope:
    return ok(_scheduled(c.watches.trigger(identity, None, to_uri)))


@router.get("/{task_id}", response_model=Ok[WatchView], responses=errors(404))
def get_watch(
    task_id: str, identity: DataIdentity, c: ContainerDep, to_uri: UriQuery | None = None
) -> Envelope:
    return ok(c.watches.get(identity, task_id, to_uri).view())


@router.patch("/{task_id}", response_model=Ok[WatchView], responses=errors(404))
def update_watch(
    task_id: str,
    identity: DataIdentity,
    c: ContainerDep,
    body: UpdateWatchBody = Body(...),  # noqa: B008
    to_uri: UriQuery | None = None,
) -> Envelope:
    return ok(c.watches.update(identity, task_id, to_uri, **body.model_dump()).view())


@router.delete("/{task_id}", response_model=Ok[WatchDeleted], responses=errors(404))
def delete_watch(
    task_id: str, identity: DataIdentity, c: ContainerDep, to_uri: UriQuery | None = None
) -> Envelope:
    return ok(_deleted(c.watches.delete(identity, task_id, to_uri)))


@router.post("/{task_id}/trigger", response_model=Ok[WatchScheduled], responses=errors(404))
def trigger_watch(
    task_id: str, identity: DataIdentity, c: ContainerDep, to_uri: UriQuery | None = None
) -> Envelope:
    return ok(_scheduled(c.watches.trigger(identity, task_id, to_uri)))
