import pytest

from skald.domain.plans import TokenBucket, retry_after_s
from skald.domain.plans.bucket import MAX_RETRY_AFTER_S, capacity


def test_a_full_bucket_allows_a_burst_then_refuses() -> None:
    bucket = TokenBucket.full(2.0, 5, now=0.0)
    assert [bucket.take(2.0, 5, 0.0) for _ in range(5)] == [0.0] * 5
    assert bucket.take(2.0, 5, 0.0) == pytest.approx(0.5)  # one token comes in 1/rate s


def test_tokens_come_back_at_the_rate_up_to_the_burst() -> None:
    bucket = TokenBucket.full(2.0, 3, now=0.0)
    for _ in range(3):
        bucket.take(2.0, 3, 0.0)
    assert bucket.take(2.0, 3, 0.25) == pytest.approx(0.25)  # half a token so far
    assert bucket.take(2.0, 3, 0.5) == 0.0
    # a long pause refills to the burst, never beyond
    assert [bucket.take(2.0, 3, 100.0) for _ in range(3)] == [0.0] * 3
    assert bucket.take(2.0, 3, 100.0) > 0


def test_a_refused_request_takes_nothing() -> None:
    bucket = TokenBucket.full(1.0, 1, now=0.0)
    assert bucket.take(1.0, 1, 0.0) == 0.0
    assert bucket.take(1.0, 1, 0.5) == pytest.approx(0.5)
    assert bucket.take(1.0, 1, 0.5) == pytest.approx(0.5)
    assert bucket.take(1.0, 1, 1.0) == 0.0


def test_the_clock_going_back_gives_nothing() -> None:
    bucket = TokenBucket.full(1.0, 1, now=10.0)
    bucket.take(1.0, 1, 10.0)
    assert bucket.take(1.0, 1, 5.0) == pytest.approx(1.0)


def test_capacity_without_a_burst_is_one_seconds_worth() -> None:
    assert capacity(2.5, None) == 3 and capacity(0.1, None) == 1 and capacity(9.0, 0) == 1


def test_rate_zero_never_refills() -> None:
    bucket = TokenBucket.full(0.0, 2, now=0.0)
    assert bucket.take(0.0, 2, 0.0) == 0.0 and bucket.take(0.0, 2, 0.0) == 0.0
    assert bucket.take(0.0, 2, 1e6) == MAX_RETRY_AFTER_S


def test_idle_full() -> None:
    bucket = TokenBucket.full(1.0, 2, now=0.0)
    bucket.take(1.0, 2, 0.0)
    assert not bucket.idle_full(1.0, 2, 0.5)
    assert bucket.idle_full(1.0, 2, 1.0)


def test_retry_after_is_whole_seconds_at_least_one() -> None:
    assert retry_after_s(0.01) == 1
    assert retry_after_s(1.0) == 1
    assert retry_after_s(1.2) == 2
    assert retry_after_s(1e9) == MAX_RETRY_AFTER_S
