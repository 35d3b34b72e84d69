"""Which network addresses a remote fetch may reach (the SSRF rules).

A fetch resolves the host itself, checks every address here, and connects only to an address
that passed: a name that resolves to an internal address, a redirect to one, or an address
written in an unusual form (IPv4-mapped IPv6, NAT64, 6to4) is refused with the reason. Only
globally routable unicast addresses pass; loopback passes only when the deployment allows it
(tests serving fixtures from 127.0.0.1; never in the cloud).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from skald.domain.errors import SkaldError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Instance-metadata and link-local service endpoints of the clouds a deployment may run in.
METADATA = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",
        "169.254.170.2",
        "169.254.169.123",
        "100.100.100.200",
        "fd00:ec2::254",
        "fd00:ec2::23",
    )
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_ULA = ipaddress.ip_network("fc00::/7")


class FetchFailed(SkaldError):
    """A remote source could not be fetched; `cause` names why (the task's error says it):
    dns, refused, blocked, http_status, timeout, too_large, redirects, invalid, git."""

    code = "FAILED_PRECONDITION"

    def __init__(self, cause: str, message: str, details: dict[str, object] | None = None) -> None:
        super().__init__(message, {"cause": cause, **(details or {})})
        self.cause = cause


def embedded_ipv4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, NAT64, 6to4), if any: the address the
    packets end up at, so the one the rules must judge."""
    if isinstance(ip, ipaddress.IPv4Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.sixtofour is not None:
        return ip.sixtofour
    return None


def blocked_reason(ip: IPAddress, *, allow_loopback: bool = False) -> str | None:
    """Why a fetch may not connect to `ip`, or None when it may."""
    inner = embedded_ipv4(ip)
    if inner is not None:
        reason = blocked_reason(inner, allow_loopback=allow_loopback)
        return None if reason is None else f"{reason} (embedded in {ip})"
    if ip in METADATA:
        return "cloud metadata endpoint"
    if ip.is_loopback:
        return None if allow_loopback else "loopback"
    return _category_reason(ip)


def _category_reason(ip: IPAddress) -> str | None:
    """The address ranges no fetch may reach, whatever the settings."""
    if ip.is_unspecified:
        return "unspecified address"
    if ip.is_link_local:
        return "link-local"
    if ip.is_multicast:
        return "multicast"
    if isinstance(ip, ipaddress.IPv6Address) and ip in _ULA:
        return "unique local (private)"
    if isinstance(ip, ipaddress.IPv4Address) and ip in _CGNAT:
        return "shared address space (private)"
    if ip.is_private:
        return "private"
    if ip.is_reserved or not ip.is_global:
        return "reserved"
    return None


def parse_ip(text: str) -> IPAddress | None:
    """`text` as an IP address literal (brackets and a zone id allowed), else None."""
    text = text.strip("[]").split("%", 1)[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


@dataclass(frozen=True)
class FetchLimits:
    """Caps of one fetch: whole-fetch time, bytes (a page, or a repository's files), files,
    redirects."""

    timeout_s: float = 60.0
    max_bytes: int = 64 * 1024 * 1024
    max_files: int = 5000
    max_redirects: int = 5
    allow_loopback: bool = False


def check_address(host: str, ip: IPAddress, limits: FetchLimits) -> None:
    reason = blocked_reason(ip, allow_loopback=limits.allow_loopback)
    if reason is not None:
        raise FetchFailed(
            "blocked",
            f"Blocked address: {host} resolves to {ip} ({reason})",
            {"host": host, "address": str(ip), "reason": reason},
        )
