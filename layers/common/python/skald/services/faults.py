"""Crash points: named places between the steps of a change that must survive a crash.

Production code calls `faults.hit("commit.after_reserve")` between two steps; with nothing
armed that costs a set insertion. Tests arm a point to stop there: in-process, `raise` throws
CrashPoint, a BaseException, so that no `except Exception` on the way mistakes it for an
ordinary error and cleans up after it (a real crash runs no handler either); in a server,
SKALD_FAULT_POINTS="commit.after_reserve=exit" ends the process on the spot with os._exit,
like kill -9: no handler, no flush, no atexit, no response.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

ACTIONS = ("raise", "exit")
EXIT_CODE = 137  # what a shell reports for kill -9


class CrashPoint(BaseException):  # noqa: N818 - it is not an error: it stands for a crash
    """Raised at an armed crash point."""

    def __init__(self, point: str) -> None:
        super().__init__(point)
        self.point = point


class Faults:
    def __init__(self, armed: Mapping[str, str] | None = None) -> None:
        for point, action in (armed or {}).items():
            if action not in ACTIONS:
                raise ValueError(f"crash point {point}: unknown action {action!r}")
        self.armed = dict(armed or {})
        self.passed: set[str] = set()  # every point reached, armed or not (tests list them)

    @classmethod
    def from_spec(cls, spec: str | None) -> Faults:
        """`point=action[,point=action...]`; an empty or missing spec arms nothing."""
        armed: dict[str, str] = {}
        for entry in (spec or "").split(","):
            if entry.strip():
                point, _, action = entry.strip().partition("=")
                armed[point.strip()] = action.strip() or "exit"
        return cls(armed)

    def hit(self, point: str) -> None:
        self.passed.add(point)
        action = self.armed.get(point)
        if action == "exit":
            os._exit(EXIT_CODE)
        if action == "raise":
            raise CrashPoint(point)
