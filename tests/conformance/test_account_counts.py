"""AccountCounts conformance (SqsJobQueue's per-account counts and running slots): the
in-process one and the DynamoDB one on moto, through the protocol only. A count is the sum of
an account's live day buckets, never below zero; a settling never revives an expired bucket
(a drifted count heals when its bucket expires); a slot is one of `cap` per key, held until
released or expired."""

from __future__ import annotations

from skald.domain.ops.fairness import DAY_S, bucket_expiry
from tests.conformance.conftest import AccountCountsOpener

DAY = 20_000
T0 = DAY * DAY_S + 3600.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def test_counts_per_account_over_day_buckets(account_counts_backend: AccountCountsOpener) -> None:
    clock = Clock()
    counts = account_counts_backend(clock)
    assert counts.count("acme") == 0
    counts.add("acme", DAY, 3)
    counts.add("acme", DAY + 1, 2)
    counts.add("other", DAY, 7)
    assert (counts.count("acme"), counts.count("other")) == (5, 7)
    counts.add("acme", DAY, -1)
    assert account_counts_backend(clock).count("acme") == 4  # another client sees it
    # Double settlings never make a count negative where it is read.
    for _ in range(10):
        counts.add("acme", DAY + 1, -1)
    assert counts.count("acme") == 0


def test_an_expired_bucket_stops_counting_and_stays_gone(
    account_counts_backend: AccountCountsOpener,
) -> None:
    clock = Clock()
    counts = account_counts_backend(clock)
    counts.add("acme", DAY, 4)  # four lost settlings: a drifted count
    counts.add("acme", DAY + 3, 1)
    clock.now = bucket_expiry(DAY, 4) + 1
    assert counts.count("acme") == 1  # healed
    counts.add("acme", DAY, -1)  # a late settling does not bring the bucket back
    counts.add("acme", DAY + 3, 0)
    assert counts.count("acme") == 1


def test_slots_are_capped_per_key_and_expire(account_counts_backend: AccountCountsOpener) -> None:
    clock = Clock()
    counts = account_counts_backend(clock)
    assert counts.take_slot("acme/semantic", "w1", 2, 60)
    assert counts.take_slot("acme/semantic", "w1", 2, 60)  # held already
    assert counts.take_slot("acme/semantic", "w2", 2, 60)
    assert not counts.take_slot("acme/semantic", "w3", 2, 60)
    assert counts.take_slot("acme/memory", "w3", 2, 60)  # another queue
    assert counts.take_slot("other/semantic", "w3", 2, 60)  # another account
    counts.release_slot("acme/semantic", "w1")
    assert counts.take_slot("acme/semantic", "w3", 2, 60)
    assert not counts.take_slot("acme/semantic", "w4", 2, 60)
    clock.now += 61  # w2 and w3 crashed: their slots expire
    assert counts.take_slot("acme/semantic", "w4", 2, 60)
    counts.release_slot("acme/semantic", "nobody")  # a no-op
    counts.release_slot("nobody/semantic", "w1")


def test_drop_forgets_an_account(account_counts_backend: AccountCountsOpener) -> None:
    clock = Clock()
    counts = account_counts_backend(clock)
    counts.add("acme", DAY, 2)
    counts.add("other", DAY, 1)
    assert counts.take_slot("acme/semantic", "w1", 1, 60)
    counts.drop("acme")
    assert (counts.count("acme"), counts.count("other")) == (0, 1)
    counts.add("acme", DAY, -1)  # a job settled after the purge brings nothing back
    assert counts.count("acme") == 0
    assert counts.take_slot("acme/semantic", "w2", 1, 60)
