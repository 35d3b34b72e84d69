"""The status of a session archive (the messages one commit reserved), defined once for the
services and every session store.

A StrEnum: its members are the strings the stores keep and the API shows, so stored values
and wire values need no conversion.
"""

from __future__ import annotations

from enum import StrEnum


class ArchiveStatus(StrEnum):
    PENDING = "pending"  # reserved by a commit; its memory extraction has not finished
    DONE = "done"  # memories extracted
    FAILED = "failed"  # extraction gave up; the session refuses new commits until resolved
    RESET = "reset"  # archived by a context reset: nothing to extract

    @property
    def settled(self) -> bool:
        """Whether nothing is left to do for the archive (extraction done, or none due)."""
        return self in (ArchiveStatus.DONE, ArchiveStatus.RESET)


ARCHIVE_STATUSES = frozenset(ArchiveStatus)
