"""An account's plan: a named tier plus per-account overrides, resolved from its settings.

The settings keep `{"plan": "<tier>", "limits": {"<limit>": <value or null>}}`; every other
key of the settings is left alone. A limit of None is unlimited, so `skald serve` without
plans (the `unlimited` tier, its default) checks nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from skald.domain.errors import InvalidArgument


@dataclass(frozen=True)
class Plan:
    name: str
    # Requests per second a whole account may make (a token bucket refilled at this rate)
    # and how many it may make at once above it.
    rate_per_s: float | None = None
    burst: int | None = None
    storage_bytes: int | None = None  # file contents kept in the account's tree
    index_records: int | None = None  # records in the search index
    sessions: int | None = None  # sessions kept (open or committed)
    watches: int | None = None  # watched sources
    watch_min_interval_s: float | None = None  # the shortest refresh interval of a watch
    llm_tokens_per_day: int | None = None  # LLM tokens in and out, per UTC day
    jobs_in_flight: int | None = None  # background jobs queued or running

    def limit(self, name: str) -> float | int | None:
        value: float | int | None = getattr(self, name)
        return value

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# The names of the limits, as the settings and the errors spell them.
LIMITS: tuple[str, ...] = tuple(f.name for f in fields(Plan) if f.name != "name")
_INTEGRAL = {
    "burst",
    "storage_bytes",
    "index_records",
    "sessions",
    "watches",
    "llm_tokens_per_day",
    "jobs_in_flight",
}

UNLIMITED = Plan("unlimited")

_GIB = 1024**3

# The named tiers. An operator changes them here (a deployment reads the same table); an
# account's overrides change one account.
TIERS: dict[str, Plan] = {
    "unlimited": UNLIMITED,
    "free": Plan(
        "free",
        rate_per_s=5.0,
        burst=20,
        storage_bytes=1 * _GIB,
        index_records=50_000,
        sessions=1_000,
        watches=5,
        watch_min_interval_s=3600.0,
        llm_tokens_per_day=200_000,
        jobs_in_flight=200,
    ),
    "team": Plan(
        "team",
        rate_per_s=50.0,
        burst=200,
        storage_bytes=50 * _GIB,
        index_records=2_000_000,
        sessions=100_000,
        watches=100,
        watch_min_interval_s=300.0,
        llm_tokens_per_day=10_000_000,
        jobs_in_flight=2_000,
    ),
    "business": Plan(
        "business",
        rate_per_s=200.0,
        burst=800,
        storage_bytes=500 * _GIB,
        index_records=20_000_000,
        sessions=1_000_000,
        watches=1_000,
        watch_min_interval_s=60.0,
        llm_tokens_per_day=100_000_000,
        jobs_in_flight=10_000,
    ),
}


def _limit_value(name: str, value: Any) -> float | int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(
            f"limit '{name}' must be a number or null, not {value!r}", {"limit": name}
        )
    if value < 0:
        raise InvalidArgument(f"limit '{name}' must not be negative", {"limit": name})
    if name in _INTEGRAL:
        if value != int(value):
            raise InvalidArgument(f"limit '{name}' must be a whole number", {"limit": name})
        return int(value)
    return float(value)


def plan_overrides(raw: Any) -> dict[str, float | int | None]:
    """Validated overrides: known limit names only, each a non-negative number or null."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise InvalidArgument("limits must be an object of limit names to values")
    unknown = sorted(set(raw) - set(LIMITS))
    if unknown:
        raise InvalidArgument(
            f"unknown limit(s): {', '.join(map(str, unknown))}; known: {', '.join(LIMITS)}",
            {"unknown": unknown},
        )
    return {name: _limit_value(name, value) for name, value in raw.items()}


def resolve(settings: Mapping[str, Any] | None, default_tier: str = "unlimited") -> Plan:
    """The effective plan of an account whose settings are `settings`."""
    settings = settings or {}
    name = settings.get("plan") or default_tier
    base = TIERS.get(str(name))
    if base is None:
        raise InvalidArgument(f"unknown plan '{name}'; known: {', '.join(TIERS)}", {"plan": name})
    overrides = plan_overrides(settings.get("limits"))
    return replace(base, **overrides) if overrides else base  # type: ignore[arg-type]
