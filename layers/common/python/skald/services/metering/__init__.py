"""Metering: every billable unit recorded, kept as hourly cells, read back, and the plan
limits that read the meters.

- buffer.py: UsageBuffer, the Meter: bounded, aggregated in memory, flushed in the background
- metered.py: the ports as the composition hands them out, each reporting to the Meter
- limits.py: UsageLimits: storage_bytes and llm_tokens_per_day, from the running totals
- jobs.py: a job metered to its payload's account and user, its time, its quota failure
- service.py: MeteringService: series, the billing CSV, OpenViking's console views
- results.py: what the service hands out
"""

from skald.services.metering.buffer import UsageBuffer
from skald.services.metering.limits import UsageLimits
from skald.services.metering.results import SeriesItem, UsageSeries
from skald.services.metering.service import MeteringService

__all__ = ["MeteringService", "SeriesItem", "UsageBuffer", "UsageLimits", "UsageSeries"]
