"""Tenant-scoped credentials: each S3 / DynamoDB call signed with the function's own
credentials or with credentials that reach the current tenant's items only.

`TenantSessions` assumes the function's tenant role (SKALD_TENANT_ROLE_ARN) once per account
with the session tag `skald_account=<account>`; the role's policies grant its actions on
`${aws:PrincipalTag/skald_account}`'s items only (ABAC, infra/access.py), so IAM refuses a call
naming another account's key whatever the code built. The credentials are cached per account
and container, replaced before they expire (a call is never signed with credentials closer
than `refresh_margin_s` to their end), and bounded in number (least recently used accounts
go first).

`RoutedClient` stands where the adapters expect a boto3 client and decides, per call, whose
credentials sign it:
- the function's own when no tenant is set (control plane: setup, the sweeps over every
  account, root's admin routes) or when the call names control-plane items only
  (tenancy.control_plane_call: job payloads, watches, tasks, key guards, counters, ...);
- otherwise the current tenant's, whichever account the call names: a call for tenant A that
  names account B's key is signed with A's credentials and refused.
The tenant is the context variable the edges set (skald.domain.access.call_context); threads that
make calls for a request must carry its context (the blob store's pools do).

One client per service serves every account: a `before-sign` hook hands the chosen
credentials to botocore through the request's signing context (`request_credentials`, the
per-request credentials botocore >= 1.34.70 signs with), so an account costs a cache entry,
not a client with its own connection pool and TLS sessions.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from botocore.credentials import Credentials

from skald.adapters.aws.tenancy.rules import TAG_KEY, control_plane_call, is_tenant_account
from skald.domain.access.call_context import current_tenant
from skald.domain.errors import InvalidArgument

# Role chaining (a function's role assuming another) caps a session at one hour.
MAX_SESSION_S = 3600
MIN_SESSION_S = 900

# The account whose credentials sign the call being made in this context (None: the
# function's own). Set by RoutedClient around each call, read by its before-sign hook.
_signing_as: ContextVar[str | None] = ContextVar("skald_signing_as", default=None)


@dataclass
class _Entry:
    credentials: Credentials
    expires_at: float  # epoch seconds


@dataclass
class SessionStats:
    hits: int = 0
    assumed: int = 0  # AssumeRole calls: first use of an account, refreshes, after eviction
    evicted: int = 0


class TenantSessions:
    """Credentials of the tenant role, per account."""

    def __init__(
        self,
        sts: Any,
        role_arn: str,
        *,
        duration_s: int = MAX_SESSION_S,
        max_accounts: int = 1000,
        refresh_margin_s: float = 600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not MIN_SESSION_S <= duration_s <= MAX_SESSION_S:
            raise ValueError(f"a tenant session lasts {MIN_SESSION_S} to {MAX_SESSION_S} s")
        if not 0 <= refresh_margin_s < duration_s:
            raise ValueError("the refresh margin must be shorter than the session")
        if max_accounts < 1:
            raise ValueError("max_accounts must be >= 1")
        self._sts = sts
        self._role_arn = role_arn
        self._duration_s = duration_s
        self._max_accounts = max_accounts
        self._margin_s = refresh_margin_s
        self._clock = clock
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()  # the cache
        self._assuming: dict[str, threading.Lock] = {}  # one AssumeRole per account at a time
        self.stats = SessionStats()

    @property
    def role_arn(self) -> str:
        return self._role_arn

    def accounts(self) -> list[str]:
        """The accounts whose credentials are cached, least recently used first."""
        with self._lock:
            return list(self._entries)

    def credentials(self, account: str) -> Credentials:
        """`account`'s credentials, valid for `refresh_margin_s` at least."""
        if not is_tenant_account(account):
            raise InvalidArgument(f"no tenant-scoped credentials for account '{account}'")
        cached = self._cached(account)
        if cached is not None:
            return cached
        with self._lock:
            gate = self._assuming.setdefault(account, threading.Lock())
        with gate:
            cached = self._cached(account)  # another thread may have just assumed
            if cached is not None:
                return cached
            entry = self._assume(account)
            with self._lock:
                self._entries[account] = entry
                self._entries.move_to_end(account)
                while len(self._entries) > self._max_accounts:
                    self._entries.popitem(last=False)
                    self.stats.evicted += 1
                self._assuming.pop(account, None)
            return entry.credentials

    def _cached(self, account: str) -> Credentials | None:
        with self._lock:
            entry = self._entries.get(account)
            if entry is None or entry.expires_at - self._clock() <= self._margin_s:
                return None
            self._entries.move_to_end(account)
            self.stats.hits += 1
            return entry.credentials

    def _assume(self, account: str) -> _Entry:
        response = self._sts.assume_role(
            RoleArn=self._role_arn,
            # CloudTrail shows the account each session was for (64 characters at most).
            RoleSessionName=f"skald-{account}"[:64],
            DurationSeconds=self._duration_s,
            Tags=[{"Key": TAG_KEY, "Value": account}],
        )
        with self._lock:
            self.stats.assumed += 1
        raw = response["Credentials"]
        expiration = raw["Expiration"]
        expires_at = (
            expiration.timestamp() if hasattr(expiration, "timestamp") else float(expiration)
        )
        return _Entry(
            Credentials(
                raw["AccessKeyId"],
                raw["SecretAccessKey"],
                raw["SessionToken"],
                method="sts-assume-role",
            ),
            expires_at,
        )


