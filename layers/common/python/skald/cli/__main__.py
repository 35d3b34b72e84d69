"""`python -m skald.cli`: the `skald` command."""

import sys

from skald.cli.app import main

sys.exit(main())
