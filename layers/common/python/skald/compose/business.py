"""The services of running Skald as a business, mixed into the Composition: plans and quotas,
fair admission, metering. Each is built on first use, as every service is."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from skald import catalog
from skald.compose.lazy import LazyPorts, service

if TYPE_CHECKING:
    from skald.compose.composition import Composition
    from skald.ports import UsageLedger
    from skald.services.ingest.imports import ArchiveImports
    from skald.services.metering import MeteringService, UsageLimits
    from skald.services.operations.admission import Admission
    from skald.services.plans import AccountSettings, EdgeKeys, PlanBook, Quotas, RateLimits


class BusinessServices(LazyPorts):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        from skald.services.metering import UsageBuffer

        s = self.settings
        # The Meter every billable unit is recorded on: a bounded buffer flushed to the usage
        # ledger in the background (started by `skald serve` and the Lambda entries). Built
        # now, not on first use: the adapters report to it while being built under the
        # adapter set's lock, which must not wait for the composition's.
        self.meter: UsageBuffer = UsageBuffer(
            lambda: self.usage_ledger,
            max_cells=s.usage_buffer_cells,
            flush_interval_s=s.usage_flush_s,
        )
        # Every adapter is handed out metered (services/metering/metered.py).
        self.adapters.decorate = self._metered

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

    # ---------------------------------------------------------------- metering

    @service
    def usage_ledger(self) -> UsageLedger | None:
        """The hourly usage cells, beside the state store (the state database; the state
        table); None for an entry point without the state store."""
        if not self.adapters.allows(catalog.STATE):
            return None
        build = getattr(self.adapters.factory, "usage_ledger", None)
        ledger: UsageLedger | None = build() if build is not None else None
        return ledger

    @service
    def usage_limits(self) -> UsageLimits:
        """storage_bytes and llm_tokens_per_day, from the meters' running totals."""
        from skald.services.metering import UsageLimits

        return UsageLimits(
            self.plans,
            lambda: self.usage_ledger,
            self.meter,
            ttl_s=self.settings.usage_totals_ttl_s,
        )

    @service
    def metering(self) -> MeteringService:
        """Usage series, the billing CSV and the console's usage views."""
        from skald.services.metering import MeteringService

        return MeteringService(lambda: self.usage_ledger, self.meter)

    def _metered(self, port: str, adapter: Any) -> Any:
        from skald.services.metering import metered

        if port == catalog.BLOBS:
            return metered.MeteredBlobStore(adapter, self.meter)
        if port == catalog.INDEX:
            return metered.MeteredIndex(adapter, self.meter)
        if port == catalog.EMBEDDER:
            return metered.MeteredEmbedder(adapter, self.meter)
        if port == catalog.LLM:
            return metered.MeteredLLM(adapter, self.meter, lambda: self.usage_limits)
        return adapter

    @service
    def rate_limits(self) -> RateLimits | None:
        """The per-account request rate of this process; None where the edge limits instead
        (`app_rate_limits`: on for `skald serve`, off behind the gateway's authorizer unless
        set)."""
        from skald.services.plans import RateLimits

        enabled = self.settings.app_rate_limits
        if enabled is None:
            enabled = not self.authorizer_only
        return RateLimits(self.plans) if enabled else None

    @service
    def quotas(self) -> Quotas:
        """The counted limits (sessions, watches, index records), checked before writes."""
        from skald.services.plans import Quotas

        a = self.adapters
        return Quotas(
            self.plans,
            sessions=self._lazy(catalog.SESSIONS) if a.allows(catalog.SESSIONS) else None,
            index=self._lazy(catalog.INDEX) if a.allows(catalog.INDEX) else None,
            ttl_s=self.settings.quota_count_ttl_s,
        )

    @service
    def account_settings(self) -> AccountSettings:
        """The settings route: an account's plan and limits, changed by root."""
        from skald.services.plans import AccountSettings

        return AccountSettings(
            self._lazy(catalog.STATE),
            default_tier=self.settings.default_plan,
            audit=self.audit,  # type: ignore[attr-defined]
            on_change=self._plan_changed,
        )

    def _plan_changed(self, account_id: str) -> None:
        """A plan changed here: this process applies it from the next request, and the edge
        moves the account's key to its tier's usage plan (AWS)."""
        self.plans.invalidate(account_id)
        self.quotas.forget(account_id)
        if self.rate_limits is not None:
            self.rate_limits.forget(account_id)
        self.admission.forget(account_id)
        self._edge_plan_changed(account_id)

    def _edge_plan_changed(self, account_id: str) -> None:
        from skald.domain.errors import Unavailable

        try:
            self.edge_keys.sync(account_id)
        except Exception as exc:
            # The settings are saved; sending the same change again moves the key (sync is
            # idempotent), as does `skald admin edge-sync`.
            raise Unavailable(
                f"The plan of {account_id} is saved, but the edge has not applied it yet: "
                "send the change again",
                {"account_id": account_id},
            ) from exc

    @service
    def edge_keys(self) -> EdgeKeys:
        """Each account's API Gateway key in its tier's usage plan (AWS: the edge throttles
        by it); a no-op where the entry point has no usage plans."""
        from skald.services.plans import EdgeKeys

        s = self.settings
        allowed = self.adapters.allows
        return EdgeKeys(
            self.adapters.optional(catalog.EDGE),
            self._lazy(catalog.STATE) if allowed(catalog.STATE) else None,
            default_tier=s.default_plan,
        )

    @service
    def admission(self) -> Admission:
        """Back-pressure per account: 429 while the caller's account has its limit of jobs
        queued or running (its plan's jobs_in_flight, else max_queued_jobs)."""
        from skald.services.operations.admission import Admission

        s = self.settings

        def limit_of(account_id: str) -> int | None:
            planned = self.plans.for_account(account_id).jobs_in_flight
            return s.max_queued_jobs if planned is None else planned

        return Admission(
            self.queue,  # built: whether it counts per account decides what admission does
            limit_of=limit_of,
            cache_s=s.queue_depth_cache_s,
            retry_after_s=s.retry_after_s,
        )

    @service
    def imports(self) -> ArchiveImports:
        """Archives too large for a request: the request queues them, the fetch worker
        writes them."""
        from skald.services.faults import Faults
        from skald.services.ingest.imports import INLINE_LIMITS, ArchiveImports, InlineLimits

        c = cast("Composition", self)
        s = self.settings
        default = INLINE_LIMITS["local" if s.backend == "local" else "aws"]
        inline = InlineLimits(
            default.max_entries
            if s.import_inline_max_entries is None
            else s.import_inline_max_entries,
            default.max_bytes if s.import_inline_max_bytes is None else s.import_inline_max_bytes,
        )
        return ArchiveImports(
            c.fs,
            c.resources,
            c.tasks,
            self._lazy(catalog.QUEUE),
            c.scheduler,
            inline=inline,
            faults=Faults.from_spec(s.fault_points),
        )
