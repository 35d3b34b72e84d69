"""The audit trail service: an action is recorded before it runs and refused when that record
cannot be written; its outcome is settled afterwards without ever failing the action; the
listing's visibility and filters. Over a failing adapter and the local one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from skald.adapters.local.sqlite.audit_log import SqliteAuditLog
from skald.api.app import create_app
from skald.compose.composition import Composition
from skald.config import Settings
from skald.domain.access import call_context
from skald.domain.access.identity import Identity
from skald.domain.errors import (
    InvalidArgument,
    NotFound,
    PermissionDenied,
    Unavailable,
)
from skald.domain.ops.audit import AuditPage, AuditQuery, AuditRecord
from skald.domain.paths.uri import parse_uri
from skald.services.audit import AuditTrail
from tests.support.compose import given_services

ADA = Identity("acme", "ada", "admin", key_id="k-ada")
BOB = Identity("acme", "bob", "user")
ROOT = Identity("_root", "root", "root")
T0 = 1_700_000_000.0


class FailingLog:
    """An audit log whose writes fail (a full disk, DynamoDB throttling)."""

    def __init__(self, *, append: bool = True, settle: bool = True) -> None:
        self.fail_append = append
        self.fail_settle = settle
        self.appended: list[AuditRecord] = []
        self.settled: list[AuditRecord] = []

    def append(self, record: AuditRecord) -> None:
        if self.fail_append:
            raise OSError("disk full")
        self.appended.append(record)

    def settle(self, record: AuditRecord) -> bool:
        if self.fail_settle:
            raise OSError("disk full")
        self.settled.append(record)
        return True

    def query(self, query: AuditQuery) -> AuditPage:
        return AuditPage(0, 0, [])


@pytest.fixture
def log(tmp_path: Path) -> Iterator[SqliteAuditLog]:
    store = SqliteAuditLog(tmp_path / "state.db", clock=lambda: T0)
    yield store
    store.close()


def trail(log: Any) -> AuditTrail:
    ticks = iter(range(1000))  # each record a little later than the one before
    return AuditTrail(
        log,
        retention_days=400,
        clock=lambda: T0 - 1 + next(ticks) / 1000,
        status_of=lambda code: {"NOT_FOUND": 404}.get(code, 500),
    )


def only(log: SqliteAuditLog, **filters: Any) -> AuditRecord:
    [record] = log.query(AuditQuery(None, 0, T0 + 1, T0, **filters)).items
    return record


def test_an_action_that_cannot_be_recorded_is_not_done() -> None:
    ran = []
    with (
        pytest.raises(Unavailable) as refused,
        trail(FailingLog()).action(ADA, "fs.rm", "viking://resources/a.md"),
    ):
        ran.append(True)
    assert ran == []
    assert refused.value.code == "UNAVAILABLE"


def test_a_failed_settle_leaves_the_record_pending_and_the_action_done() -> None:
    failing = FailingLog(append=False, settle=True)
    with trail(failing).action(ADA, "fs.rm", "viking://resources/a.md") as note:
        note.detail["deleted"] = 1
    [pending] = failing.appended
    assert pending.outcome == "pending" and failing.settled == []


def test_outcomes_with_the_principal_and_the_request(log: SqliteAuditLog) -> None:
    token = call_context.request_meta.set(
        call_context.RequestMeta(
            "req-1", "10.0.0.9", method="DELETE", path="/api/v1/fs", started=None
        )
    )
    try:
        with trail(log).action(
            ADA, "fs.rm", "viking://resources/a.md", detail={"recursive": True}
        ) as note:
            note.detail["deleted"] = 3
        with pytest.raises(NotFound), trail(log).action(ADA, "fs.rm", "viking://x"):
            raise NotFound("File not found: viking://x", "viking://x")
        with pytest.raises(KeyError), trail(log).action(ADA, "fs.mv", "viking://y"):
            raise KeyError("secret internals")
    finally:
        call_context.request_meta.reset(token)
    records = log.query(AuditQuery(None, 0, T0 + 1, T0, request_id="req-1")).items
    by_target = {r.target: r for r in records}
    done = by_target["viking://resources/a.md"]
    assert (done.account_id, done.actor_account_id, done.user_id, done.role, done.key_id) == (
        "acme",
        "acme",
        "ada",
        "admin",
        "k-ada",
    )
    assert (done.source_ip, done.method, done.route) == ("10.0.0.9", "DELETE", "/api/v1/fs")
    assert (done.outcome, done.status_code, done.detail) == (
        "ok",
        200,
        {"recursive": True, "deleted": 3},
    )
    missing = by_target["viking://x"]
    assert (missing.outcome, missing.status_code, missing.error_code) == ("error", 404, "NOT_FOUND")
    assert missing.error_details == {"resource": "viking://x", "type": "file"}
    crashed = by_target["viking://y"]
    assert (crashed.outcome, crashed.error_code, crashed.error_message) == (
        "error",
        "INTERNAL",
        "Internal error",
    )  # nothing of the exception leaks
    assert crashed.expires_at == crashed.created_at + 400 * 86400


def test_root_acting_on_an_account_is_recorded_in_that_account(log: SqliteAuditLog) -> None:
    with trail(log).action(ROOT, "account.delete", "acme", account_id="acme"):
        pass
    record = only(log)
    assert (record.account_id, record.actor_account_id, record.role) == ("acme", "_root", "root")
    assert trail(log).listing(ADA).total == 1  # acme's admin sees what root did there


def test_unknown_actions_are_a_bug() -> None:
    with pytest.raises(ValueError), trail(FailingLog(append=False)).action(ADA, "fs.nuke", "x"):
        pass


def test_large_errors_and_targets_are_bounded(log: SqliteAuditLog) -> None:
    with pytest.raises(InvalidArgument), trail(log).action(ADA, "fs.rm", "v" * 5000):
        raise InvalidArgument("bad " * 1000, {"items": ["x" * 100] * 100})
    record = only(log)
    assert len(record.target) == 1024 and len(record.error_message or "") == 1024
    assert record.error_details == {"truncated": True, "size": pytest.approx(10_000, rel=0.2)}


def test_visibility_of_the_listing(log: SqliteAuditLog) -> None:
    t = trail(log)
    with t.action(ADA, "fs.rm", "viking://resources/a.md"):
        pass
    with t.action(Identity("beta", "bea", "admin"), "fs.rm", "viking://b"):
        pass
    assert [i.account_id for i in t.listing(ROOT).items] == ["beta", "acme"]
    assert t.listing(ROOT, account_id="beta").total == 1
    assert t.listing(Identity("acme", "x", "root", dev_mode=True)).total == 2
    assert [i.target for i in t.listing(ADA).items] == ["viking://resources/a.md"]
    assert t.listing(ADA, account_id="acme").total == 1
    with pytest.raises(PermissionDenied):
        t.listing(ADA, account_id="beta")
    with pytest.raises(PermissionDenied):
        t.listing(BOB)


@pytest.mark.parametrize(
    "kw",
    [
        {"page": 0},
        {"page_size": 0},
        {"page_size": 101},
        {"statuses": ["maybe"]},
        {"statuses": ["600"]},
        {"statuses": ["9xx"]},
        {"actions": ["fs.nuke"]},
        {"api_types": ["nope"]},
        {"since": "yesterday"},
        {"until": "2020-13-01"},
        {"since": "1d", "until": "2d"},
        {"user_id": "a/b"},
        {"account_id": "a b"},
        {"request_id": "r" * 201},
    ],
)
def test_bad_filters_are_invalid_arguments(log: SqliteAuditLog, kw: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgument):
        trail(log).listing(ROOT, **kw)


def test_the_window_is_the_retention_at_most(log: SqliteAuditLog) -> None:
    old = AuditRecord(
        "old",
        "acme",
        "acme",
        "ada",
        "admin",
        "fs.rm",
        "x",
        created_at=T0 - 500 * 86400,
        expires_at=T0 + 1,
    )
    log.append(old)
    assert trail(log).listing(ROOT).total == 0
    assert trail(log).listing(ROOT, since="2000-01-01").total == 0


# -- through the services and the HTTP edge, over a failing log ------------------------------


@pytest.fixture
def refusing(tmp_path: Path) -> Iterator[Composition]:
    settings = Settings(data_dir=tmp_path / "data", worker_threads=0)
    c, _ = given_services(settings, audit=FailingLog())
    yield c
    c.close()


def test_rm_is_refused_and_the_file_stays(refusing: Composition) -> None:
    alice = Identity("acme", "alice", "user")
    uri = parse_uri("viking://resources/keep.md", user_id="alice")
    refusing.fs.ensure_preset(alice)
    refusing.content.write(
        alice,
        uri,
        "keep me",
        mode="create",
        wait=False,
        processing_mode="vectors_only",
        tags=None,
        tag_mode="replace",
    )
    with pytest.raises(Unavailable):
        refusing.content.rm(alice, uri, recursive=False, wait=False)
    assert refusing.fs.read_bytes(alice, uri) == b"keep me"
    with pytest.raises(Unavailable):
        refusing.content.mv(alice, uri, parse_uri("viking://resources/moved.md", user_id="alice"))
    assert refusing.fs.read_bytes(alice, uri) == b"keep me"


def test_the_refusal_is_a_503_in_the_envelope(refusing: Composition) -> None:
    app = create_app(refusing)
    headers = {"X-OpenViking-Account": "acme", "X-OpenViking-User": "alice"}
    with TestClient(app, base_url="http://127.0.0.1") as http:
        written = http.post(
            "/api/v1/content/write",
            headers=headers,
            json={"uri": "viking://resources/k.md", "content": "x", "mode": "create"},
        )
        assert written.status_code == 200, written.text
        gone = http.delete("/api/v1/fs", headers=headers, params={"uri": "viking://resources/k.md"})
        assert gone.status_code == 503
        assert gone.json()["error"]["code"] == "UNAVAILABLE"
        assert (
            http.get(
                "/api/v1/content/read", headers=headers, params={"uri": "viking://resources/k.md"}
            ).json()["result"]
            == "x"
        )


def test_the_catalogue_routes_the_listing_to_a_function_that_may_read_it() -> None:
    from skald import catalog

    owner = catalog.route_owner("/api/v1/console/audit")
    assert owner is not None and owner.name == "content"
    assert not catalog.is_public("/api/v1/console/audit")  # behind the authorizer
    assert owner.uses[catalog.AUDIT] == catalog.READ
    # every HTTP function that runs an audited action may record it
    for name in ("sessions", "mcp"):
        assert catalog.function(name).uses[catalog.AUDIT] == catalog.WRITE
    assert catalog.AUDIT not in catalog.function("search").uses
