from typing import Any

import pytest

from skald.domain.errors import QuotaExceeded
from skald.domain.plans import UNLIMITED, Plan
from skald.services.plans import Quotas


class Book:
    """A PlanBook stand-in: one plan for every account."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan

    def for_account(self, account_id: str) -> Plan:
        return self.plan


class Counter:
    def __init__(self, value: int) -> None:
        self.value = value
        self.reads = 0

    def count_sessions(self, account_id: str) -> int:
        self.reads += 1
        return self.value

    def count(self, account: str, flt: Any = None) -> int:
        self.reads += 1
        return self.value


def quotas(plan: Plan, counter: Counter, now: list[float]) -> Quotas:
    return Quotas(
        Book(plan),  # type: ignore[arg-type]
        sessions=counter,  # type: ignore[arg-type]
        index=counter,  # type: ignore[arg-type]
        ttl_s=5.0,
        clock=lambda: now[0],
    )


def test_unlimited_reads_no_count_and_never_calls_the_counter() -> None:
    counter = Counter(10**9)
    q = quotas(UNLIMITED, counter, [0.0])
    q.check_sessions("a")
    q.check_watches("a", lambda: pytest.fail("counted"))
    q.check_watch_interval("a", 0.01)
    assert q.check_index_records("a", lambda: pytest.fail("counted")) == 0
    assert counter.reads == 0


def test_sessions_at_the_limit_then_over_with_the_details() -> None:
    counter = Counter(1)
    q = quotas(Plan("p", sessions=2), counter, [0.0])
    q.check_sessions("a")  # 1 + 1 = 2: at the limit, allowed
    q.sessions_changed("a", 1)
    with pytest.raises(QuotaExceeded) as err:
        q.check_sessions("a")
    assert err.value.code == "QUOTA_EXCEEDED"
    assert err.value.details == {"limit": "sessions", "value": 2, "current": 2, "requested": 1}
    assert counter.reads == 1  # the count was read once and kept up to date here
    q.sessions_changed("a", -1)
    q.check_sessions("a")


def test_counts_are_read_again_after_the_bound() -> None:
    now = [0.0]
    counter = Counter(5)
    q = quotas(Plan("p", index_records=10), counter, now)
    assert q.check_index_records("a", 5) == 5
    q.index_records_added("a", 5)
    with pytest.raises(QuotaExceeded):
        q.check_index_records("a", 1)
    counter.value = 3  # removed elsewhere
    now[0] = 6.0
    assert q.check_index_records("a", 7) == 7
    assert counter.reads == 2


def test_a_write_that_adds_nothing_is_not_checked() -> None:
    counter = Counter(100)
    q = quotas(Plan("p", index_records=1), counter, [0.0])
    assert q.check_index_records("a", lambda: 0) == 0
    assert counter.reads == 0


def test_watches_count_and_interval() -> None:
    q = quotas(Plan("p", watches=2, watch_min_interval_s=600), Counter(0), [0.0])
    q.check_watches("a", lambda: 1)
    with pytest.raises(QuotaExceeded) as err:
        q.check_watches("a", lambda: 2)
    assert err.value.details["limit"] == "watches"
    q.check_watch_interval("a", 10)  # 600 s: at the limit
    with pytest.raises(QuotaExceeded) as err:
        q.check_watch_interval("a", 5)
    assert err.value.details == {
        "limit": "watch_min_interval_s",
        "value": 600,
        "current": 300,
        "watch_interval": 5,
    }


def test_forget_reads_the_counts_again() -> None:
    counter = Counter(0)
    q = quotas(Plan("p", sessions=5), counter, [0.0])
    q.check_sessions("a")
    q.forget("a")
    q.check_sessions("a")
    assert counter.reads == 2


def test_a_request_makes_one_store_call_at_most() -> None:
    import contextvars

    from skald.ports.accounts import Account
    from skald.services.plans.book import PlanBook, begin_request

    class Accounts:
        reads = 0

        def get_account(self, account_id: str) -> Account:
            Accounts.reads += 1
            return Account(account_id, 0.0, {"limits": {"sessions": 10}})

    now = [0.0]
    counter = Counter(3)
    book = PlanBook(Accounts(), ttl_s=2.0, clock=lambda: now[0])  # type: ignore[arg-type]
    q = Quotas(book, sessions=counter, ttl_s=5.0, clock=lambda: now[0])  # type: ignore[arg-type]

    def request() -> tuple[int, int]:
        before = (Accounts.reads, counter.reads)
        begin_request()
        book.for_account("a")  # the rate limit's plan lookup, first in a request
        q.check_sessions("a")
        return Accounts.reads - before[0], counter.reads - before[1]

    def run() -> tuple[int, int]:
        return contextvars.copy_context().run(request)

    assert run() == (1, 1)  # cold: whatever it costs
    now[0] = 1.0
    assert run() == (0, 0)  # warm
    now[0] = 6.0  # both stale: the plan is read, the count served once more
    assert run() == (1, 0)
    assert run() == (0, 1)  # the next request reads the count
    # outside a request (a worker, a test), a stale count is always read
    now[0] = 20.0
    q.check_sessions("a")
    assert counter.reads == 3
