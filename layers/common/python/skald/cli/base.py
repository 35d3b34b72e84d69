"""The root `skald` Click group, its connection options and what every data command shares."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from skald import __version__
from skald.cli.connect import Connection, as_cli_error, connect, resolve

F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class State:
    url: str | None = None
    api_key: str | None = None
    account: str | None = None
    user: str | None = None
    profile: str | None = None
    as_json: bool = False

    def connection(self) -> Connection:
        return resolve(
            url=self.url,
            api_key=self.api_key,
            account=self.account,
            user=self.user,
            profile=self.profile,
        )

    @contextmanager
    def client(self, **client_kw: Any) -> Iterator[Any]:
        """An SDK client for the resolved connection; what it raises becomes a CliError."""
        conn = self.connection()
        try:
            with connect(conn, **client_kw) as client:
                yield client
        except Exception as exc:
            err = as_cli_error(exc, conn.url)
            if err is None:
                raise
            raise err from exc


CONNECTION_FLAGS = (
    ("--url", "url", "Server URL (SKALD_URL; profile; default http://127.0.0.1:1933)."),
    ("--api-key", "api_key", "A user key (SKALD_API_KEY; profile)."),
    ("--account", "account", "Dev mode: the account to act in (SKALD_ACCOUNT; profile)."),
    ("--user", "user", "Dev mode: the user to act as (SKALD_USER; profile)."),
    ("--profile", "profile", "A profile in the profile file (SKALD_PROFILE; its default)."),
)


def _into_state(field: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    def store(ctx: click.Context, _param: click.Parameter, value: Any) -> None:
        if value is not None:
            setattr(ctx.ensure_object(State), field, value)

    return store


def json_option(fn: F) -> F:
    """--json, and the connection flags, so they also work after the command's name."""
    for flag, field, help_text in reversed(CONNECTION_FLAGS):
        fn = click.option(flag, expose_value=False, callback=_into_state(field), help=help_text)(fn)
    return click.option(
        "--json", "as_json", is_flag=True, help="Print the server's result as JSON."
    )(fn)


def wants_json(state: State, as_json: bool) -> bool:
    return as_json or state.as_json


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="skald", message="%(prog)s %(version)s")
@click.option(CONNECTION_FLAGS[0][0], help=CONNECTION_FLAGS[0][2])
@click.option(CONNECTION_FLAGS[1][0], help=CONNECTION_FLAGS[1][2])
@click.option(CONNECTION_FLAGS[2][0], help=CONNECTION_FLAGS[2][2])
@click.option(CONNECTION_FLAGS[3][0], help=CONNECTION_FLAGS[3][2])
@click.option(CONNECTION_FLAGS[4][0], help=CONNECTION_FLAGS[4][2])
@click.option("--json", "as_json", is_flag=True, help="Print results as JSON.")
@click.pass_context
def app(
    ctx: click.Context,
    url: str | None,
    api_key: str | None,
    account: str | None,
    user: str | None,
    profile: str | None,
    as_json: bool,
) -> None:
    """Skald, a context database for AI agents.

    Data commands talk to a running server (`skald serve` or a deployed stack). Connection
    settings come from the flags above (also accepted after a command's name), then SKALD_URL /
    SKALD_API_KEY / SKALD_ACCOUNT / SKALD_USER, then the profile file
    (~/.config/skald/profile.toml, or SKALD_PROFILE_FILE).
    """
    ctx.obj = State(
        url=url, api_key=api_key, account=account, user=user, profile=profile, as_json=as_json
    )
