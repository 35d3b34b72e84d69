"""The `skald` command: `serve`, `admin` and `mcp` (argparse, run as before) and the data
commands (Click, in cli_data / cli_add / cli_session), under one Click group."""

from __future__ import annotations

import argparse
import functools
import ipaddress
import json
import logging
import os
import sys
from pathlib import Path

LOOPBACK_HOSTS = {"localhost"}


def _is_loopback(host: str) -> bool:
    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _settings(args: argparse.Namespace) -> object:
    from skald.config import Settings

    overrides: dict[str, object] = {}
    for name in ("host", "port", "data_dir", "root_api_key", "backend"):
        value = getattr(args, name, None)
        if value is not None:
            overrides[name] = value
    return Settings(**overrides)  # type: ignore[arg-type]


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from skald.adapters.factory import SetupError
    from skald.api.app import create_app
    from skald.api.http_limits import bounded_protocol
    from skald.compose.serve import AnnouncingServer, ServeRuntime
    from skald.config import Settings

    settings = _settings(args)
    assert isinstance(settings, Settings)
    if not settings.root_api_key and not _is_loopback(settings.host):
        print(f"refusing to serve on {settings.host} in dev mode (no root API key): set "
              "SKALD_ROOT_API_KEY or --root-api-key, or bind to 127.0.0.1", file=sys.stderr)
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
        app, host=settings.host, port=settings.port, log_level="warning",
        timeout_graceful_shutdown=5,
        http=bounded_protocol(settings.max_header_bytes, settings.max_header_count))
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    server = AnnouncingServer(config, runtime.ready_line(f"http://{host}:{settings.port}"))
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


def cmd_init(args: argparse.Namespace) -> int:
    """Creates what the backend needs (SQLite schemas; the search index behind its alias)
    and checks the rest (bucket, table, queues): what the deploy-time setup function runs."""
    from skald.adapters.factory import MissingSettings, SetupError
    from skald.compose.entrypoints import run_setup
    from skald.config import Settings

    settings = _settings(args)
    assert isinstance(settings, Settings)
    if settings.backend == "aws-local":
        print("aws-local runs init itself when `skald serve --backend aws-local` starts",
              file=sys.stderr)
        return 2
    try:
        report = run_setup(settings)
    except (SetupError, MissingSettings) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report.as_dict(), indent=2))
    return 0


def _remote_admin(args: argparse.Namespace, url: str, key: str) -> int:
    """Admin verbs over HTTP against a running server (embedded or deployed)."""
    import httpx

    base = url.rstrip("/") + "/api/v1/admin/accounts"
    calls = {
        "create-account": ("POST", base, {"account_id": getattr(args, "account_id", None),
                                          "admin_user_id": getattr(args, "admin_user", None)}),
        "register-user": ("POST", f"{base}/{getattr(args, 'account_id', '')}/users",
                          {"user_id": getattr(args, "user_id", None),
                           "role": getattr(args, "role", "user")}),
        "regenerate-key": ("POST", f"{base}/{getattr(args, 'account_id', '')}/users/"
                                   f"{getattr(args, 'user_id', '')}/key", {}),
        "list-accounts": ("GET", base, None),
    }
    method, target, body = calls[args.verb]
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


