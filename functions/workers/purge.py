"""Purge worker: SQS purge queue -> remove what a deleted user or account owned."""

from skald.compose.entrypoints import lambda_handler

handler = lambda_handler("purge")
