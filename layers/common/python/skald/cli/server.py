"""`skald serve`, `skald admin` and `skald mcp`: the commands that run the server, set a backend
up and manage its accounts, and bridge MCP over stdio. They import nothing of the data
commands (httpx, Rich, the SDK), which a server never uses."""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import click

from skald.cli.base import app

LOOPBACK_HOSTS = {"localhost"}


class ServerCommand(click.Command):
    """Its usage line as before these commands moved to Click: `usage: skald serve ...`."""

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        pieces = self.collect_usage_pieces(ctx)
        formatter.write_usage(ctx.command_path, " ".join(pieces), prefix="usage: ")


class ServerGroup(click.Group):
    command_class = ServerCommand

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        pieces = self.collect_usage_pieces(ctx)
        formatter.write_usage(ctx.command_path, " ".join(pieces), prefix="usage: ")


def _is_loopback(host: str) -> bool:
    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _settings(**given: object) -> object:
    from skald.config import Settings

    overrides = {name: value for name, value in given.items() if value is not None}
    return Settings(**overrides)  # type: ignore[arg-type]


@app.command("serve", cls=ServerCommand, help="run the HTTP server with embedded storage")
@click.option("--host")
@click.option("--port", type=int)
@click.option("--data-dir", type=click.Path(path_type=Path))
@click.option("--root-api-key")
@click.option("--backend", type=click.Choice(["local", "aws", "aws-local"]))
def serve(
    host: str | None,
    port: int | None,
    data_dir: Path | None,
    root_api_key: str | None,
    backend: str | None,
) -> int:
    import uvicorn

    from skald.adapters.factory import SetupError
    from skald.api.app import create_app
    from skald.api.http_limits import bounded_protocol
    from skald.compose.serve import AnnouncingServer, ServeRuntime
    from skald.config import Settings

    settings = _settings(
        host=host, port=port, data_dir=data_dir, root_api_key=root_api_key, backend=backend
    )
    assert isinstance(settings, Settings)
    if not settings.root_api_key and not _is_loopback(settings.host):
        print(
            f"refusing to serve on {settings.host} in dev mode (no root API key): set "
            "SKALD_ROOT_API_KEY or --root-api-key, or bind to 127.0.0.1",
            file=sys.stderr,
        )
        return 1
    configure_logging(os.environ.get("SKALD_LOG_LEVEL", "INFO"))
    try:
        runtime = ServeRuntime(settings)  # runs the same setup as `skald admin init`
    except SetupError as exc:
        print(f"setup failed: {exc}", file=sys.stderr)
        return 2
    runtime.recover_commits()
    runtime.start_workers()
    runtime.start_idle_timer()
    # Few local servers see an MCP client: its SDK is loaded by the first one.
    app = create_app(runtime.services, mcp_on_first_use=True)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level="warning",
        timeout_graceful_shutdown=5,
        http=bounded_protocol(settings.max_header_bytes, settings.max_header_count),
    )
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    server = AnnouncingServer(
        config,
        runtime.ready_line(f"http://{host}:{settings.port}"),
        on_shutdown=runtime.services.meter.close,  # the usage still in memory, flushed
    )
    try:
        server.run()
    finally:
        runtime.stop()
    return 0 if server.started else 3  # 3: uvicorn's code for a server that never started


def configure_logging(level: str) -> None:
    """Skald's own records from `level` (INFO by default) up; other libraries' from WARNING
    up unless `level` is DEBUG: their INFO lines come per request (the MCP SDK's "Terminating
    session", HTTP clients' request lines) and would bury the server's own."""
    level = level.upper()
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    root = logging.getLogger()
    logging.getLogger("skald").setLevel(root.level)
    if root.level > logging.DEBUG:
        root.setLevel(max(root.level, logging.WARNING))


@app.group("admin", cls=ServerGroup, help="set a backend up; manage accounts and keys")
@click.option("--data-dir", type=click.Path(path_type=Path))
@click.option(
    "--backend", type=click.Choice(["local", "aws"]), help="default: SKALD_BACKEND, else local"
)
@click.option("--url", help="a running server (default: SKALD_URL); else --data-dir")
@click.option("--api-key", help="the root key for --url (default: SKALD_API_KEY)")
def admin(data_dir: Path | None, backend: str | None, url: str | None, api_key: str | None) -> None:
    pass  # each verb reads these options (cmd_admin)


def cmd_init(data_dir: Path | None, backend: str | None) -> int:
    """Creates what the backend needs (SQLite schemas; the search index behind its alias)
    and checks the rest (bucket, table, queues): what the deploy-time setup function runs."""
    from skald.adapters.factory import MissingSettings, SetupError
    from skald.compose.entrypoints import run_setup
    from skald.config import Settings

    settings = _settings(data_dir=data_dir, backend=backend)
    assert isinstance(settings, Settings)
    if settings.backend == "aws-local":
        print(
            "aws-local runs init itself when `skald serve --backend aws-local` starts",
            file=sys.stderr,
        )
        return 2
    try:
        report = run_setup(settings)
    except (SetupError, MissingSettings) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report.as_dict(), indent=2))
    return 0


