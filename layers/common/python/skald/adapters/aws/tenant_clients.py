"""Tenant-scoped credentials: per call, the function's own S3 / DynamoDB client or one whose
credentials reach the current tenant's items only.

`TenantSessions` assumes the function's tenant role (SKALD_TENANT_ROLE_ARN) once per account
with the session tag `skald_account=<account>`; the role's policies grant its actions on
`${aws:PrincipalTag/skald_account}`'s items only (ABAC, infra/access.py), so IAM refuses a call
naming another account's key whatever the code built. The credentials and the clients made
from them are cached per account and container, replaced before they expire (a call never
goes out with credentials closer than `refresh_margin_s` to their end), and bounded in number
(least recently used accounts go first), so a container serving many accounts stays small.

`RoutedClient` stands where the adapters expect a boto3 client. Each call goes with:
- the function's own client when no tenant is set (control plane: setup, the sweeps over
  every account, root's admin routes) or when it names control-plane items only
  (tenancy.control_plane_call: job payloads, watches, tasks, key guards, counters, ...);
- otherwise the current tenant's client, whichever account the call names: a call for
  tenant A that names account B's key goes out with A's credentials and is refused.
The tenant is the context variable the edges set (skald.domain.call_context); threads that
make calls for a request must carry its context (the blob store's pools do).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from skald.adapters.aws.tenancy import TAG_KEY, control_plane_call, is_tenant_account
from skald.domain.call_context import current_tenant
from skald.domain.errors import InvalidArgument

# Role chaining (a function's role assuming another) caps a session at one hour.
MAX_SESSION_S = 3600
MIN_SESSION_S = 900


@dataclass(frozen=True)
class Credentials:
    access_key: str
    secret_key: str
    token: str
    expires_at: float  # epoch seconds


@dataclass
class _Entry:
    credentials: Credentials
    clients: dict[str, Any] = field(default_factory=dict)


@dataclass
class SessionStats:
    hits: int = 0
    assumed: int = 0  # AssumeRole calls: first use of an account, refreshes, after eviction
    evicted: int = 0


MakeClient = Callable[[str, Credentials], Any]


class TenantSessions:
    """Credentials of the tenant role, per account, and the clients made with them."""

    def __init__(self, sts: Any, role_arn: str, make_client: MakeClient, *,
                 duration_s: int = MAX_SESSION_S, max_accounts: int = 256,
                 refresh_margin_s: float = 600.0,
                 clock: Callable[[], float] = time.time) -> None:
        if not MIN_SESSION_S <= duration_s <= MAX_SESSION_S:
            raise ValueError(f"a tenant session lasts {MIN_SESSION_S} to {MAX_SESSION_S} s")
        if not 0 <= refresh_margin_s < duration_s:
            raise ValueError("the refresh margin must be shorter than the session")
        if max_accounts < 1:
            raise ValueError("max_accounts must be >= 1")
        self._sts = sts
        self._role_arn = role_arn
        self._make_client = make_client
        self._duration_s = duration_s
        self._max_accounts = max_accounts
        self._margin_s = refresh_margin_s
        self._clock = clock
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()  # the cache
        self._assuming: dict[str, threading.Lock] = {}  # one AssumeRole per account at a time
        self._build = threading.Lock()  # boto3 does not create clients thread-safely
        self.stats = SessionStats()

    @property
    def role_arn(self) -> str:
        return self._role_arn

    def accounts(self) -> list[str]:
        """The accounts whose credentials are cached, least recently used first."""
        with self._lock:
            return list(self._entries)

    def client(self, account: str, service: str) -> Any:
        """A `service` client with `account`'s credentials, valid for `refresh_margin_s`
        at least."""
        if not is_tenant_account(account):
            raise InvalidArgument(f"no tenant-scoped credentials for account '{account}'")
        client = self._cached(account, service)
        if client is not None:
            return client
        with self._lock:
            gate = self._assuming.setdefault(account, threading.Lock())
        with gate:
            client = self._cached(account, service)  # another thread may have just assumed
            if client is not None:
                return client
            credentials = self._assume(account)
            entry = _Entry(credentials, {service: self._new_client(service, credentials)})
            with self._lock:
                self._entries[account] = entry
                self._entries.move_to_end(account)
                while len(self._entries) > self._max_accounts:
                    self._entries.popitem(last=False)
                    self.stats.evicted += 1
                self._assuming.pop(account, None)
            return entry.clients[service]

    def _cached(self, account: str, service: str) -> Any:
        with self._lock:
            entry = self._entries.get(account)
            if entry is None or entry.credentials.expires_at - self._clock() <= self._margin_s:
                return None
            self._entries.move_to_end(account)
            client = entry.clients.get(service)
            credentials = entry.credentials
            self.stats.hits += 1
        if client is None:  # the account's credentials, first use for this service
            client = self._new_client(service, credentials)
            with self._lock:
                client = entry.clients.setdefault(service, client)
        return client

    def _new_client(self, service: str, credentials: Credentials) -> Any:
        with self._build:
            return self._make_client(service, credentials)

    def _assume(self, account: str) -> Credentials:
        response = self._sts.assume_role(
            RoleArn=self._role_arn,
            # CloudTrail shows the account each session was for (64 characters at most).
            RoleSessionName=f"skald-{account}"[:64],
            DurationSeconds=self._duration_s,
            Tags=[{"Key": TAG_KEY, "Value": account}],
        )
        self.stats.assumed += 1
        raw = response["Credentials"]
        expiration = raw["Expiration"]
        expires_at = expiration.timestamp() if hasattr(expiration, "timestamp") else \
            float(expiration)
        return Credentials(raw["AccessKeyId"], raw["SecretAccessKey"], raw["SessionToken"],
                           expires_at)


class RoutedClient:
    """A boto3 client's stand-in that sends each call with the function's own client or the
    current tenant's (see the module notes). Attributes that are not operations (`meta`,
    `exceptions`, ...) are the function's own client's."""

    def __init__(self, base: Any, sessions: TenantSessions, service: str) -> None:
        self._base = base
        self._sessions = sessions
        self._service = service
        self._operations: dict[str, str] = dict(base.meta.method_to_api_mapping)

    @property
    def base(self) -> Any:
        return self._base

    def for_call(self, operation: str, params: dict[str, Any]) -> Any:
        """The client a call of `operation` (botocore's name) with `params` goes with."""
        account = current_tenant()
        if account is None or control_plane_call(self._service, operation, params):
            return self._base
        return self._sessions.client(account, self._service)

    def __getattr__(self, name: str) -> Any:
        operation = self._operations.get(name)
        if operation is None:
            return getattr(self._base, name)

        def call(**params: Any) -> Any:
            return getattr(self.for_call(operation, params), name)(**params)

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
        client = self._routed.for_call(self._operation, params)
        pages: Iterator[Any] = client.get_paginator(self._name).paginate(**params)
        return pages
