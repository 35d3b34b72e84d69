"""http(s) under the address rules: the host is resolved here, every address checked, and the
connection made to the checked address (TLS still verifies the host name); redirects are
followed by hand, each one resolved and checked again. No proxy from the environment is used:
a proxy would resolve the name itself.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import time
from urllib.parse import urljoin, urlsplit

from skald.domain.sources.netguard import (
    FetchFailed,
    FetchLimits,
    IPAddress,
    check_address,
    parse_ip,
)
from skald.ports import FetchedPage

_REDIRECTS = {301, 302, 303, 307, 308}
_CHUNK = 64 * 1024
USER_AGENT = "Skald-Fetcher/1.0 (+https://github.com/skald)"


class Deadline:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        remaining = self.end - time.monotonic()
        if remaining <= 0:
            raise FetchFailed("timeout", f"Timed out after {self.seconds:g}s")
        return remaining


def resolve(host: str, port: int, limits: FetchLimits, deadline: Deadline) -> IPAddress:
    """The address to connect to: every address the name resolves to must pass (a name with
    one internal answer among public ones is refused: which one a connection used would be
    luck)."""
    literal = parse_ip(host)
    if literal is not None:
        check_address(host, literal, limits)
        return literal
    deadline.left()
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except UnicodeError:
        raise FetchFailed(
            "dns", f"DNS lookup failed for {host}: not a valid host name", {"host": host}
        ) from None
    except socket.gaierror as exc:
        raise FetchFailed(
            "dns", f"DNS lookup failed for {host}: {exc.strerror or exc}", {"host": host}
        ) from None
    addresses: list[IPAddress] = []
    for info in infos:
        ip = parse_ip(str(info[4][0]))
        if ip is not None and ip not in addresses:
            addresses.append(ip)
    if not addresses:
        raise FetchFailed("dns", f"DNS lookup for {host} returned no address", {"host": host})
    for ip in addresses:
        check_address(host, ip, limits)
    return addresses[0]


class _PinnedHTTP(http.client.HTTPConnection):
    def __init__(self, host: str, port: int, ip: IPAddress, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self.ip = ip

    def connect(self) -> None:
        self.sock = socket.create_connection((str(self.ip), self.port), self.timeout)


class _PinnedHTTPS(http.client.HTTPSConnection):
    def __init__(self, host: str, port: int, ip: IPAddress, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout, context=ssl.create_default_context())
        self.ip = ip

    def connect(self) -> None:
        sock = socket.create_connection((str(self.ip), self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)  # type: ignore[attr-defined]


class GuardedHttp:
    """RemoteFetcher's http half; `clone` comes from the git adapter."""

    def get(self, url: str, limits: FetchLimits) -> FetchedPage:
        deadline = Deadline(limits.timeout_s)
        current = url
        for _ in range(limits.max_redirects + 1):
            status, headers, body = self._request(current, limits, deadline)
            if status in _REDIRECTS:
                location = headers.get("location")
                if not location:
                    raise FetchFailed(
                        "http_status",
                        f"HTTP {status} without a Location from {current}",
                        {"status": status},
                    )
                current = urljoin(current, location)
                continue
            if status >= 400:
                raise FetchFailed(
                    "http_status",
                    f"HTTP {status} from {current}",
                    {"status": status, "url": current},
                )
            ctype = headers.get("content-type", "").split(";", 1)[0].strip().lower()
            return FetchedPage(current, ctype, body)
        raise FetchFailed(
            "redirects",
            f"More than {limits.max_redirects} redirects from {url}",
            {"limit": limits.max_redirects},
        )

    def _request(
        self, url: str, limits: FetchLimits, deadline: Deadline
    ) -> tuple[int, dict[str, str], bytes]:
        scheme, host, port, target = _split_url(url)
        ip = resolve(host, port, limits, deadline)
        cls = _PinnedHTTPS if scheme == "https" else _PinnedHTTP
        conn = cls(host, port, ip, timeout=deadline.left())
        try:
            conn.request(
                "GET",
                target,
                headers={"User-Agent": USER_AGENT, "Accept-Encoding": "identity", "Accept": "*/*"},
            )
            resp = conn.getresponse()
            headers = {k.lower(): v for k, v in resp.getheaders()}
            if resp.status in _REDIRECTS or resp.status >= 400:
                return resp.status, headers, b""
            return resp.status, headers, _read_body(conn, resp, headers, url, limits, deadline)
        except FetchFailed:
            raise
        except ConnectionRefusedError:
            raise FetchFailed(
                "refused", f"Connection refused by {host}:{port}", {"host": host}
            ) from None
        except TimeoutError:
            raise FetchFailed(
                "timeout", f"Timed out fetching {url} after {limits.timeout_s:g}s", {"url": url}
            ) from None
        except ssl.SSLError as exc:
            raise FetchFailed(
                "tls", f"TLS failed with {host}: {exc.reason or exc}", {"host": host}
            ) from None
        except (OSError, http.client.HTTPException) as exc:
            raise FetchFailed(
                "connection", f"Connection to {host}:{port} failed: {exc}", {"host": host}
            ) from None
        finally:
            conn.close()


def _split_url(url: str) -> tuple[str, str, int, str]:
    """Scheme, host, port and request target of an http(s) URL."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in {"http", "https"} or not parts.hostname:
        raise FetchFailed("invalid", f"Not an http(s) URL: {url}", {"url": url})
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError:
        raise FetchFailed("invalid", f"Invalid port in {url}", {"url": url}) from None
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return scheme, parts.hostname, port, target


def _read_body(
    conn: http.client.HTTPConnection,
    resp: http.client.HTTPResponse,
    headers: dict[str, str],
    url: str,
    limits: FetchLimits,
    deadline: Deadline,
) -> bytes:
    """The response body, refused as soon as it is known to exceed the byte limit."""
    declared = headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limits.max_bytes:
        raise FetchFailed(
            "too_large",
            f"{url} is {declared} bytes, above the limit of {limits.max_bytes} bytes",
            {"limit": limits.max_bytes},
        )
    chunks: list[bytes] = []
    size = 0
    while True:
        if conn.sock is not None:
            conn.sock.settimeout(deadline.left())
        chunk = resp.read(_CHUNK)
        if not chunk:
            break
        size += len(chunk)
        if size > limits.max_bytes:
            raise FetchFailed(
                "too_large",
                f"{url} is above the limit of {limits.max_bytes} bytes",
                {"limit": limits.max_bytes},
            )
        chunks.append(chunk)
    return b"".join(chunks)
