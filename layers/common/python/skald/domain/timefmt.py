"""Time rendering and parsing of the wire format: ISO-8601 UTC, and `since`/`until` windows."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from skald.domain.errors import InvalidArgument

_RELATIVE = re.compile(r"^(\d+)\s*([smhdw])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def iso_utc(ts: float, *, millis: bool = False) -> str:
    dt = datetime.fromtimestamp(ts, UTC)
    if millis:
        return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time_bound(value: str | None, now: float, field: str = "since") -> float | None:
    """`2h`, `7d`, `30m` (relative to now) or an ISO date/datetime read as UTC."""
    if value is None or value == "":
        return None
    text = value.strip()
    m = _RELATIVE.match(text)
    if m:
        return now - int(m.group(1)) * _UNIT_S[m.group(2)]
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgument(
            f"Invalid {field} '{value}': use a duration like 2h / 7d or an ISO date"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def parse_duration_s(value: str, field: str) -> float:
    m = _RELATIVE.match(value.strip())
    if not m:
        raise InvalidArgument(f"Invalid {field} '{value}': use a duration like 30m, 2h or 7d")
    return float(int(m.group(1)) * _UNIT_S[m.group(2)])
