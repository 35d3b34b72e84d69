from typing import Any

import pytest

from skald.domain.access.identity import Identity
from skald.domain.errors import ResourceExhausted
from skald.domain.plans import Plan
from skald.services.plans import RateLimits
from skald.services.plans.book import PlanBook


class Accounts:
    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings
        self.reads = 0

    def get_account(self, account_id: str) -> Any:
        from skald.ports.accounts import Account

        self.reads += 1
        return Account(account_id, 0.0, self.settings)


def limiter(settings: dict[str, Any], now: list[float]) -> tuple[RateLimits, Accounts]:
    accounts = Accounts(settings)
    book = PlanBook(accounts, ttl_s=1e9, clock=lambda: now[0])  # type: ignore[arg-type]
    return RateLimits(book, clock=lambda: now[0]), accounts


ALICE = Identity("acme", "alice", "user")


def test_burst_then_429_with_retry_after_then_allowed_again() -> None:
    now = [0.0]
    limits, _ = limiter({"limits": {"rate_per_s": 0.5, "burst": 3}}, now)
    for _ in range(3):
        limits.admit(ALICE)
    with pytest.raises(ResourceExhausted) as err:
        limits.admit(ALICE)
    assert err.value.retry_after_s == 2
    assert err.value.details == {
        "limit": "rate_per_s",
        "value": 0.5,
        "burst": 3,
        "retry_after_s": 2,
    }
    now[0] = 2.0
    limits.admit(ALICE)


def test_accounts_have_their_own_buckets() -> None:
    now = [0.0]
    limits, _ = limiter({"limits": {"rate_per_s": 1, "burst": 1}}, now)
    limits.admit(ALICE)
    limits.admit(Identity("other", "bob", "user"))
    with pytest.raises(ResourceExhausted):
        limits.admit(Identity("acme", "carol", "admin"))  # same account as alice


def test_root_dev_mode_and_unlimited_plans_are_not_limited() -> None:
    now = [0.0]
    limits, accounts = limiter({"limits": {"rate_per_s": 0, "burst": 1}}, now)
    for _ in range(5):
        limits.admit(Identity("_root", "root", "root"))
        limits.admit(Identity("default", "default", "root", dev_mode=True))
    assert accounts.reads == 0
    unlimited, _ = limiter({}, now)
    for _ in range(100):
        unlimited.admit(ALICE)


def test_fresh_only_while_the_plan_is_cached() -> None:
    now = [0.0]
    limits, accounts = limiter({}, now)
    assert not limits.fresh(ALICE)
    limits.admit(ALICE)
    assert limits.fresh(ALICE) and accounts.reads == 1


def test_the_table_of_buckets_stays_bounded() -> None:
    now = [0.0]
    accounts = Accounts({"limits": {"rate_per_s": 1, "burst": 1}})
    book = PlanBook(accounts, ttl_s=1e9, clock=lambda: now[0])  # type: ignore[arg-type]
    limits = RateLimits(book, clock=lambda: now[0], max_buckets=10)
    for i in range(25):
        limits.admit(Identity(f"a{i}", "u", "user"))
    assert len(limits._buckets) <= 10


def test_take_with_a_plan() -> None:
    now = [0.0]
    limits, _ = limiter({}, now)
    plan = Plan("p", rate_per_s=10.0, burst=None)  # a burst of one second's worth
    for _ in range(10):
        limits.take("x", plan)
    with pytest.raises(ResourceExhausted) as err:
        limits.take("x", plan)
    assert err.value.retry_after_s == 1 and err.value.details["burst"] == 10
