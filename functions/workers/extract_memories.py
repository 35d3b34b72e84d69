"""Memory worker: SQS memory queue -> commit phase 2 (extract memories from an archive)."""

from skald.compose.entrypoints import lambda_handler

handler = lambda_handler("memory")
