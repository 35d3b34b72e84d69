"""DedupRegistry conformance (SqsJobQueue's collaborator): the in-process registry and the
DynamoDB one on moto, through the protocol only. Covers the conflict branch (a live claim is
returned to a second claimer), expiry at exactly the TTL, and the release branches (only the
holder releases; releasing a claim that moved on or never existed is a no-op)."""

from __future__ import annotations

import threading

from skald.adapters.aws.sqs.jobqueue import DedupRegistry
from tests.conformance.conftest import DedupOpener

T0 = 1_700_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def test_first_claim_wins_and_later_claimers_get_the_holder(dedup_backend: DedupOpener) -> None:
    clock = Clock()
    registry = dedup_backend(clock)
    assert registry.claim("semantic", "acme/a.md", "j1", 30) == "j1"
    assert registry.claim("semantic", "acme/a.md", "j2", 30) == "j1"
    clock.now += 29.5
    assert dedup_backend(clock).claim("semantic", "acme/a.md", "j3", 30) == "j1"


def test_queues_and_keys_are_independent(dedup_backend: DedupOpener) -> None:
    registry = dedup_backend(Clock())
    assert registry.claim("semantic", "k", "j1", 30) == "j1"
    assert registry.claim("memory", "k", "j2", 30) == "j2"
    assert registry.claim("semantic", "other", "j3", 30) == "j3"
    # Separators inside keys do not make two keys collide.
    assert registry.claim("semantic", "a#b", "j4", 30) == "j4"
    assert registry.claim("semantic#a", "b", "j5", 30) == "j5"


def test_a_claim_expires_at_its_ttl(dedup_backend: DedupOpener) -> None:
    clock = Clock()
    registry = dedup_backend(clock)
    assert registry.claim("q", "k", "j1", 10) == "j1"
    clock.now = T0 + 9.999
    assert registry.claim("q", "k", "j2", 10) == "j1"
    clock.now = T0 + 10
    assert registry.claim("q", "k", "j3", 10) == "j3"
    assert registry.claim("q", "k", "j4", 10) == "j3"


def test_only_the_holder_releases(dedup_backend: DedupOpener) -> None:
    registry = dedup_backend(Clock())
    registry.claim("q", "k", "j1", 30)
    registry.release("q", "k", "j2")  # not the holder: the claim stays
    assert registry.claim("q", "k", "j3", 30) == "j1"
    registry.release("q", "k", "j1")
    assert registry.claim("q", "k", "j4", 30) == "j4"


def test_releasing_an_expired_claim_leaves_its_successor_alone(dedup_backend: DedupOpener) -> None:
    clock = Clock()
    registry = dedup_backend(clock)
    registry.claim("q", "k", "old", 5)
    clock.now += 6
    assert registry.claim("q", "k", "new", 5) == "new"
    registry.release("q", "k", "old")  # the old job starts late: its claim is long gone
    assert registry.claim("q", "k", "third", 5) == "new"


def test_releasing_nothing_is_a_no_op(dedup_backend: DedupOpener) -> None:
    registry = dedup_backend(Clock())
    registry.release("q", "never-claimed", "j1")
    assert registry.claim("q", "never-claimed", "j2", 5) == "j2"


def test_concurrent_claims_have_one_winner(dedup_backend: DedupOpener) -> None:
    clock = Clock()
    registries: list[DedupRegistry] = [dedup_backend(clock) for _ in range(6)]
    results: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(len(registries))

    def claim(i: int) -> None:
        start.wait()
        held = registries[i].claim("q", "race", f"j{i}", 30)
        with lock:
            results.append(held)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(len(registries))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(results) == len(registries)
    assert len(set(results)) == 1, results
    assert results[0] in {f"j{i}" for i in range(len(registries))}