class RoutedClient:
    """A boto3 client's stand-in that has each call signed with the function's own
    credentials or the current tenant's (see the module notes). Attributes that are not
    operations (`meta`, `exceptions`, ...) are the client's own."""

    def __init__(self, base: Any, sessions: TenantSessions, service: str) -> None:
        self._base = base
        self._sessions = sessions
        self._service = service
        self._operations: dict[str, str] = dict(base.meta.method_to_api_mapping)
        # First, so that every other before-sign handler sees the credentials chosen.
        base.meta.events.register_first("before-sign", self._sign)

    @property
    def base(self) -> Any:
        return self._base

    def account_for(self, operation: str, params: dict[str, Any]) -> str | None:
        """The account whose credentials sign a call of `operation` (botocore's name) with
        `params`; None: the function's own."""
        account = current_tenant()
        if account is None or control_plane_call(self._service, operation, params):
            return None
        return account

    def _sign(self, request: Any, **_: Any) -> None:
        account = _signing_as.get()
        if account is not None:
            request.context.setdefault("signing", {})["request_credentials"] = (
                self._sessions.credentials(account)
            )

    def __getattr__(self, name: str) -> Any:
        operation = self._operations.get(name)
        method = getattr(self._base, name)
        if operation is None:
            return method

        def call(**params: Any) -> Any:
            token = _signing_as.set(self.account_for(operation, params))
            try:
                return method(**params)
            finally:
                _signing_as.reset(token)

        call.__name__ = name
        return call

    def get_paginator(self, name: str) -> _RoutedPaginator:
        return _RoutedPaginator(self, name, self._operations[name])


class _RoutedPaginator:
    def __init__(self, routed: RoutedClient, name: str, operation: str) -> None:
        self._routed = routed
        self._name = name
        self._operation = operation

    def paginate(self, **params: Any) -> Iterator[Any]:
        """The pages, each fetched with the credentials chosen now (pages are fetched
        lazily, possibly in another context)."""
        account = self._routed.account_for(self._operation, params)
        pages = iter(self._routed.base.get_paginator(self._name).paginate(**params))
        return _signed_as(account, pages)


def _signed_as(account: str | None, pages: Iterator[Any]) -> Iterator[Any]:
    while True:
        token = _signing_as.set(account)
        try:
            page = next(pages, None)
        finally:
            _signing_as.reset(token)
        if page is None:
            return
        yield page
