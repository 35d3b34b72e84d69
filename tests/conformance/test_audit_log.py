"""AuditLog conformance: every adapter, through the port only. Records are appended once and
settled once; the listing pages through the matching records newest first, with totals over
every page, by the rule of domain/ops/audit.py (AuditQuery.matches)."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from skald.adapters.local.sqlite.audit_log import SqliteAuditLog
from skald.domain.ops.audit import (
    ERROR,
    OK,
    PENDING,
    AuditQuery,
    AuditRecord,
    newest_first,
    parse_statuses,
)
from skald.ports import AuditLog
from tests.conformance.conftest import AuditOpener

T0 = 1_700_000_000.0  # 2023-11-14, UTC
DAY = 86400.0
FAR = 4_000_000_000.0  # an expiry no test reaches


def clock() -> float:
    return T0


def record(record_id: str, **overrides: Any) -> AuditRecord:
    fields: dict[str, Any] = {
        "record_id": record_id,
        "account_id": "acme",
        "actor_account_id": "acme",
        "user_id": "alice",
        "role": "admin",
        "action": "fs.rm",
        "target": f"viking://resources/{record_id}.md",
        "created_at": T0,
        "expires_at": FAR,
    }
    fields.update(overrides)
    return AuditRecord(**fields)


def query(account_id: str | None = "acme", **overrides: Any) -> AuditQuery:
    fields: dict[str, Any] = {
        "account_id": account_id,
        "since": T0 - 400 * DAY,
        "until": T0 + 400 * DAY,
        "now": T0,
        "page_size": 100,
    }
    fields.update(overrides)
    return AuditQuery(**fields)


def ids(log: AuditLog, q: AuditQuery) -> list[str]:
    return [r.record_id for r in log.query(q).items]


@pytest.fixture
def log(audit_backend: AuditOpener) -> AuditLog:
    return audit_backend(clock)


def test_a_record_reads_back_as_written(audit_backend: AuditOpener) -> None:
    full = record(
        "r1",
        actor_account_id="_root",
        key_id="k-1",
        request_id="req-1",
        source_ip="127.0.0.1",
        method="DELETE",
        route="/api/v1/fs",
        detail={"recursive": True, "to": "viking://resources/ü"},
    )
    bare = record("r2", created_at=T0 + 1)
    audit_backend(clock).append(full)
    audit_backend(clock).append(bare)
    # another client on the same storage: the records were durable before append returned
    items = audit_backend(clock).query(query()).items
    assert items == [bare, full]
    assert items[1].api_type == "fs" and items[1].outcome == PENDING
    assert items[1].status_code == 0


def test_a_record_id_is_written_once(log: AuditLog) -> None:
    log.append(record("r1"))
    with pytest.raises(ValueError):
        log.append(record("r1", target="viking://resources/other.md"))
    assert [r.target for r in log.query(query()).items] == ["viking://resources/r1.md"]


def test_settle_writes_the_outcome_once(log: AuditLog) -> None:
    pending = record("r1", detail={"recursive": False})
    log.append(pending)
    failed = replace(
        pending,
        outcome=ERROR,
        status_code=404,
        duration_ms=12.5,
        error_code="NOT_FOUND",
        error_message="File not found",
        error_details={"resource": "viking://resources/r1.md"},
        detail={"recursive": False, "deleted": 0},
    )
    assert log.settle(failed)
    assert log.query(query()).items == [failed]
    # settled records never change again; unknown ones are reported
    assert not log.settle(replace(pending, outcome=OK, status_code=200))
    assert not log.settle(record("missing", outcome=OK, status_code=200))
    assert log.query(query()).items == [failed]


def test_settle_clears_nothing_it_was_not_given(log: AuditLog) -> None:
    pending = record("r1", request_id="req", detail={"a": 1})
    log.append(pending)
    done = replace(pending, outcome=OK, status_code=200, duration_ms=3.0)
    assert log.settle(done)
    [got] = log.query(query()).items
    assert got == done and got.request_id == "req" and got.error_code is None


def test_newest_first_with_pages_and_totals(log: AuditLog) -> None:
    # two months and a tie on created_at, which the id breaks
    written = [
        record(
            f"r{i:02d}",
            created_at=T0 - 20 * DAY + i * DAY // 2,
            status_code=200 if i % 3 else 404,
            outcome=OK if i % 3 else ERROR,
        )
        for i in range(25)
    ]
    written.append(record("r99", created_at=written[-1].created_at, status_code=200, outcome=OK))
    for r in written:
        log.append(r)
    order = [r.record_id for r in sorted(written, key=newest_first, reverse=True)]
    assert order[:2] == ["r99", "r24"]
    pages = [log.query(query(page=p, page_size=10)) for p in (1, 2, 3, 4)]
    assert [r.record_id for p in pages for r in p.items] == order
    assert [len(p.items) for p in pages] == [10, 10, 6, 0]
    succeeded = sum(1 for r in written if r.succeeded)
    assert {(p.total, p.succeeded) for p in pages} == {(26, succeeded)}


def test_accounts_are_apart_and_root_sees_them_all(log: AuditLog) -> None:
    log.append(record("a1", created_at=T0 - 35 * DAY))
    log.append(record("b1", account_id="beta", created_at=T0 - 1))
    log.append(record("a2", created_at=T0))
    log.append(
        record(
            "b2",
            account_id="beta",
            actor_account_id="_root",
            user_id="root",
            role="root",
            action="account.delete",
            target="beta",
            created_at=T0 + 31 * DAY,
        )
    )
    assert ids(log, query("acme")) == ["a2", "a1"]
    assert ids(log, query("beta")) == ["b2", "b1"]
    assert ids(log, query("gamma")) == []
    assert ids(log, query(None)) == ["b2", "a2", "b1", "a1"]
    assert ids(log, query(None, page=2, page_size=3)) == ["a1"]
    assert log.query(query(None, page_size=1)).total == 4


def test_window_is_inclusive_and_expired_records_are_hidden(audit_backend: AuditOpener) -> None:
    log = audit_backend(clock)
    log.append(record("old", created_at=T0 - 60 * DAY))
    log.append(record("edge", created_at=T0 - 10 * DAY))
    log.append(record("new", created_at=T0))
    log.append(record("gone", created_at=T0 - 5 * DAY, expires_at=T0 - 1))
    log.append(record("lapsing", created_at=T0 - 4 * DAY, expires_at=T0 + 10))
    assert ids(log, query(since=T0 - 10 * DAY, until=T0)) == ["new", "lapsing", "edge"]
    assert ids(log, query(since=T0 - 10 * DAY, until=T0 - 1)) == ["lapsing", "edge"]
    assert ids(log, query(None, since=T0 - 90 * DAY)) == ["new", "lapsing", "edge", "old"]
    assert ids(log, query(now=T0 + 10)) == ["new", "edge", "old"]
    # an expired record can no longer be settled
    late = audit_backend(lambda: T0 + 20)
    assert not late.settle(
        replace(
            record("lapsing", created_at=T0 - 4 * DAY, expires_at=T0 + 10),
            outcome=OK,
            status_code=200,
        )
    )


@pytest.mark.local_only(reason="DynamoDB's TTL deletes expired items itself")
def test_pruning_deletes_expired_records(audit_backend: AuditOpener) -> None:
    now = [T0]
    log = audit_backend(lambda: now[0])
    log.append(record("gone", expires_at=T0 + 5))
    log.append(record("kept", created_at=T0 + 1))
    assert isinstance(log, SqliteAuditLog)
    assert log.prune() == 0
    now[0] = T0 + 10
    assert log.prune() == 1
    assert ids(log, query(now=0.0)) == ["kept"]  # gone, not merely hidden


def test_filters(log: AuditLog) -> None:
    rows = [
        record("rm-ok", outcome=OK, status_code=200, request_id="q1", created_at=T0 - 5),
        record(
            "rm-404",
            outcome=ERROR,
            status_code=404,
            request_id="q2",
            user_id="bob",
            created_at=T0 - 4,
        ),
        record("mv-409", action="fs.mv", outcome=ERROR, status_code=409, created_at=T0 - 3),
        record(
            "sess",
            action="session.delete",
            outcome=OK,
            status_code=200,
            user_id="bob",
            created_at=T0 - 2,
        ),
        record("key", action="key.revoke", status_code=503, outcome=ERROR, created_at=T0 - 1),
        record("pending", action="watch.cancel", created_at=T0),
    ]
    for r in rows:
        log.append(r)
    assert ids(log, query(user_id="bob")) == ["sess", "rm-404"]
    assert ids(log, query(request_id="q2")) == ["rm-404"]
    assert ids(log, query(request_id="nope")) == []
    assert ids(log, query(actions=("fs.rm", "fs.mv"))) == ["mv-409", "rm-404", "rm-ok"]
    assert ids(log, query(api_types=("session", "key"))) == ["key", "sess"]
    st = parse_statuses
    assert ids(log, query(statuses=st(["success"]))) == ["sess", "rm-ok"]
    assert ids(log, query(statuses=st(["error"]))) == ["key", "mv-409", "rm-404"]
    assert ids(log, query(statuses=st(["4xx"]))) == ["mv-409", "rm-404"]
    assert ids(log, query(statuses=st(["404", "5xx"]))) == ["key", "rm-404"]
    assert ids(log, query(statuses=st(["pending"]))) == ["pending"]
    assert ids(log, query(statuses=st(["2xx"]), user_id="bob")) == ["sess"]
    page = log.query(query(statuses=st(["error"]), page_size=1))
    assert (page.total, page.succeeded, len(page.items)) == (3, 0, 1)


def test_any_mix_of_filters_matches_the_shared_rule(log: AuditLog) -> None:
    """Random records and queries: every adapter lists exactly what AuditQuery.matches
    selects, in the listing's order."""
    rng = random.Random(44)
    actions = ["fs.rm", "fs.mv", "memory.forget", "session.delete", "user.role"]
    written = []
    for i in range(60):
        status = rng.choice([0, 200, 200, 404, 409, 503])
        written.append(
            record(
                f"x{i:03d}",
                account_id=rng.choice(["acme", "beta"]),
                user_id=rng.choice(["alice", "bob"]),
                action=rng.choice(actions),
                request_id=rng.choice(["q1", "q2", None]),
                status_code=status,
                outcome=PENDING if status == 0 else OK if status < 400 else ERROR,
                created_at=T0 - rng.randrange(0, 90) * DAY + rng.choice([0, 0.5, 7]),
                expires_at=rng.choice([FAR, FAR, T0 - 1]),
            )
        )
    for r in written:
        log.append(r)
    for _ in range(25):
        q = query(
            rng.choice(["acme", "beta", None]),
            since=T0 - rng.randrange(30, 100) * DAY,
            until=T0 - rng.randrange(0, 30) * DAY,
            user_id=rng.choice([None, "alice"]),
            request_id=rng.choice([None, "q1"]),
            actions=tuple(rng.sample(actions, rng.randrange(0, 3))),
            statuses=parse_statuses(
                rng.sample(["ok", "error", "pending", "404"], rng.randrange(0, 3))
            ),
            page=rng.randrange(1, 3),
            page_size=rng.choice([3, 7]),
        )
        want = sorted((r for r in written if q.matches(r)), key=newest_first, reverse=True)
        got = log.query(q)
        assert got.total == len(want)
        assert got.succeeded == sum(1 for r in want if r.succeeded)
        assert [r.record_id for r in got.items] == [
            r.record_id for r in want[q.offset : q.offset + q.page_size]
        ]
