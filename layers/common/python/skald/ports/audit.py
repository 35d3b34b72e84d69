"""Port of the audit trail (re-exported by skald.ports): an append-only log of audit
records."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from skald.domain.ops.audit import AuditPage, AuditQuery, AuditRecord


@runtime_checkable
class AuditLog(Protocol):
    """Records are appended once and settled once; nothing else ever changes or removes one
    before retention does (`expires_at`)."""

    def append(self, record: AuditRecord) -> None:
        """Writes a new record durably before returning; raises when it could not (the
        caller then refuses the action). A record id that exists is an error too."""
        ...

    def settle(self, record: AuditRecord) -> bool:
        """Writes the outcome of a pending record appended before: `outcome`, `status_code`,
        `duration_ms`, the `error_*` fields and `detail`. False when there is no pending
        record with that id (never appended, settled already, or expired)."""
        ...

    def query(self, query: AuditQuery) -> AuditPage:
        """The page `query` asks for (newest first) and the totals over every page."""
        ...
