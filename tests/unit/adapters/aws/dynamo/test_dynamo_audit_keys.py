"""Keys of the audit items in the DynamoDB state table (adapters/aws/dynamo/audit.py):
spelling, month partitions, ordering, escaping, shards, and no collision with the other items'
keys (dynamo/keys.py)."""

from __future__ import annotations

import zlib
from datetime import UTC, datetime

from skald.adapters.aws.dynamo import audit as a
from skald.adapters.aws.dynamo import keys as k

T0 = datetime(2026, 1, 31, 23, 59, 59, tzinfo=UTC).timestamp()


def test_fixed_spellings() -> None:
    assert a.month_of(T0) == "2026-01"
    assert a.audit_pk("acme", "2026-01") == "AUDIT#acme#2026-01"
    assert a.audit_sk(1_700_000_000.5, "ab12") == "0001700000000.500000#ab12"
    assert a.audit_gsi1pk("2026-01", 3) == "AUDITS#2026-01#3"
    assert a.audit_gsi1sk(1_700_000_000.5, "acme", "ab12") == "0001700000000.500000#ab12#acme"
    assert a.audit_shard("ab12") == zlib.crc32(b"ab12") % a.AUDIT_SHARDS


def test_months_of_a_window_newest_first() -> None:
    assert a.months(T0, T0) == ["2026-01"]
    assert a.months(T0, T0 + 1) == ["2026-02", "2026-01"]
    year = datetime(2024, 12, 15, tzinfo=UTC).timestamp()
    assert a.months(year, T0) == [
        "2026-01",
        "2025-12",
        "2025-11",
        "2025-10",
        "2025-09",
        "2025-08",
        "2025-07",
        "2025-06",
        "2025-05",
        "2025-04",
        "2025-03",
        "2025-02",
        "2025-01",
        "2024-12",
    ]
    assert len(a.months(T0 - 400 * 86400, T0)) == 14  # the default retention


def test_sort_keys_sort_like_time_then_id() -> None:
    stamps = [(1.0, "b"), (1.0, "a"), (1_000_000_000.25, "0"), (1_000_000_000.125, "f")]
    assert sorted(a.audit_sk(t, i) for t, i in stamps) == [
        a.audit_sk(t, i) for t, i in sorted(stamps)
    ]
    assert sorted(a.audit_gsi1sk(t, "acct", i) for t, i in stamps) == [
        a.audit_gsi1sk(t, "acct", i) for t, i in sorted(stamps)
    ]


def test_escaping_keeps_accounts_apart() -> None:
    assert a.audit_pk("a#2026-01", "2026-02") != a.audit_pk("a", "2026-01#2026-02")
    assert a.account_of_pk(a.audit_pk("x#y%z", "2026-01")) == "x#y%z"
    assert a.audit_pk("a#b", "2026-01").count("#") == 2


def test_no_collision_with_the_other_items() -> None:
    """Audit partitions start with `AUDIT#` (table) and `AUDITS#` (gsi1), which no other
    item's key does, whatever the ids: the tasks' and the unsealed commits' gsi1 partitions
    are `ACCT#...#TASKS` and `OUTBOX#n`."""
    for account in ("acme", "AUDIT", "AUDITS", "x#y"):
        others_pk = (
            k.account_pk(account),
            k.key_guard_pk(account),
            k.task_pk(account),
            k.session_pk(account, "u", "s"),
            k.sessions_listing_pk(account),
            k.ACCOUNTS_PK,
            *k.idle_shard_pks(),
        )
        others_gsi1 = (k.tasks_gsi1pk(account), *k.outbox_shard_pks())
        for pk in others_pk:
            assert not pk.startswith("AUDIT#") and not pk.startswith("AUDITS#"), pk
        for pk in others_gsi1:
            assert not pk.startswith("AUDITS#"), pk
        assert a.audit_pk(account, "2026-01").startswith("AUDIT#")
