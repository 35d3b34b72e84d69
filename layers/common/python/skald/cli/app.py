"""Runs the `skald` command: the Click group of base.py with the server commands (server.py)
and, for anything else, the data commands (data.py, add.py, session.py). A data command's
failure prints one line, `error: CODE: message`, and exits 1."""

from __future__ import annotations

import sys

import click

from skald.cli import server
from skald.cli.base import app
from skald.cli.connect import CliError

SERVER_COMMANDS = frozenset(str(c.name) for c in (server.serve, server.admin, server.mcp))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in SERVER_COMMANDS:
        # Importing them registers the data commands on `app`. A server command goes without:
        # their modules (httpx, Rich, pygments, ...) would hold memory in a `skald serve`
        # that never uses them.
        from skald.cli import add, data, session  # noqa: F401
    return run(args)


def run(argv: list[str] | None = None) -> int:
    try:
        result = app.main(args=argv, prog_name="skald", standalone_mode=False)
    except CliError as exc:
        from skald.cli import output

        output.error(exc.code, exc.message)
        return 1
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.Abort:
        from skald.cli import output

        output.stderr.print("aborted")
        return 130
    except KeyboardInterrupt:
        return 130
    return result if isinstance(result, int) else 0
