"""Tasks: the client-visible record of background work (add_resource, session_commit, ...).

A task belongs to the user whose request created it. A user sees (gets, lists, cancels) only
their own tasks; an account admin sees every task of the account, as they may read every user
space of it; the root key of api_key mode sees every task and cancels none. (OpenViking keeps
admins to their own tasks too; Skald gives them their account's.) The actor peer view does not
filter tasks: they belong to the user, not to a peer.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from skald.domain.access.identity import Identity
from skald.domain.access.visibility import manages_account, sees_user
from skald.domain.errors import FailedPrecondition, InvalidArgument, NotFound, PermissionDenied
from skald.domain.timefmt import iso_utc
from skald.ports import TASK_FINAL, Task, TaskStatus, TaskStore

FINAL = TASK_FINAL


class TaskService:
    def __init__(self, store: TaskStore, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.clock = clock

    def create(
        self,
        identity: Identity,
        task_type: str,
        *,
        resource_id: str | None = None,
        meta: dict[str, Any] | None = None,
        internal: bool = False,
        task_id: str | None = None,
    ) -> Task:
        task = self.new(
            identity,
            task_type,
            resource_id=resource_id,
            meta=meta,
            internal=internal,
            task_id=task_id,
        )
        self.store.create_task(task)
        return task

    def new(
        self,
        identity: Identity,
        task_type: str,
        *,
        resource_id: str | None = None,
        meta: dict[str, Any] | None = None,
        internal: bool = False,
        task_id: str | None = None,
    ) -> Task:
        """A pending task, not stored yet: for a store that creates it in the transaction of
        the change it tracks (a commit's archive reservation)."""
        now = self.clock()
        return Task(
            task_id or str(uuid.uuid4()),
            task_type,
            TaskStatus.PENDING,
            identity.account_id,
            identity.user_id,
            now,
            now,
            resource_id,
            dict(meta or {}),
            "queued",
            internal=internal,
        )

    def get(self, identity: Identity, task_id: str) -> Task:
        task = self.store.get_task(task_id)
        if task is None or not self._visible(identity, task):
            raise NotFound("Task not found or expired", task_id, "task")
        return task

    @staticmethod
    def _visible(identity: Identity, task: Task) -> bool:
        return sees_user(identity, task.account_id, task.user_id)

    def list(
        self,
        identity: Identity,
        *,
        task_type: str | None,
        status: str | None,
        resource_id: str | None,
        include_internal: bool,
        limit: int,
        cursor: str | None,
    ) -> tuple[list[Task], str | None]:
        if not 1 <= limit <= 200:
            raise InvalidArgument("limit must be between 1 and 200")
        wanted = _status(status)
        # Listing stays in the caller's account; within it, a user lists only their own.
        owner = None if manages_account(identity) else identity.user_id
        page = self.store.list_tasks(
            identity.account_id,
            user_id=owner,
            task_type=task_type,
            status=wanted,
            resource_id=resource_id,
            include_internal=include_internal,
            limit=limit,
            cursor=cursor,
        )
        return page.items, page.next_cursor

    def cancel(self, identity: Identity, task_id: str) -> Task:
        if identity.role == "root" and not identity.dev_mode:
            raise PermissionDenied("The root key cannot cancel tasks")
        task = self.get(identity, task_id)
        if task.status in FINAL:
            raise FailedPrecondition(
                f"Task {task_id} is already {task.status}",
                {"task_id": task_id, "status": task.status},
            )
        new = TaskStatus.CANCELLED if task.status == TaskStatus.PENDING else TaskStatus.CANCELLING
        return self.store.update_task(task_id, status=new)

    # ------------------------------------------------------------- transitions (workers)

    def start(self, task_id: str, stage: str) -> bool:
        """False when the task was cancelled before it started."""
        task = self.store.get_task(task_id)
        if task is None or task.status in {TaskStatus.CANCELLED, TaskStatus.CANCELLING}:
            if task is not None and task.status == TaskStatus.CANCELLING:
                self.store.update_task(task_id, status=TaskStatus.CANCELLED)
            return False
        if task.status in FINAL:
            return True
        self.store.update_task(task_id, status=TaskStatus.RUNNING, stage=stage)
        return True

    def complete(self, task_id: str, result: dict[str, Any]) -> None:
        self.store.update_task(
            task_id, status=TaskStatus.COMPLETED, stage="done", result=result, error=None
        )

    def fail(self, task_id: str, error: str) -> None:
        self.store.update_task(task_id, status=TaskStatus.FAILED, stage="failed", error=error)

    def abandon(self, task_id: str, error: str) -> None:
        """Fails the task unless it has ended already; a missing task is left alone."""
        task = self.store.get_task(task_id)
        if task is not None and task.status not in FINAL:
            self.fail(task_id, error)

    def drop(self, task_id: str, reason: str) -> None:
        """Cancels a task whose job will never run (its owner was removed); a task that has
        ended, or is gone, is left alone."""
        task = self.store.get_task(task_id)
        if task is not None and task.status not in FINAL:
            self.store.update_task(
                task_id, status=TaskStatus.CANCELLED, stage="cancelled", error=reason
            )

    def progress(self, task_id: str, so_far: dict[str, Any]) -> None:
        """A running task's partial result (its work continues in another job)."""
        self.store.update_task(task_id, stage="processing", result=dict(so_far))

    def stage(self, task_id: str, stage: str) -> None:
        self.store.update_task(task_id, stage=stage)


def _status(raw: str | None) -> TaskStatus | None:
    if raw is None:
        return None
    try:
        return TaskStatus(raw)
    except ValueError:
        raise InvalidArgument(f"Invalid status '{raw}'") from None


@dataclass(frozen=True, slots=True)
class TaskView:
    """A task as its routes answer it (docs/api.md, "Tasks")."""

    task_id: str
    task_type: str
    status: TaskStatus
    created_at: float
    updated_at: float
    processing_seconds: float
    resource_id: str | None
    meta: dict[str, Any]  # the kind's own notes (archive id, file counts): data, not a result
    stage: str | None
    result: dict[str, Any] | None  # the kind's own outcome, as its worker wrote it
    error: str | None
    created_at_iso: str
    updated_at_iso: str


@dataclass(frozen=True, slots=True)
class TaskPageView:
    """The cursor-paginated listing (`pagination=cursor`)."""

    items: list[TaskView]
    has_more: bool
    next_cursor: str | None


def task_view(task: Task, now: float) -> TaskView:
    end = task.updated_at if task.status in FINAL else now
    return TaskView(
        task_id=task.task_id,
        task_type=task.task_type,
        status=TaskStatus(task.status),
        created_at=task.created_at,
        updated_at=task.updated_at,
        processing_seconds=round(max(0.0, end - task.created_at), 3),
        resource_id=task.resource_id,
        meta=task.meta,
        stage=task.stage,
        result=task.result,
        error=task.error,
        created_at_iso=iso_utc(task.created_at),
        updated_at_iso=iso_utc(task.updated_at),
    )
