"""The services of running Skald as a business, mixed into the Composition: plans and quotas,
fair admission, metering. Each is built on first use, as every service is."""

from __future__ import annotations

from typing import TYPE_CHECKING

from skald import catalog
from skald.compose.lazy import LazyPorts, service

if TYPE_CHECKING:
    from skald.services.plans import PlanBook


class BusinessServices(LazyPorts):
    @service
    def plans(self) -> PlanBook:
        """Each account's effective plan (its tier and overrides), cached for the auth bound."""
        from skald.services.plans import PlanBook

        s = self.settings
        allowed = self.adapters.allows(catalog.STATE)
        return PlanBook(
            self._lazy(catalog.STATE) if allowed else None,
            default_tier=s.default_plan,
            ttl_s=s.auth_cache_ttl_s,
        )
