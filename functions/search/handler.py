"""Search function: find, search, grep and glob routes."""

from skald.compose.entrypoints import lambda_handler

handler = lambda_handler("search")
