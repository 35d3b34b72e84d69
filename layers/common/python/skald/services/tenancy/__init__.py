"""Tenants and their safety: accounts, users and roles, API keys, the root key, removing users
and accounts, and keeping the jobs of removed tenants from running.

- `AccountService` (accounts.py): accounts, users, roles; a request's key to an Identity.
- `ApiKeys` (keys.py): several named keys per user, rotation, revocation, expiry, last use.
- `RootKey` (root_key.py): the root key, read again from its secret after a bound.
- `TenantDeletion` (deletion.py): tombstone at once, a durable purge queued, the sweep.
- `TenantPurge` (purge.py): the purge job's steps over every store.
- `JobGate` (gate.py): which queued jobs may still run.

The names are imported on first use: the authorizer needs the keys and not the purge (which
brings the session services with it).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from skald.services.tenancy.accounts import AccountService
    from skald.services.tenancy.deletion import TenantDeletion, purge_payload
    from skald.services.tenancy.gate import JobGate
    from skald.services.tenancy.keys import ApiKeys, hash_key, key_id_of, mint_key
    from skald.services.tenancy.purge import PurgeStores, TenantPurge
    from skald.services.tenancy.root_key import RootKey

_HOMES = {
    "AccountService": "accounts",
    "TenantDeletion": "deletion",
    "purge_payload": "deletion",
    "JobGate": "gate",
    "ApiKeys": "keys",
    "hash_key": "keys",
    "key_id_of": "keys",
    "mint_key": "keys",
    "PurgeStores": "purge",
    "TenantPurge": "purge",
    "RootKey": "root_key",
}

__all__ = [
    "AccountService",
    "ApiKeys",
    "JobGate",
    "PurgeStores",
    "RootKey",
    "TenantDeletion",
    "TenantPurge",
    "hash_key",
    "key_id_of",
    "mint_key",
    "purge_payload",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
