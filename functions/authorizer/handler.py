"""Authorizer function: API Gateway REQUEST authorizer (API key -> account, user, role)."""

from skald.compose.entrypoints import lambda_handler

handler = lambda_handler("authorizer")
