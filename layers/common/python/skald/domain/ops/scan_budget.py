"""How much a scan of a whole tree (grep) may read: a bound per file and one in all.

A file larger than what is left is skipped, and the scan goes on with the next one, which
may still fit; the scan is then incomplete (`skipped`). The store checks a file's size
against `limit()` before it reads the file, and `take`s it only when it fits.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ScanBudget:
    file_bytes: int
    total_bytes: int
    skipped: int = 0  # files left unread for their size

    def limit(self) -> int:
        """The size of the largest file that may still be read."""
        return min(self.file_bytes, self.total_bytes)

    def take(self, size: int) -> bool:
        """Counts a file of `size` bytes as read when it fits (True); else it is skipped."""
        if size > self.limit():
            self.skipped += 1
            return False
        self.total_bytes -= size
        return True
