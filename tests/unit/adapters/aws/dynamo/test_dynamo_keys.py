"""Key builders of the DynamoDB state table: spelling, ordering, escaping, shards."""

from __future__ import annotations

import random
import zlib

import pytest

from skald.adapters.aws.dynamo import keys as k


def test_fixed_spellings() -> None:
    assert k.account_pk("acme") == "ACCT#acme"
    assert k.account_listing_sk("acme") == "ACCT#acme"
    assert k.user_sk("alice") == "USER#alice"
    assert k.key_guard_pk("ab12") == "KEY#ab12"
    assert k.task_pk("t-1") == "TASK#t-1"
    assert k.tasks_gsi1pk("acme") == "ACCT#acme#TASKS"
    assert k.task_gsi1sk(1_700_000_000.5, "t-1") == "0001700000000.500000#t-1"
    assert k.session_pk("acme", "alice", "s1") == "SESS#acme#alice#s1"
    assert k.message_sk(42) == "MSG#000000000042"
    assert k.archive_sk(3) == "ARCH#00000003"
    assert k.sessions_listing_pk("acme") == "ACCT#acme#SESSIONS"
    assert k.session_listing_sk("alice", "s1") == "USER#alice#SESS#s1"
    assert k.session_listing_sk("alice", "s1").startswith(k.user_sessions_prefix("alice"))


def test_escaping_keeps_parts_apart() -> None:
    assert k.esc("a#b%c") == "a%23b%25c"
    assert k.unesc(k.esc("a#b%c%23")) == "a#b%c%23"
    # Without escaping these would collide: ("a#b", "c") vs ("a", "b#c").
    assert k.session_pk("a#b", "c", "s") != k.session_pk("a", "b#c", "s")
    assert k.account_pk("x#SESSIONS") != k.sessions_listing_pk("x")
    assert k.tasks_gsi1pk("x") != k.tasks_gsi1pk("x#TASKS")
    # A user's prefix never matches another user whose id merely starts the same way.
    assert not k.session_listing_sk("alice2", "s").startswith(k.user_sessions_prefix("alice"))
    assert not k.session_listing_sk("alice#x", "s").startswith(k.user_sessions_prefix("alice"))
    for built in (k.account_pk("a#b"), k.user_sk("u#v"), k.key_guard_pk("h#"), k.task_pk("t#1")):
        assert built.count("#") == 1


def test_message_and_archive_keys_sort_numerically() -> None:
    seqs = random.Random(7).sample(range(0, 10**9), 200) + [0, 1, 9, 10, 99, 100, k.MAX_SEQ]
    assert sorted(seqs) == sorted(seqs, key=k.message_sk)
    numbers = [1, 2, 9, 10, 999, 1000, 9999, 10_000, 123_456, k.MAX_ARCHIVE]
    assert sorted(numbers, key=k.archive_sk) == numbers
    # Each item type keeps to its own sort-key range within the session partition.
    assert k.archive_sk(k.MAX_ARCHIVE) < k.META < k.message_sk(0)


def test_out_of_range_numbers_are_refused() -> None:
    for bad in (-1, k.MAX_SEQ + 1):
        with pytest.raises(ValueError):
            k.message_sk(bad)
    for bad in (-1, k.MAX_ARCHIVE + 1):
        with pytest.raises(ValueError):
            k.archive_sk(bad)


def test_task_sort_key_orders_by_time_then_id() -> None:
    rng = random.Random(3)
    tasks = [
        (
            rng.choice([0.0, 1.5, 1_700_000_000.0, 1_700_000_000.000001, 2e9]),
            rng.choice(["a", "b", "t1", "t10", "t2"]),
        )
        for _ in range(300)
    ]
    by_key = sorted(tasks, key=lambda t: k.task_gsi1sk(*t))
    assert by_key == sorted(tasks)
    assert len(k.task_gsi1sk(0.0, "x")) == len(k.task_gsi1sk(9_999_999_999.999999, "x"))


def test_idle_shards_are_stable_and_spread() -> None:
    shards = k.idle_shard_pks()
    assert len(shards) == k.IDLE_SHARDS == len(set(shards))
    seen = {k.idle_shard_pk("acme", "alice", f"s{i}") for i in range(200)}
    assert seen == set(shards)
    # crc32 rather than hash(): the same in every process (PYTHONHASHSEED-independent).
    assert k.idle_shard_pk("acme", "alice", "s1") == k.idle_shard_pk("acme", "alice", "s1")
    expected = zlib.crc32(b"SESS#acme#alice#s1") % k.IDLE_SHARDS
    assert k.idle_shard_pk("acme", "alice", "s1") == f"IDLE#{expected}"


def test_outbox_keys_shard_by_session_and_sort_by_creation() -> None:
    shards = k.outbox_shard_pks()
    assert len(shards) == k.OUTBOX_SHARDS == len(set(shards))
    assert {k.outbox_shard_pk("acme", "alice", f"s{i}") for i in range(200)} == set(shards)
    rng = random.Random(5)
    made = [
        (
            rng.choice([0.0, 1.5, 1_700_000_000.0, 1_700_000_000.000001, 2e9]),
            rng.choice(["a", "b#c", "zz"]),
            rng.randint(1, 20),
        )
        for _ in range(300)
    ]
    by_key = sorted(made, key=lambda m: k.outbox_sk(m[0], "acme", "alice", m[1], m[2]))
    assert [m[0] for m in by_key] == sorted(m[0] for m in made)
    # the sweeper's bound "{stamp}$" keeps every archive created at that time, no later one
    at = k.outbox_sk(1.5, "acme", "alice", "s", 1)
    assert at < k.stamp(1.5) + "$" < k.outbox_sk(1.500001, "acme", "alice", "s", 1)
