"""One-shot timers (idle auto-commit). Locally the deadlines live in the session rows and an
in-process timer polls them; on AWS each is an EventBridge Scheduler one-shot schedule."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Scheduler(Protocol):
    def schedule_once(self, name: str, at: float, payload: dict[str, Any]) -> None:
        """Creates or moves the one-shot timer `name` to fire at epoch `at` with `payload`
        (delivered to the auto-commit queue)."""
        ...

    def cancel(self, name: str) -> bool:
        """False when no such timer exists."""
        ...
