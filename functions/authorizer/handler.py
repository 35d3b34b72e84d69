"""Authorizer function: API Gateway REQUEST authorizer (API key -> account, user, role)."""

from skald.api.authorizer import make_authorizer

handler = make_authorizer()
