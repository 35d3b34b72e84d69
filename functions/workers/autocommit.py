"""Autocommit worker: SQS autocommit queue (idle timers, the commit sweep) -> commit sessions."""

from skald.compose.entrypoints import lambda_handler

handler = lambda_handler("autocommit")
