"""Metering rules: the billable units, route families, hourly cells and their rollups.

- units.py: the units, their dimensions, route families, hours and days (UTC)
- cells.py: UsageCell and the totals the plan limits read; rollups by hour, day or month
- subject.py: who a call is metered to (account, user) and why a model is called (purpose)
"""

from skald.domain.metering.cells import (
    GRANULARITIES,
    SeriesPoint,
    UsageCell,
    UsageTotals,
    rollup,
    totals_delta,
)
from skald.domain.metering.subject import (
    Purpose,
    current_purpose,
    current_subject,
    purpose,
    subject_scope,
)
from skald.domain.metering.units import (
    UNITS,
    Unit,
    day_of,
    dims_key,
    hour_of,
    next_day_start,
    parse_dims,
    route_family,
)

__all__ = [
    "GRANULARITIES",
    "UNITS",
    "Purpose",
    "SeriesPoint",
    "Unit",
    "UsageCell",
    "UsageTotals",
    "current_purpose",
    "current_subject",
    "day_of",
    "dims_key",
    "hour_of",
    "next_day_start",
    "parse_dims",
    "purpose",
    "rollup",
    "route_family",
    "subject_scope",
    "totals_delta",
]
