"""The `skald` command, on Click (`main` is its entry point; `python -m skald.cli` runs it).

- app.py: main and run: the group with every command, the data commands loaded only for them
- base.py: the root group `app`, its connection flags and what every data command shares
- server.py: serve, admin (init, accounts, users, keys) and mcp (the stdio bridge)
- data.py: the data commands over the viking:// tree: ls, tree, read, write, find, ...
- add.py: add: local files and directories uploaded as resources, with progress bars
- session.py: session: new, add, commit, show, list
- connect.py: where a data command connects: flags, SKALD_* variables, the profile file
- output.py: how the data commands print (JSON, or one line per item with Rich)
"""

from skald.cli.app import main

__all__ = ["main"]
