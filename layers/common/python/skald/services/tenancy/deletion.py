"""Removing a user or an account: a tombstone at once, then a durable purge.

`begin_user` / `begin_account` tombstone the row (keys stop resolving on the next lookup; the
id cannot be registered again until the purge ends), make sure a task tracks the purge and a
purge job is queued, and answer with the task (HTTP 202). They are idempotent: a DELETE repeated
while the purge runs answers with the same task, and one repeated after a purge failed starts a
new one. `resume` is the sweep that re-queues a purge whose job was lost (queued after the
tombstone, so a crash in between leaves a tombstone without a job) or whose task ended without
finishing it.

The task belongs to the requester (an admin sees it in their account's tasks), or to the system
when the requester is the root key or the user removing themselves (OpenViking's rule).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from skald import catalog
from skald.domain.access.call_context import tenant_scope
from skald.domain.access.identity import Identity
from skald.domain.errors import NotFound
from skald.ports import JobQueue, StateNotFound, StateStore, Task
from skald.ports.accounts import DELETING, Deletion, PendingDeletion
from skald.services.tasks import FINAL, TaskService
from skald.services.tenancy.results import AccountRemoval, UserRemoval

SYSTEM_ACCOUNT = "_root"
SYSTEM_USER = "root"
USER_DELETE = "user_delete"
ACCOUNT_DELETE = "account_delete"


def purge_payload(account_id: str, user_id: str | None, task_id: str) -> dict[str, Any]:
    """The purge job's payload: it works for the account it removes (its tenant)."""
    return {"task_id": task_id, "account": account_id, "user": user_id}


class TenantDeletion:
    def __init__(
        self,
        state: StateStore,
        tasks: TaskService,
        queue: Callable[[], JobQueue],
        clock: Callable[[], float],
        *,
        stale_after_s: float,
    ) -> None:
        self.state = state
        self.tasks = tasks
        self._queue = queue
        self.clock = clock
        self.stale_after_s = stale_after_s

    # ---------------------------------------------------------------- requests

    def _deletion(self, actor: Identity, target_account: str, target_user: str | None) -> Deletion:
        system = actor.role == "root" or (
            actor.account_id == target_account and actor.user_id == target_user
        )
        owner = (SYSTEM_ACCOUNT, SYSTEM_USER) if system else (actor.account_id, actor.user_id)
        return Deletion(
            str(uuid.uuid4()), self.clock(), f"{actor.account_id}/{actor.user_id}", *owner
        )

    def begin_user(self, actor: Identity, account_id: str, user_id: str) -> UserRemoval:
        fresh = self._deletion(actor, account_id, user_id)
        try:
            user = self.state.begin_user_deletion(account_id, user_id, fresh)
        except StateNotFound:
            raise NotFound(f"User {user_id} not found in {account_id}", user_id, "user") from None
        assert user.deletion is not None
        deletion = self._ensure(PendingDeletion(account_id, user_id, user.deletion), fresh)
        return UserRemoval(account_id, user_id, DELETING, deletion.task_id)

    def begin_account(self, actor: Identity, account_id: str) -> AccountRemoval:
        fresh = self._deletion(actor, account_id, None)
        try:
            account = self.state.begin_account_deletion(account_id, fresh)
        except StateNotFound:
            raise NotFound(f"Account {account_id} not found", account_id, "account") from None
        assert account.deletion is not None
        deletion = self._ensure(PendingDeletion(account_id, None, account.deletion), fresh)
        return AccountRemoval(account_id, True, DELETING, deletion.task_id)

    # ---------------------------------------------------------------- the task and the job

    def _ensure(self, pending: PendingDeletion, fresh: Deletion) -> Deletion:
        """The tombstone's purge, tracked and queued: a new purge when its task ended
        without finishing (failed or cancelled)."""
        deletion = pending.deletion
        task = self.tasks.store.get_task(deletion.task_id)
        if task is not None and task.status in FINAL:
            replacement = Deletion(
                fresh.task_id,
                self.clock(),
                fresh.requested_by,
                fresh.owner_account,
                fresh.owner_user,
            )
            if pending.user_id is None:
                self.state.replace_account_deletion(
                    pending.account_id, deletion.task_id, replacement
                )
            else:
                self.state.replace_user_deletion(
                    pending.account_id, pending.user_id, deletion.task_id, replacement
                )
            deletion, task = replacement, None
        if task is None:
            task = self._track(pending.account_id, pending.user_id, deletion)
        self._queue().enqueue(
            catalog.QUEUE_PURGE,
            catalog.JOB_PURGE,
            purge_payload(pending.account_id, pending.user_id, deletion.task_id),
            dedup_key=deletion.task_id,
        )
        return deletion

    def _track(self, account_id: str, user_id: str | None, deletion: Deletion) -> Task:
        owner = Identity(
            deletion.owner_account,
            deletion.owner_user,
            "root" if deletion.owner_account == SYSTEM_ACCOUNT else "admin",
        )
        target = account_id if user_id is None else f"{account_id}/{user_id}"
        kind = ACCOUNT_DELETE if user_id is None else USER_DELETE
        try:
            return self.tasks.create(
                owner, kind, resource_id=target, task_id=deletion.task_id, meta={"target": target}
            )
        except Exception:
            existing = self.tasks.store.get_task(deletion.task_id)
            if existing is None:  # not a race with another request: a real failure
                raise
            return existing

    # ---------------------------------------------------------------- the sweep

    def resume(self, stale_after_s: float | None = None) -> int:
        """Re-queues every purge that is not moving: no task, a task that ended without
        finishing, or one not updated for `stale_after_s` (default: the constructor's; its job
        lost). A purge queued twice runs once: the second finds its task ended. Returns how
        many were queued."""
        now = self.clock()
        stale = self.stale_after_s if stale_after_s is None else stale_after_s
        count = 0
        for pending in self.state.pending_deletions():
            task = self.tasks.store.get_task(pending.deletion.task_id)
            if task is not None and task.status not in FINAL and now - task.updated_at < stale:
                continue
            system = Identity(SYSTEM_ACCOUNT, SYSTEM_USER, "root")
            with tenant_scope(pending.account_id):  # it touches that account's rows only
                self._ensure(pending, self._deletion(system, pending.account_id, pending.user_id))
            count += 1
        return count
