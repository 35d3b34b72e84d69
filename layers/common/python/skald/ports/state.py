"""State: tasks, and the StateStore that holds them with accounts, users and hashed keys
(skald.ports.accounts)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from skald.ports.accounts import AccountStore


class StateConflict(Exception):
    """A conditional state write failed (already exists, or a version changed)."""


class StateNotFound(KeyError):
    """The row does not exist."""


class TaskStatus(StrEnum):
    """Where a task stands. A cancel of a pending task ends it at once; of a running one it
    asks the worker to stop (`cancelling`), which ends it `cancelled` at its next step."""

    PENDING = "pending"
    RUNNING = "running"
    CANCELLING = "cancelling"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


# A task in one of these has ended: nothing moves it again.
TASK_FINAL = frozenset({TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED})


@dataclass
class Task:
    task_id: str
    task_type: str  # add_resource | write | session_commit | reindex | rm | mv ...
    status: TaskStatus
    account_id: str
    user_id: str
    created_at: float
    updated_at: float
    resource_id: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    stage: str | None = None
    result: dict[str, Any] | None = None
    error: str | None = None
    internal: bool = False


@dataclass(frozen=True)
class TaskPage:
    items: list[Task]
    next_cursor: str | None


@runtime_checkable
class TaskStore(Protocol):
    def create_task(self, task: Task) -> None: ...

    def get_task(self, task_id: str) -> Task | None: ...

    def update_task(self, task_id: str, **changes: Any) -> Task:
        """Sets the given fields and `updated_at`; raises StateNotFound."""
        ...

    def list_tasks(
        self,
        account_id: str,
        *,
        user_id: str | None = None,
        task_type: str | None = None,
        status: TaskStatus | None = None,
        resource_id: str | None = None,
        include_internal: bool = False,
        limit: int = 50,
        cursor: str | None = None,
    ) -> TaskPage:
        """Newest first."""
        ...

    def delete_tasks(self, account_id: str, *, user_id: str | None = None, limit: int = 500) -> int:
        """Deletes up to `limit` tasks of the account (of one user when `user_id` is set);
        returns how many went (0: none left)."""
        ...


@runtime_checkable
class StateStore(AccountStore, TaskStore, Protocol):
    """Everything that must be transactional."""
