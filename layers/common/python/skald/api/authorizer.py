"""API Gateway Lambda REQUEST authorizer: an API key (`X-API-Key`, or `Authorization: Bearer`)
-> (account, user, role), handed to the HTTP functions as the authorizer context that
`skald.api.lambda_entry` reads.

REST API (payload 1.0, `methodArn`): an IAM policy allowing the method, or
`raise Exception("Unauthorized")`, which API Gateway turns into a 401. HTTP API with payload
2.0 (`version == "2.0"`) and simple responses: `{"isAuthorized": bool, "context": ...}` (a
denial is a 403 there; an exception would be a 500).

The root key is allowed through with role "root": admin routes need it and the app itself
refuses root on tenant data routes. Dev mode (no root key configured) is loopback-only, so
behind a public gateway it denies everything rather than failing open.

The gateway's authorizer cache is off by default (it could only key on X-API-Key, shutting
out Bearer-only clients), so this module keeps its own: key hash -> identity, LRU, for
`SKALD_AUTH_CACHE_TTL_S` (2 s by default). A revoked key, a role change or a removed user or
account therefore takes effect within that bound on every warm instance; the root key, read
from its secret, is read again after the same bound when a root request comes (RootKey).
Turning on the gateway's own cache (`-c authorizerCacheTtl`) adds its TTL to the bound.

With SKALD_EDGE_NAMESPACE set, a REST answer also carries `usageIdentifierKey`: the value of
the caller's account's API Gateway key, derived from the account id (domain/plans/edge.py), so
the gateway applies that account's usage plan (its tier's rate) without any lookup here.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from skald.domain.errors import Unauthenticated
from skald.services.tenancy.accounts import AccountService, Credentials, hash_key

log = logging.getLogger("skald.authorizer")


class AuthorizerServices(Protocol):
    """All the authorizer needs: key verification over the state store."""

    @property
    def accounts(self) -> AccountService: ...


ServicesFactory = Callable[[], AuthorizerServices]
AuthorizerHandler = Callable[[dict[str, Any], Any], dict[str, Any]]
IdentityContext = dict[str, str]
UsageKey = Callable[[str], str]  # account id -> the value of its API Gateway key

CACHE_TTL_S = 2.0  # the default of Settings.auth_cache_ttl_s
CACHE_MAX_ENTRIES = 4096
UNAUTHORIZED = "Unauthorized"  # the exact message API Gateway maps to 401


class IdentityCache:
    """A small thread-safe LRU with a TTL; keys are sha256 hashes, never the API keys."""

    def __init__(
        self,
        *,
        ttl_s: float = CACHE_TTL_S,
        max_entries: int = CACHE_MAX_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.clock = clock
        self._items: OrderedDict[str, tuple[float, IdentityContext]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> IdentityContext | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            expires, value = item
            if expires <= self.clock():
                del self._items[key]
                return None
            self._items.move_to_end(key)
            return dict(value)

    def put(self, key: str, value: IdentityContext) -> None:
        with self._lock:
            self._items[key] = (self.clock() + self.ttl_s, dict(value))
            self._items.move_to_end(key)
            while len(self._items) > self.max_entries:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        return len(self._items)


# --------------------------------------------------------------------------------------------
# The handler


def _header(headers: Mapping[str, Any] | None, name: str) -> str | None:
    """Case-insensitive: REST API passes headers as sent, HTTP API lower-cases them."""
    for key, value in (headers or {}).items():
        if key.lower() == name:
            if isinstance(value, list):
                value = value[0] if value else None
            return str(value) if value is not None else None
    return None


def api_key_of(event: Mapping[str, Any]) -> str | None:
    headers = event.get("headers") or {}
    multi = event.get("multiValueHeaders") or {}
    key = _header(headers, "x-api-key") or _header(multi, "x-api-key")
    if not key:
        auth = _header(headers, "authorization") or _header(multi, "authorization") or ""
        if auth[:7].lower() == "bearer ":
            key = auth[7:]
    key = (key or "").strip()
    return key or None


def _allow(
    event: Mapping[str, Any], ctx: IdentityContext, usage_key: UsageKey | None = None
) -> dict[str, Any]:
    if event.get("version") == "2.0":
        return {"isAuthorized": True, "context": dict(ctx)}
    method_arn = event.get("methodArn") or event.get("routeArn")
    if not method_arn:
        raise ValueError("authorizer event has no methodArn")
    answer = {
        "principalId": f"{ctx['account_id']}/{ctx['user_id']}",
        "policyDocument": {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Action": "execute-api:Invoke",
                    "Effect": "Allow",
                    "Resource": [method_arn, *_stage_wide(method_arn)],
                }
            ],
        },
        "context": dict(ctx),  # string values only: API Gateway rejects nested ones
    }
    if usage_key is not None:
        # The account's API Gateway key: the gateway throttles the request by the usage plan
        # holding it (the API's key source is AUTHORIZER; domain/plans/edge.py).
        answer["usageIdentifierKey"] = usage_key(ctx["account_id"])
    return answer


def _stage_wide(method_arn: str) -> list[str]:
    """`arn:...:api-id/stage/*`: with -c authorizerCacheTtl the gateway re-uses one policy for
    every route a key calls, so it must not name the first method only. The identity does not
    depend on the route (the app enforces roles per route), so stage-wide is exact."""
    head, sep, rest = method_arn.partition("/")
    stage = rest.split("/", 1)[0]
    return [f"{head}/{stage}/*"] if sep and stage else []


def _deny(event: Mapping[str, Any]) -> dict[str, Any]:
    if event.get("version") == "2.0":
        return {"isAuthorized": False}
    raise Exception(UNAUTHORIZED)  # API Gateway matches this exact message


def make_authorizer(
    container_factory: ServicesFactory,
    *,
    cache: IdentityCache | None = None,
    ttl_s: float = CACHE_TTL_S,
    usage_key: UsageKey | None = None,
) -> AuthorizerHandler:
    """The authorizer Lambda's handler; its services are built on first use. With
    `usage_key`, every allow names the caller's account key (the edge's usage plans)."""
    identities = cache if cache is not None else IdentityCache(ttl_s=ttl_s)
    holder: list[AuthorizerServices] = []
    lock = threading.Lock()

    def container() -> AuthorizerServices:
        if not holder:
            with lock:
                if not holder:
                    holder.append(container_factory())
        return holder[0]

    def identity_of(api_key: str) -> IdentityContext | None:
        digest = hash_key(api_key)
        found = identities.get(digest)
        if found is not None:
            return found
        accounts = container().accounts
        if accounts.auth_mode == "dev":
            log.error(
                "no root API key configured: denying every request (dev mode is loopback-only)"
            )
            return None
        try:
            identity = accounts.resolve(Credentials(api_key, None, None, None))
        except Unauthenticated:
            return None  # unknown keys are not cached: a new key works at once
        ctx = {
            "account_id": identity.account_id,
            "user_id": identity.user_id,
            "role": identity.role,
            "key_id": identity.key_id or "",
            "generation": identity.generation or "",
        }
        identities.put(digest, ctx)
        return ctx

    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        api_key = api_key_of(event)
        ctx = identity_of(api_key) if api_key else None
        if ctx is None:
            log.info("denied: %s", "invalid API key" if api_key else "no API key")
            return _deny(event)
        return _allow(event, ctx, usage_key)

    return handler
