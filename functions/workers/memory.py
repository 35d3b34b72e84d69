"""Memory worker: SQS memory queue -> extract memories from a committed archive."""

from skald.compose.entrypoints import lambda_handler

handler = lambda_handler("memory")
