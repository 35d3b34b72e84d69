"""Fetch worker: SQS fetch queue -> fetch a web page or git repository into its root."""

from skald.compose.entrypoints import lambda_handler

handler = lambda_handler("fetch")
