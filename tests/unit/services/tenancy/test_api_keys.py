"""API keys on the service: expiry and last use against a clock the test moves."""

from __future__ import annotations

from pathlib import Path

import pytest

from skald.config import Settings
from skald.domain.access.identity import Identity
from skald.domain.errors import Unauthenticated
from skald.services.tenancy.accounts import Credentials
from skald.services.tenancy.keys import TOUCH_INTERVAL_S
from tests.support.compose import local_services

ROOT = Identity("_root", "root", "root")


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def test_an_expired_key_is_refused_and_last_use_is_kept_at_most_once_a_minute(
    tmp_path: Path,
) -> None:
    c = local_services(Settings(backend="local", data_dir=tmp_path / "d", root_api_key="r"))
    clock = Clock()
    accounts = c.accounts
    accounts.clock = accounts.keys.clock = clock
    try:
        accounts.create_account(ROOT, "acme", "alice")
        made = accounts.create_key(ROOT, "acme", "alice", "ci", 3600)
        creds = Credentials(made.user_key, None, None, None)
        assert accounts.resolve(creds).key_id == made.key_id
        [key] = [k for k in accounts.list_keys(ROOT, "acme", "alice") if k.name == "ci"]
        assert key.last_used_at is not None
        [ci] = [k for k in c.state.list_keys("acme", "alice") if k.name == "ci"]
        first_use = c.state.resolve_key(ci.key_hash)
        assert first_use is not None and first_use.key.last_used_at == clock.now
        clock.now += TOUCH_INTERVAL_S / 2  # used again soon: not written again
        accounts.resolve(creds)
        again = c.state.resolve_key(first_use.key.key_hash)
        assert again is not None and again.key.last_used_at == clock.now - TOUCH_INTERVAL_S / 2
        clock.now += 3600
        with pytest.raises(Unauthenticated, match="expired"):
            accounts.resolve(creds)
    finally:
        c.close()
