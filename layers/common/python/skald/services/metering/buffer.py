"""UsageBuffer: the Meter of every entry point. Recording adds to an in-memory cell (one dict
update under a lock, no I/O); a background thread, the end of a Lambda invocation and the
shutdown flush the cells to the UsageLedger.

The buffer is bounded: past `max_cells` distinct cells waiting, a new cell is dropped and
counted (`dropped`), as is a batch the ledger kept refusing past the bound; an amount added
to a waiting cell is never dropped. A failed flush puts its cells back for the next one.
It also keeps, per account, what this process recorded and what it flushed of the two running
totals (bytes stored, tokens per day): the limits add what is recorded but not yet flushed to
what the ledger says."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from skald.domain.access.call_context import tenant_scope
from skald.domain.metering.cells import UsageCell, UsageTotals, totals_delta
from skald.domain.metering.units import dims_key, hour_of
from skald.ports import UsageLedger

log = logging.getLogger("skald")

CellKey = tuple[str, str, str, str, str]  # hour, account, user, unit, dims


class UsageBuffer:
    def __init__(
        self,
        ledger: Callable[[], UsageLedger | None],
        *,
        max_cells: int = 50_000,
        flush_interval_s: float = 10.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._ledger = ledger
        self.max_cells = max_cells
        self.flush_interval_s = flush_interval_s
        self.clock = clock
        self._cells: dict[CellKey, int] = {}
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._recorded: dict[str, UsageTotals] = {}
        self._flushed: dict[str, UsageTotals] = {}
        self.dropped = 0
        self._warned = False
        self.flushes = 0
        self.flush_failures = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ recording

    def record(
        self,
        account_id: str,
        user_id: str,
        unit: str,
        amount: int,
        dims: Mapping[str, str] | None = None,
    ) -> None:
        if not amount or not account_id:
            return
        try:
            hour = hour_of(self.clock())
            cell_key = (hour, account_id, user_id or "", str(unit), dims_key(dims))
            with self._lock:
                if cell_key in self._cells:
                    self._cells[cell_key] += int(amount)
                elif len(self._cells) >= self.max_cells:
                    self.dropped += 1
                    return
                else:
                    self._cells[cell_key] = int(amount)
                self._total(
                    self._recorded, [UsageCell(account_id, hour, "", str(unit), "", amount)]
                )
        except Exception:  # recording never fails a request
            self.dropped += 1
            log.exception("usage not recorded")

    @staticmethod
    def _total(into: dict[str, UsageTotals], cells: list[UsageCell]) -> None:
        for account, delta in totals_delta(cells).items():
            into.setdefault(account, UsageTotals()).add(delta)

    def unflushed(self, account_id: str) -> UsageTotals:
        """What this process recorded of the account's running totals and has not flushed."""
        with self._lock:
            out = self._recorded.get(account_id, UsageTotals()).copy()
            out.add(self._flushed.get(account_id, UsageTotals()), sign=-1)
        return out

    def recorded(self, account_id: str) -> UsageTotals:
        """What this process recorded of the account's running totals, since it started."""
        with self._lock:
            return self._recorded.get(account_id, UsageTotals()).copy()

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._cells)

    def stats(self) -> dict[str, int]:
        return {
            "pending_cells": self.pending,
            "dropped": self.dropped,
            "flushes": self.flushes,
            "flush_failures": self.flush_failures,
        }

    # ------------------------------------------------------------------ flushing

    def flush(self) -> int:
        """Writes every waiting cell to the ledger, one account at a time (in its tenant
        scope); how many cells were written. Cells of a failed account wait for the next."""
        with self._flush_lock:
            with self._lock:
                taken, self._cells = self._cells, {}
            if not taken:
                return 0
            ledger = self._ledger()
            if ledger is None:  # an entry point without the state store cannot keep them
                with self._lock:
                    self.dropped += len(taken)
                if not self._warned:
                    self._warned = True
                    log.warning("usage recorded here is dropped: no usage ledger (state store)")
                return 0
            by_account: dict[str, list[UsageCell]] = {}
            for (hour, account, user, unit, dims), value in taken.items():
                by_account.setdefault(account, []).append(
                    UsageCell(account, hour, user, unit, dims, value)
                )
            written = 0
            for account, cells in by_account.items():
                try:
                    with tenant_scope(account):
                        ledger.add(cells)
                except Exception:
                    self.flush_failures += 1
                    log.exception("usage flush of account %s failed; kept for the next", account)
                    self._put_back(cells)
                    continue
                written += len(cells)
                with self._lock:
                    self._total(self._flushed, cells)
            self.flushes += 1
            return written

    def _put_back(self, cells: list[UsageCell]) -> None:
        with self._lock:
            for c in cells:
                if c.key in self._cells:
                    self._cells[c.key] += c.value
                elif len(self._cells) >= self.max_cells:
                    self.dropped += 1
                else:
                    self._cells[c.key] = c.value

    def start(self) -> None:
        """The background flusher (`skald serve`, and a warm Lambda between invocations)."""
        if self._thread is not None or self.flush_interval_s <= 0:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="skald-usage-flush", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.flush_interval_s):
            try:
                self.flush()
            except Exception:
                log.exception("usage flush failed")

    def close(self) -> None:
        """Stops the flusher and flushes what is left (shutdown)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=5.0)
        self.flush()

    def __repr__(self) -> str:
        return f"<UsageBuffer {self.stats()}>"