def _remote_admin(verb: str, args: dict[str, Any], url: str, key: str) -> int:
    """Admin verbs over HTTP against a running server (embedded or deployed)."""
    import httpx

    base = url.rstrip("/") + "/api/v1/admin/accounts"
    calls = {
        "create-account": (
            "POST",
            base,
            {"account_id": args.get("account_id"), "admin_user_id": args.get("admin_user")},
        ),
        "register-user": (
            "POST",
            f"{base}/{args.get('account_id', '')}/users",
            {"user_id": args.get("user_id"), "role": args.get("role", "user")},
        ),
        "regenerate-key": (
            "POST",
            f"{base}/{args.get('account_id', '')}/users/{args.get('user_id', '')}/key",
            {},
        ),
        "list-accounts": ("GET", base, None),
    }
    method, target, body = calls[verb]
    resp = httpx.request(method, target, json=body, headers={"X-API-Key": key}, timeout=60)
    try:
        payload = resp.json()
    except ValueError:
        print(f"error: HTTP {resp.status_code}: {resp.text[:200]}", file=sys.stderr)
        return 2
    if payload.get("status") != "ok":
        err = payload.get("error") or {}
        print(f"error: {err.get('code')}: {err.get('message')}", file=sys.stderr)
        return 2
    print(json.dumps(payload["result"], indent=2))
    return 0


def cmd_admin(ctx: click.Context, verb: str, **args: Any) -> int:
    """Admin verbs: over HTTP with --url (or SKALD_URL) and the root key, else directly
    against a local data dir (no server needed). `ctx` is the verb's: the admin group's
    options are its parent's."""
    assert ctx.parent is not None
    opts = ctx.parent.params
    if verb == "init":
        return cmd_init(opts["data_dir"], opts["backend"])
    url = opts["url"] or os.environ.get("SKALD_URL")
    if url:
        if verb == "edge-sync":
            print("error: edge-sync runs against the stores (no --url)", file=sys.stderr)
            return 2
        key = opts["api_key"] or os.environ.get("SKALD_API_KEY") or ""
        return _remote_admin(verb, args, url, key)
    from skald.compose.composition import Composition
    from skald.compose.entrypoints import adapter_factory
    from skald.config import Settings
    from skald.domain.access.identity import Identity
    from skald.domain.errors import SkaldError
    from skald.services.tenancy.accounts import ROOT_ACCOUNT

    settings = _settings(data_dir=opts["data_dir"], backend=opts["backend"])
    assert isinstance(settings, Settings)
    container = Composition(settings, adapter_factory(settings), name="admin")
    root = Identity(ROOT_ACCOUNT, "root", "root")
    try:
        if verb == "create-account":
            out: object = container.accounts.create_account(
                root, args["account_id"], args["admin_user"]
            )
        elif verb == "register-user":
            out = container.accounts.register_user(
                root, args["account_id"], args["user_id"], args["role"]
            )
        elif verb == "edge-sync":
            out = container.edge_keys.sync_all()
        elif verb == "regenerate-key":
            out = container.accounts.regenerate_key(root, args["account_id"], args["user_id"])
        else:
            out = container.accounts.list_accounts(root)
    except SkaldError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    finally:
        container.close()
    from skald.api.envelope import to_wire

    wire = [to_wire(o) for o in out] if isinstance(out, list) else to_wire(out)
    print(json.dumps(wire, indent=2))
    return 0


@admin.command(
    "init",
    help="create the schemas / search index, check tables and queues (the "
    "deploy-time setup step); idempotent",
)
@click.pass_context
def admin_init(ctx: click.Context) -> int:
    return cmd_admin(ctx, "init")


@admin.command("create-account", help="create an account and mint its admin key")
@click.argument("account_id")
@click.option("--admin-user", default="admin")
@click.pass_context
def create_account(ctx: click.Context, account_id: str, admin_user: str) -> int:
    return cmd_admin(ctx, "create-account", account_id=account_id, admin_user=admin_user)


@admin.command("register-user", help="add a user and mint its key")
@click.argument("account_id")
@click.argument("user_id")
@click.option("--role", default="user", type=click.Choice(["user", "admin"]))
@click.pass_context
def register_user(ctx: click.Context, account_id: str, user_id: str, role: str) -> int:
    return cmd_admin(ctx, "register-user", account_id=account_id, user_id=user_id, role=role)


@admin.command("regenerate-key", help="replace a user's key")
@click.argument("account_id")
@click.argument("user_id")
@click.pass_context
def regenerate_key(ctx: click.Context, account_id: str, user_id: str) -> int:
    return cmd_admin(ctx, "regenerate-key", account_id=account_id, user_id=user_id)


@admin.command(
    "edge-sync",
    help="put every account's API Gateway key in its tier's usage plan (AWS; once after "
    "the deploy that brings usage plans); idempotent",
)
@click.pass_context
def edge_sync(ctx: click.Context) -> int:
    return cmd_admin(ctx, "edge-sync")


@admin.command("list-accounts", help="list accounts")
@click.pass_context
def list_accounts(ctx: click.Context) -> int:
    return cmd_admin(ctx, "list-accounts")


@app.command("mcp", cls=ServerCommand, help="serve MCP over stdio, forwarding to a running server")
@click.option("--url", help="the server (default: SKALD_URL, else http://127.0.0.1:1933)")
@click.option("--api-key", help="a user key (default: SKALD_API_KEY)")
@click.option("--account", help="dev mode only: X-OpenViking-Account")
@click.option("--user", help="dev mode only: X-OpenViking-User")
def mcp(url: str | None, api_key: str | None, account: str | None, user: str | None) -> int:
    # MCP over stdio, forwarded to a running server's /mcp (skald.api.mcp.bridge).
    from skald.api.mcp.bridge import run

    url = url or os.environ.get("SKALD_URL") or "http://127.0.0.1:1933"
    return run(url, api_key or os.environ.get("SKALD_API_KEY"), account, user)
