"""/api/v1/tasks: poll, list and cancel background work."""

from __future__ import annotations

from fastapi import APIRouter

from skald.api.deps import AnyIdentity, ContainerDep
from skald.api.envelope import Envelope, ok, to_wire
from skald.api.openapi import Ok, errors
from skald.services.tasks import TaskPageView, TaskView, task_view

router = APIRouter(prefix="/api/v1/tasks")


@router.get("", response_model=Ok[list[TaskView] | TaskPageView])
def list_tasks(
    identity: AnyIdentity,
    c: ContainerDep,
    task_type: str | None = None,
    status: str | None = None,
    resource_id: str | None = None,
    include_internal: bool = False,
    limit: int = 50,
    pagination: str | None = None,
    cursor: str | None = None,
    q: str | None = None,
) -> Envelope:
    items, next_cursor = c.tasks.list(
        identity,
        task_type=task_type,
        status=status,
        resource_id=resource_id,
        include_internal=include_internal,
        limit=limit,
        cursor=cursor,
    )
    now = c.clock()
    views = [task_view(t, now) for t in items]
    if q:  # a substring of any field, as the view's JSON values print
        views = [v for v in views if q.lower() in str(to_wire(v)).lower()]
    if pagination == "cursor":
        return ok(TaskPageView(views, next_cursor is not None, next_cursor), full=True)
    return ok(views, full=True, kind=list[TaskView])


@router.get("/{task_id}", response_model=Ok[TaskView], responses=errors(404))
def get_task(
    task_id: str, identity: AnyIdentity, c: ContainerDep, include_events: bool = False
) -> Envelope:
    return ok(task_view(c.tasks.get(identity, task_id), c.clock()), full=True)


@router.post("/{task_id}/cancel", response_model=Ok[TaskView], responses=errors(404, 412))
def cancel_task(task_id: str, identity: AnyIdentity, c: ContainerDep) -> Envelope:
    return ok(task_view(c.tasks.cancel(identity, task_id), c.clock()), full=True)