def cmd_admin(args: argparse.Namespace) -> int:
    """Admin verbs: over HTTP with --url (or SKALD_URL) and the root key, else directly
    against a local data dir (no server needed)."""
    if args.verb == "init":
        return cmd_init(args)
    url = args.url or os.environ.get("SKALD_URL")
    if url:
        key = args.api_key or os.environ.get("SKALD_API_KEY") or ""
        return _remote_admin(args, url, key)
    from skald.compose.composition import Composition
    from skald.compose.entrypoints import adapter_factory
    from skald.config import Settings
    from skald.domain.errors import SkaldError
    from skald.domain.identity import Identity
    from skald.services.accounts import ROOT_ACCOUNT

    settings = _settings(args)
    assert isinstance(settings, Settings)
    container = Composition(settings, adapter_factory(settings), name="admin")
    root = Identity(ROOT_ACCOUNT, "root", "root")
    try:
        if args.verb == "create-account":
            out: object = container.accounts.create_account(root, args.account_id,
                                                            args.admin_user)
        elif args.verb == "register-user":
            out = container.accounts.register_user(root, args.account_id, args.user_id,
                                                   args.role)
        elif args.verb == "regenerate-key":
            out = container.accounts.regenerate_key(root, args.account_id, args.user_id)
        else:
            out = container.accounts.list_accounts(root)
    except SkaldError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    finally:
        container.close()
    print(json.dumps(out, indent=2))
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    """MCP over stdio, forwarded to a running server's /mcp (skald.api.mcp.bridge)."""
    from skald.api.mcp.bridge import run

    url = args.url or os.environ.get("SKALD_URL") or "http://127.0.0.1:1933"
    return run(url, args.api_key or os.environ.get("SKALD_API_KEY"), args.account, args.user)


@functools.cache
def server_parser() -> argparse.ArgumentParser:
    """serve / admin / mcp: parsed by argparse exactly as before the data commands existed.
    Built once per process: `main` reads its command names, then parses with it."""
    parser = argparse.ArgumentParser(prog="skald", description="Skald context database")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the HTTP server with embedded storage")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--data-dir", type=Path)
    serve.add_argument("--root-api-key")
    serve.add_argument("--backend", choices=["local", "aws", "aws-local"])
    serve.set_defaults(func=cmd_serve)

    admin = sub.add_parser("admin", help="set a backend up; manage accounts and keys")
    admin.add_argument("--data-dir", type=Path)
    admin.add_argument("--backend", choices=["local", "aws"],
                       help="default: SKALD_BACKEND, else local")
    admin.add_argument("--url", help="a running server (default: SKALD_URL); else --data-dir")
    admin.add_argument("--api-key", help="the root key for --url (default: SKALD_API_KEY)")
    verbs = admin.add_subparsers(dest="verb", required=True)
    verbs.add_parser("init", help="create the schemas / search index, check tables and "
                                  "queues (the deploy-time setup step); idempotent")
    ca = verbs.add_parser("create-account", help="create an account and mint its admin key")
    ca.add_argument("account_id")
    ca.add_argument("--admin-user", default="admin")
    ru = verbs.add_parser("register-user", help="add a user and mint its key")
    ru.add_argument("account_id")
    ru.add_argument("user_id")
    ru.add_argument("--role", default="user", choices=["user", "admin"])
    rk = verbs.add_parser("regenerate-key", help="replace a user's key")
    rk.add_argument("account_id")
    rk.add_argument("user_id")
    verbs.add_parser("list-accounts", help="list accounts")
    admin.set_defaults(func=cmd_admin)

    mcp = sub.add_parser("mcp", help="serve MCP over stdio, forwarding to a running server")
    mcp.add_argument("--url", help="the server (default: SKALD_URL, else http://127.0.0.1:1933)")
    mcp.add_argument("--api-key", help="a user key (default: SKALD_API_KEY)")
    mcp.add_argument("--account", help="dev mode only: X-OpenViking-Account")
    mcp.add_argument("--user", help="dev mode only: X-OpenViking-User")
    mcp.set_defaults(func=cmd_mcp)
    return parser


def server_main(argv: list[str]) -> int:
    args = server_parser().parse_args(argv)
    code: int = args.func(args)
    return code


def server_commands() -> dict[str, str]:
    """The argparse commands (serve, admin, mcp, ...) with their help lines."""
    for action in server_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {a.dest: str(a.help or "") for a in action._choices_actions}
    return {}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in server_commands():
        # Straight to its parser: the client commands' modules (httpx, rich, pygments, ...)
        # would hold memory in a `skald serve` that never uses them.
        return server_main(args)
    from skald.cli_app import run

    return run(argv)


if __name__ == "__main__":
    sys.exit(main())
