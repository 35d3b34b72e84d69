"""Keeping the edge in step with plans: each account's API Gateway key sits in the usage plan
of its tier, so the gateway throttles the account at its tier's rate before any function runs.

Call `sync` whenever an account's tier may have changed (created, its plan set); `remove`
when it is purged; `sync_all` after a deploy that brought usage plans to existing accounts
(`skald admin edge-sync`). Without an adapter (`skald serve`, aws-local) every call is a no-op:
the app enforces rates itself there. A per-account override of the rate or burst is not an edge
matter: the usage plans are per tier, so the gateway applies the tier's and the app the rest.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from skald.domain.errors import InvalidArgument
from skald.domain.plans import TIERS, resolve
from skald.ports import AccountStore, UsagePlans
from skald.ports.accounts import ACTIVE

log = logging.getLogger("skald.edge")


@dataclass(frozen=True)
class EdgeSynced:
    """What a sync of every account did."""

    accounts: int
    by_tier: dict[str, int]


class EdgeKeys:
    def __init__(
        self,
        plans: UsagePlans | None,
        accounts: AccountStore | None,
        *,
        default_tier: str = "unlimited",
    ) -> None:
        self.plans = plans
        self.accounts = accounts
        self.default_tier = default_tier

    @property
    def enabled(self) -> bool:
        return self.plans is not None

    def tier_of(self, account_id: str) -> str:
        """The tier named by the account's settings (or the default tier, as PlanBook falls
        back to it for a tier removed since)."""
        account = self.accounts.get_account(account_id) if self.accounts else None
        try:
            return resolve(account.settings if account is not None else {}, self.default_tier).name
        except InvalidArgument:
            return resolve({}, self.default_tier).name

    def sync(self, account_id: str, tier: str | None = None) -> str | None:
        """Puts the account's key in `tier`'s usage plan (None: the tier its settings name);
        the tier it is now in, or None when there is no edge to keep in step."""
        if self.plans is None:
            return None
        name = tier or self.tier_of(account_id)
        if name not in TIERS:
            raise InvalidArgument(f"unknown plan '{name}'; known: {', '.join(TIERS)}")
        self.plans.assign(account_id, name)
        log.info("edge key of %s in the %s usage plan", account_id, name)
        return name

    def remove(self, account_id: str) -> int:
        """Deletes the account's key (out of every usage plan); 1 when there was one."""
        if self.plans is None:
            return 0
        return 1 if self.plans.release(account_id) else 0

    def sync_all(self) -> EdgeSynced:
        """Every active account into its tier's usage plan. The root account's key is the
        stack's (the CDK app makes it, in the unlimited plan), so it is not touched here."""
        by_tier: dict[str, int] = {}
        if self.plans is None or self.accounts is None:
            return EdgeSynced(0, by_tier)
        ids = [a.account_id for a in self.accounts.list_accounts() if a.status == ACTIVE]
        for account_id in ids:
            tier = self.sync(account_id)
            assert tier is not None
            by_tier[tier] = by_tier.get(tier, 0) + 1
        return EdgeSynced(len(ids), by_tier)
