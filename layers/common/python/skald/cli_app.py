"""Runs the `skald` command: the Click group with the data commands, and the argparse commands
(`serve`, `admin`, `mcp`) handed to their parser unchanged. A data command's failure prints
one line, `error: CODE: message`, and exits 1."""

from __future__ import annotations

import click

# Importing cli_add, cli_data and cli_session registers their commands on `app`.
from skald import cli_add, cli_data, cli_session  # noqa: F401
from skald import cli_output as out
from skald.cli import server_commands, server_main
from skald.cli_base import app
from skald.cli_connect import CliError


def _server_command(name: str, help_text: str) -> click.Command:
    @click.pass_context
    def forward(ctx: click.Context) -> int:
        return server_main([name, *ctx.args])

    return click.Command(name, callback=forward, help=f"{help_text} (`skald {name} -h`)",
                         short_help=help_text, add_help_option=False,
                         context_settings={"ignore_unknown_options": True,
                                           "allow_extra_args": True})


for _name, _help in server_commands().items():
    app.add_command(_server_command(_name, _help))


def run(argv: list[str] | None = None) -> int:
    try:
        result = app.main(args=argv, prog_name="skald", standalone_mode=False)
    except CliError as exc:
        out.error(exc.code, exc.message)
        return 1
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.Abort:
        out.stderr.print("aborted")
        return 130
    except KeyboardInterrupt:
        return 130
    return result if isinstance(result, int) else 0
