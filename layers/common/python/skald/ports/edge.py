"""Usage plans at the edge: each account's API Gateway key, in the usage plan of its tier.

On AWS the gateway throttles each account by the usage plan its key belongs to (the
authorizer names the key per request). `skald serve` has no gateway and no adapter: there the
app enforces rates itself.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class UsagePlans(Protocol):
    @property
    def tiers(self) -> frozenset[str]:
        """The tiers that have a usage plan."""
        ...

    def assign(self, account_id: str, tier: str) -> None:
        """Puts `account_id`'s key (made on first use) in `tier`'s usage plan and in no
        other. Idempotent; KeyError for a tier without a plan."""
        ...

    def placement(self, account_id: str) -> str | None:
        """The tier whose usage plan holds the account's key; None without a key or plan."""
        ...

    def release(self, account_id: str) -> bool:
        """Takes the account's key out of every usage plan and deletes it; False when it had
        none."""
        ...
