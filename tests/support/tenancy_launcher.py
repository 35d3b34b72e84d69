"""`python -m tests.support.tenancy_launcher CAPTURE_FILE serve ...`: `skald` with every AWS
request it sends captured, as JSON lines in CAPTURE_FILE, with the tenant of the call sending
it (`skald.domain.access.call_context.tenant`: the identity's account, set by the HTTP edge; a job's
account, set by the job runners; none for setup and sweeps across accounts).

Test support only: installed from the outside before `skald.cli` runs (a hook on boto3's default
session, whose clients the AWS adapters are made from, and a wrapped OpenSearch transport), so
the product carries no code for it. tests/support/server.py starts a server through it when
asked to capture; tests/support/tenancy.py judges the file.
"""

from __future__ import annotations

import sys
from pathlib import Path


def install(path: Path) -> None:
    import boto3
    from opensearchpy import Transport

    from skald.domain.access.call_context import current_tenant
    from tests.support.tenancy_capture import Binding, Capture, JsonLines

    def binding() -> Binding:
        tenant = current_tenant()
        return Binding(None if tenant is None else frozenset({tenant}))

    capture = Capture(binding, JsonLines(path))
    boto3.setup_default_session()
    assert boto3.DEFAULT_SESSION is not None
    capture.hook(boto3.DEFAULT_SESSION.events)
    Transport.perform_request = capture.wrap_transport()  # type: ignore[method-assign]


def main(argv: list[str]) -> int:
    install(Path(argv[0]))
    from skald.cli import main as skald_main

    return skald_main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
