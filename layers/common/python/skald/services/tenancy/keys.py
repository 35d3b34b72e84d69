"""API keys: minting, several named keys per user, rotation, revocation, expiry, last use.

A key is shown once and stored as its sha256 hash only. It looks like OpenViking's:
`base64url(account).base64url(user).<64 hex>`. Its public id is the head of its hash: it names
the key in listings, audit records and the access log, and reveals nothing of the key.

Registration and `regenerate` (OpenViking's routes) handle the user's key named "default":
`regenerate` replaces it at once (the old key stops working on the next request). Rotation
without a gap uses named keys: create a second key, move the clients over, revoke the first.
"""

from __future__ import annotations

import base64
import hashlib
import math
import secrets
from collections.abc import Callable

from skald.domain.access.identity import Identity
from skald.domain.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from skald.domain.timefmt import iso_utc
from skald.ports import StateConflict, StateNotFound, StateStore
from skald.ports.accounts import DEFAULT_KEY_NAME, MAX_KEYS_PER_USER, ApiKey
from skald.services.tenancy.results import ApiKeyView, KeyRevoked, NewApiKey

KEY_ID_CHARS = 16
MAX_KEY_NAME = 64
# A key's last use is written at most this often (a write per request would cost more than
# the request); listings are as fresh as that.
TOUCH_INTERVAL_S = 60.0
MAX_KEY_LIFETIME_S = 10 * 366 * 86400


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def key_id_of(key_hash: str) -> str:
    return key_hash[:KEY_ID_CHARS]


def mint_key(account_id: str, user_id: str) -> str:
    def b64(value: str) -> str:
        return base64.urlsafe_b64encode(value.encode()).decode().rstrip("=")

    return f"{b64(account_id)}.{b64(user_id)}.{secrets.token_hex(32)}"


def principal(identity: Identity) -> str:
    """Who minted a key, as recorded on it."""
    return f"{identity.account_id}/{identity.user_id}"


def _key_fields(key: ApiKey) -> tuple[str, str, str, str, str, str, str | None, str | None]:
    return (
        key.key_id,
        key.name,
        key.account_id,
        key.user_id,
        iso_utc(key.created_at),
        key.created_by,
        iso_utc(key.expires_at) if key.expires_at is not None else None,
        iso_utc(key.last_used_at) if key.last_used_at is not None else None,
    )


def key_view(key: ApiKey) -> ApiKeyView:
    """A key as listings show it: never the key nor its hash."""
    return ApiKeyView(*_key_fields(key))


def check_name(name: str) -> str:
    name = name.strip()
    if not name or len(name) > MAX_KEY_NAME or any(ord(ch) < 32 for ch in name):
        raise InvalidArgument(
            f"A key name is 1 to {MAX_KEY_NAME} printable characters", {"field": "name"}
        )
    if name == DEFAULT_KEY_NAME:
        raise InvalidArgument(
            f"'{DEFAULT_KEY_NAME}' names the key of registration and "
            "regenerate: choose another name",
            {"field": "name"},
        )
    return name


def check_expiry(expires_in_s: float | None, now: float) -> float | None:
    if expires_in_s is None:
        return None
    if not math.isfinite(expires_in_s) or not 60 <= expires_in_s <= MAX_KEY_LIFETIME_S:
        raise InvalidArgument(
            "expires_in_s must be between 60 seconds and 10 years", {"field": "expires_in_s"}
        )
    return now + expires_in_s


class ApiKeys:
    def __init__(self, state: StateStore, clock: Callable[[], float]) -> None:
        self.state = state
        self.clock = clock

    def new(
        self,
        account_id: str,
        user_id: str,
        name: str,
        created_by: str,
        *,
        expires_at: float | None = None,
    ) -> tuple[str, ApiKey]:
        """A fresh key (shown once) and its stored form."""
        raw = mint_key(account_id, user_id)
        digest = hash_key(raw)
        return raw, ApiKey(
            key_id_of(digest),
            account_id,
            user_id,
            digest,
            name,
            self.clock(),
            created_by,
            expires_at,
        )

    def create(
        self,
        identity: Identity,
        account_id: str,
        user_id: str,
        name: str,
        expires_in_s: float | None,
    ) -> NewApiKey:
        name = check_name(name)
        if any(k.name == name for k in self.state.list_keys(account_id, user_id)):
            raise AlreadyExists(f"User {user_id} already has a key named '{name}'", {"name": name})
        raw, key = self.new(
            account_id,
            user_id,
            name,
            principal(identity),
            expires_at=check_expiry(expires_in_s, self.clock()),
        )
        self._add(key)
        return NewApiKey(*_key_fields(key), user_key=raw)

    def regenerate(self, identity: Identity, account_id: str, user_id: str) -> str:
        raw, key = self.new(account_id, user_id, DEFAULT_KEY_NAME, principal(identity))
        self._add(key, replace_named=DEFAULT_KEY_NAME)
        return raw

    def _add(self, key: ApiKey, *, replace_named: str | None = None) -> None:
        try:
            self.state.add_key(key, replace_named=replace_named)
        except StateNotFound:
            raise NotFound(
                f"User {key.user_id} not found in {key.account_id}", key.user_id, "user"
            ) from None
        except StateConflict:
            raise FailedPrecondition(
                f"User {key.user_id} holds {MAX_KEYS_PER_USER} keys already: revoke one first",
                {"max_keys": MAX_KEYS_PER_USER},
            ) from None

    def list(self, account_id: str, user_id: str) -> list[ApiKeyView]:
        return [key_view(k) for k in self.state.list_keys(account_id, user_id)]

    def revoke(self, account_id: str, user_id: str, key_id: str) -> KeyRevoked:
        if not self.state.delete_key(account_id, user_id, key_id):
            raise NotFound(
                f"Key {key_id} not found for {user_id} in {account_id}", key_id, "api_key"
            )
        return KeyRevoked(account_id, user_id, key_id, True)

    def touch(self, key: ApiKey, now: float) -> None:
        if key.last_used_at is None or now - key.last_used_at >= TOUCH_INTERVAL_S:
            self.state.touch_key(key, now)
