"""Where the data commands connect: flags, then SKALD_* variables, then a profile file.

The profile file (TOML) lives at `$SKALD_PROFILE_FILE`, else
`$XDG_CONFIG_HOME/skald/profile.toml` (default `~/.config/skald/profile.toml`):

    default = "local"            # the profile used when none is named

    [profiles.local]             # dev mode on loopback: identity from account/user
    url = "http://127.0.0.1:1933"
    account = "acme"
    user = "alice"

    [profiles.prod]              # a deployed stack: a user key
    url = "https://abc.execute-api.eu-west-1.amazonaws.com"
    api_key = "..."
    timeout = 120

A file with top-level `url` / `api_key` / `account` / `user` / `timeout` keys and no
`[profiles]` table is one unnamed profile.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_URL = "http://127.0.0.1:1933"
DEFAULT_TIMEOUT_S = 300.0
FIELDS = ("url", "api_key", "account", "user", "timeout")


class CliError(Exception):
    """A failure the CLI reports as one line, `error: CODE: message`."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Connection:
    url: str
    api_key: str | None
    account: str | None
    user: str | None
    timeout: float


def profile_path() -> Path:
    explicit = os.environ.get("SKALD_PROFILE_FILE")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "skald" / "profile.toml"


def load_profile(name: str | None, path: Path | None = None) -> dict[str, Any]:
    """The named profile's settings; {} when there is no file and no profile was named."""
    path = path or profile_path()
    if not path.is_file():
        if name:
            raise CliError("NOT_FOUND", f"profile '{name}' requested but {path} does not exist")
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise CliError("INVALID_ARGUMENT", f"cannot read profile file {path}: {exc}") from exc
    profiles = data.get("profiles")
    if profiles is None:
        if name:
            raise CliError("NOT_FOUND", f"profile '{name}' not in {path} (no [profiles] table)")
        return _checked({k: v for k, v in data.items() if k in FIELDS}, path)
    if not isinstance(profiles, dict):
        raise CliError("INVALID_ARGUMENT", f"{path}: 'profiles' must be a table")
    chosen = name or data.get("default")
    if chosen is None:
        return {}
    section = profiles.get(chosen)
    if not isinstance(section, dict):
        known = ", ".join(sorted(profiles)) or "none"
        raise CliError("NOT_FOUND", f"profile '{chosen}' not in {path} (known: {known})")
    unknown = sorted(set(section) - set(FIELDS))
    if unknown:
        raise CliError(
            "INVALID_ARGUMENT", f"{path}: profile '{chosen}' has unknown keys: {', '.join(unknown)}"
        )
    return _checked(section, path)


def _checked(values: dict[str, Any], path: Path) -> dict[str, Any]:
    for key, value in values.items():
        ok = isinstance(value, int | float) if key == "timeout" else isinstance(value, str)
        if not ok or isinstance(value, bool):
            raise CliError("INVALID_ARGUMENT", f"{path}: '{key}' has the wrong type")
    return values


def resolve(
    *,
    url: str | None,
    api_key: str | None,
    account: str | None,
    user: str | None,
    profile: str | None,
) -> Connection:
    """Flags win over SKALD_* variables, which win over the profile file."""
    saved = load_profile(profile or os.environ.get("SKALD_PROFILE"))

    def pick(flag: str | None, env: str, key: str) -> str | None:
        value = flag or os.environ.get(env) or saved.get(key)
        return str(value) if value else None

    timeout_env = os.environ.get("SKALD_TIMEOUT")
    try:
        timeout = float(timeout_env or saved.get("timeout") or DEFAULT_TIMEOUT_S)
    except ValueError as exc:
        raise CliError("INVALID_ARGUMENT", f"SKALD_TIMEOUT is not a number: {timeout_env}") from exc
    return Connection(
        url=pick(url, "SKALD_URL", "url") or DEFAULT_URL,
        api_key=pick(api_key, "SKALD_API_KEY", "api_key"),
        account=pick(account, "SKALD_ACCOUNT", "account"),
        user=pick(user, "SKALD_USER", "user"),
        timeout=timeout,
    )


# A path that never exists, so the SDK finds no ovcli.conf.
_NO_OVCLI_CONF = "/dev/null/ovcli.conf"


@contextmanager
def _sdk_settings_ignored() -> Iterator[None]:
    """The SDK fills what it is not given from OPENVIKING_* variables and ovcli.conf: settings
    for OpenViking's own CLI, whose key must not be sent to another server."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("OPENVIKING_")}
    for name in saved:
        del os.environ[name]
    os.environ["OPENVIKING_CLI_CONFIG_FILE"] = _NO_OVCLI_CONF
    try:
        yield
    finally:
        del os.environ["OPENVIKING_CLI_CONFIG_FILE"]
        os.environ.update(saved)


@contextmanager
def connect(conn: Connection, **client_kw: Any) -> Iterator[Any]:
    """An initialised `openviking_sdk.SyncHTTPClient`, closed afterwards."""
    from openviking_sdk import SyncHTTPClient

    with _sdk_settings_ignored():
        client = SyncHTTPClient(
            url=conn.url,
            api_key=conn.api_key,
            account=conn.account,
            user=conn.user,
            timeout=conn.timeout,
            **client_kw,
        )
    client.initialize()
    try:
        yield client
    finally:
        client.close()


def as_cli_error(exc: BaseException, url: str) -> CliError | None:
    """The one-line form of what the SDK or the network raised; None when unknown."""
    import httpx
    from openviking_sdk import OpenVikingError

    if isinstance(exc, CliError):
        return exc
    if isinstance(exc, OpenVikingError):
        return CliError(str(exc.code or "UNKNOWN"), str(exc.message))
    if isinstance(exc, httpx.TimeoutException):
        return CliError("DEADLINE_EXCEEDED", f"no answer from {url} in time ({exc})")
    if isinstance(exc, httpx.TransportError):
        return CliError("UNAVAILABLE", f"cannot reach {url}: {exc}")
    if isinstance(exc, ValueError):
        return CliError("INVALID_ARGUMENT", str(exc))
    return None
