"""AccountStore conformance (accounts, users, API keys, deletion tombstones): every adapter,
through the port only."""

from __future__ import annotations

import threading
import traceback
from dataclasses import replace
from pathlib import Path

import pytest

from skald.ports import StateConflict, StateNotFound, StateStore
from skald.ports.accounts import (
    ACTIVE,
    DELETING,
    MAX_KEYS_PER_USER,
    Account,
    AccountStore,
    ApiKey,
    Deletion,
    User,
)
from tests.conformance.conftest import StateOpener

T0 = 1_700_000_000.0


def key(account: str, user: str, name: str, digest: str, **kw: object) -> ApiKey:
    return ApiKey(digest[:16], account, user, digest, name, T0, "acme/alice", **kw)  # type: ignore[arg-type]


def gone(task_id: str, requester: str = "acme/alice") -> Deletion:
    owner_account, _, owner_user = requester.partition("/")
    return Deletion(task_id, T0 + 50, requester, owner_account, owner_user)


H_ALICE = "a" * 64
H_BOB = "b" * 64


@pytest.fixture
def acme(state_store: StateStore) -> StateStore:
    state_store.create_account(Account("acme", created_at=T0, settings={"plan": "pro"}))
    state_store.create_user(
        User("acme", "alice", "admin", T0, "gen-alice"), key("acme", "alice", "default", H_ALICE)
    )
    state_store.create_user(
        User("acme", "bob", "user", T0 + 1, "gen-bob"), key("acme", "bob", "default", H_BOB)
    )
    return state_store


def test_implements_port(state_store: StateStore) -> None:
    assert isinstance(state_store, AccountStore)


# --------------------------------------------------------------------------------------------
# accounts


def test_account_create_get_list(state_store: StateStore) -> None:
    assert state_store.get_account("acme") is None
    assert state_store.list_accounts() == []
    state_store.create_account(Account("acme", created_at=T0, settings={"a": [1, {"b": "ü"}]}))
    state_store.create_account(Account("beta", created_at=T0 + 5))
    assert state_store.get_account("acme") == Account("acme", T0, {"a": [1, {"b": "ü"}]})
    assert [a.account_id for a in state_store.list_accounts()] == ["acme", "beta"]
    with pytest.raises(StateConflict):
        state_store.create_account(Account("acme", created_at=T0 + 1, settings={"x": 1}))
    got = state_store.get_account("acme")
    assert got is not None and got.settings == {"a": [1, {"b": "ü"}]}


def test_account_tombstone_then_finish(acme: StateStore) -> None:
    acme.create_account(Account("beta", created_at=T0))
    acme.create_user(User("beta", "alice", "user", T0, "g"), key("beta", "alice", "d", "c" * 64))
    tomb = acme.begin_account_deletion("acme", gone("t1", "_root/root"))
    assert tomb.status == DELETING and tomb.deletion == gone("t1", "_root/root")
    # seen as tombstoned everywhere: get, list, the keys of its users, the pending list
    got = acme.get_account("acme")
    assert got is not None and got.status == DELETING
    assert {a.account_id: a.status for a in acme.list_accounts()}["acme"] == DELETING
    resolved = acme.resolve_key(H_ALICE)
    assert resolved is not None and not resolved.active
    assert [(p.account_id, p.user_id, p.deletion.task_id) for p in acme.pending_deletions()] == [
        ("acme", None, "t1")
    ]
    # a second request finds the purge under way; the id cannot be created again meanwhile
    again = acme.begin_account_deletion("acme", gone("t2"))
    assert again.deletion is not None and again.deletion.task_id == "t1"
    with pytest.raises(StateConflict):
        acme.create_account(Account("acme", created_at=T0 + 9))
    with pytest.raises(StateNotFound):  # no new user in an account being deleted
        acme.create_user(User("acme", "carol", "user", T0, "g"))
    # only the purge named by the tombstone finishes it
    assert acme.finish_account_deletion("acme", "t2") is False
    assert acme.finish_account_deletion("acme", "t1") is True
    assert acme.finish_account_deletion("acme", "t1") is False
    assert acme.get_account("acme") is None
    assert acme.list_users("acme") == [] and acme.list_keys("acme") == []
    assert acme.resolve_key(H_ALICE) is None
    assert acme.pending_deletions() == []
    # other accounts untouched; the id is free again, empty
    other = acme.resolve_key("c" * 64)
    assert other is not None and other.active and other.user.account_id == "beta"
    acme.create_account(Account("acme", created_at=T0 + 10))
    assert acme.list_users("acme") == []


def test_replace_account_deletion(acme: StateStore) -> None:
    with pytest.raises(StateNotFound):
        acme.replace_account_deletion("acme", "t1", gone("t2"))
    acme.begin_account_deletion("acme", gone("t1"))
    with pytest.raises(StateConflict):
        acme.replace_account_deletion("acme", "nope", gone("t2"))
    replaced = acme.replace_account_deletion("acme", "t1", gone("t2"))
    assert replaced.deletion is not None and replaced.deletion.task_id == "t2"
    assert [p.deletion.task_id for p in acme.pending_deletions()] == ["t2"]
    assert acme.finish_account_deletion("acme", "t1") is False
    assert acme.finish_account_deletion("acme", "t2") is True
    with pytest.raises(StateNotFound):
        acme.begin_account_deletion("acme", gone("t3"))


def test_update_account_settings(acme: StateStore) -> None:
    plan = {"plan": "team", "limits": {"sessions": 3, "rate_per_s": None}}
    updated = acme.update_account_settings("acme", plan)
    assert updated == Account("acme", T0, plan)
    # read back everywhere the account is read: by id, in the listing, with a key
    assert acme.get_account("acme") == updated
    assert [a.settings for a in acme.list_accounts()] == [plan]
    found = acme.resolve_key(H_ALICE)
    assert found is not None and found.account.settings == plan
    assert acme.update_account_settings("acme", {}).settings == {}
    assert acme.get_account("acme") == Account("acme", T0, {})
    with pytest.raises(StateNotFound):
        acme.update_account_settings("nope", plan)
    assert acme.get_account("nope") is None
    acme.begin_account_deletion("acme", gone("t1"))
    with pytest.raises(StateNotFound):  # a tombstoned account keeps what it had
        acme.update_account_settings("acme", plan)
    got = acme.get_account("acme")
    assert got is not None and got.settings == {} and got.status == DELETING


# --------------------------------------------------------------------------------------------
# users


def test_user_create_get_list(acme: StateStore) -> None:
    assert acme.get_user("acme", "alice") == User("acme", "alice", "admin", T0, "gen-alice")
    assert [u.user_id for u in acme.list_users("acme")] == ["alice", "bob"]
    assert acme.get_user("acme", "carol") is None
    with pytest.raises(StateConflict):
        acme.create_user(User("acme", "alice", "user", T0 + 9, "x"))
    with pytest.raises(StateConflict):  # a key hash is unique across every account
        acme.create_user(User("acme", "carol", "user", T0, "x"), key("acme", "carol", "d", H_BOB))
    assert acme.get_user("acme", "carol") is None  # nothing half written
    with pytest.raises(StateNotFound):
        acme.create_user(User("ghost", "alice", "user", T0, "x"))


def test_user_tombstone_removes_keys_and_blocks_the_id(acme: StateStore) -> None:
    acme.add_key(key("acme", "bob", "ci", "d" * 64))
    tomb = acme.begin_user_deletion("acme", "bob", gone("t1"))
    assert tomb.status == DELETING and tomb.deletion is not None
    assert acme.resolve_key(H_BOB) is None and acme.resolve_key("d" * 64) is None
    assert acme.list_keys("acme", "bob") == []
    with pytest.raises(StateConflict):  # the id is not free while the purge runs
        acme.create_user(User("acme", "bob", "user", T0 + 9, "gen-2"))
    with pytest.raises(StateNotFound):
        acme.add_key(key("acme", "bob", "late", "e" * 64))
    with pytest.raises(StateNotFound):
        acme.set_user_role("acme", "bob", "admin")
    assert [(p.user_id, p.deletion.task_id) for p in acme.pending_deletions()] == [("bob", "t1")]
    assert acme.begin_user_deletion("acme", "bob", gone("t2")).deletion == gone("t1")
    with pytest.raises(StateConflict):
        acme.replace_user_deletion("acme", "bob", "other", gone("t2"))
    acme.replace_user_deletion("acme", "bob", "t1", gone("t2"))
    assert acme.finish_user_deletion("acme", "bob", "t1") is False
    assert acme.finish_user_deletion("acme", "bob", "t2") is True
    assert acme.get_user("acme", "bob") is None and acme.pending_deletions() == []
    # registered again: a new user, with a new generation and only its new key
    acme.create_user(
        User("acme", "bob", "user", T0 + 20, "gen-2"), key("acme", "bob", "default", "f" * 64)
    )
    again = acme.resolve_key("f" * 64)
    assert again is not None and again.active and again.user.generation == "gen-2"
    assert acme.resolve_key(H_BOB) is None
    alice = acme.resolve_key(H_ALICE)
    assert alice is not None and alice.active  # the others untouched
    with pytest.raises(StateNotFound):
        acme.begin_user_deletion("acme", "carol", gone("t3"))


def test_set_user_role(acme: StateStore) -> None:
    acme.set_user_role("acme", "bob", "admin")
    bob = acme.get_user("acme", "bob")
    assert bob is not None and bob.role == "admin"
    resolved = acme.resolve_key(H_BOB)
    assert resolved is not None and resolved.user.role == "admin"  # the next lookup sees it
    with pytest.raises(StateNotFound):
        acme.set_user_role("acme", "carol", "admin")
    with pytest.raises(StateNotFound):
        acme.set_user_role("ghost", "bob", "admin")


def test_same_user_id_in_two_accounts(acme: StateStore) -> None:
    acme.create_account(Account("beta", created_at=T0))
    acme.create_user(User("beta", "alice", "user", T0, "g"))
    acme.begin_user_deletion("beta", "alice", gone("t1"))
    alice = acme.get_user("acme", "alice")
    assert alice is not None and alice.status == "active"
    assert acme.resolve_key(H_ALICE) is not None


def test_concurrent_create_user_has_one_winner(state_store: StateStore) -> None:
    state_store.create_account(Account("acme", created_at=T0))
    n = 8
    barrier = threading.Barrier(n)
    wins: list[int] = []
    errors: list[BaseException] = []

    def attempt(i: int) -> None:
        barrier.wait()
        try:
            state_store.create_user(User("acme", "dup", f"role{i}", T0, f"g{i}"))
            wins.append(i)
        except StateConflict:
            pass
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, "".join(traceback.format_exception(errors[0])) if errors else ""
    assert len(wins) == 1
    user = state_store.get_user("acme", "dup")
    assert user is not None and user.role == f"role{wins[0]}"


# --------------------------------------------------------------------------------------------
# keys


def test_keys_add_list_resolve_delete(acme: StateStore) -> None:
    ci = replace(key("acme", "alice", "ci", "1" * 64, expires_at=T0 + 3600), created_at=T0 + 1)
    acme.add_key(ci)
    keys = acme.list_keys("acme", "alice")
    assert [(k.name, k.key_id) for k in keys] == [("default", H_ALICE[:16]), ("ci", "1" * 16)]
    assert keys[1] == ci
    assert {k.user_id for k in acme.list_keys("acme")} == {"alice", "bob"}
    resolved = acme.resolve_key("1" * 64)
    assert resolved is not None and resolved.key == ci
    assert (resolved.user.user_id, resolved.user.role, resolved.account.account_id) == (
        "alice",
        "admin",
        "acme",
    )
    assert acme.delete_key("acme", "alice", ci.key_id) is True
    assert acme.delete_key("acme", "alice", ci.key_id) is False
    assert acme.resolve_key("1" * 64) is None
    assert acme.resolve_key(H_ALICE) is not None  # the other key still works
    assert acme.resolve_key("0" * 64) is None and acme.resolve_key("") is None


def test_add_key_conflicts_and_limits(acme: StateStore) -> None:
    with pytest.raises(StateConflict):  # another user's hash
        acme.add_key(key("acme", "alice", "x", H_BOB))
    with pytest.raises(StateNotFound):
        acme.add_key(key("acme", "carol", "x", "2" * 64))
    for i in range(MAX_KEYS_PER_USER - 1):
        acme.add_key(key("acme", "alice", f"k{i}", f"{i:02d}".ljust(64, "9")))
    with pytest.raises(StateConflict):
        acme.add_key(key("acme", "alice", "one-too-many", "3" * 64))
    assert len(acme.list_keys("acme", "alice")) == MAX_KEYS_PER_USER
    # a tombstone still removes every one of them at once
    acme.begin_user_deletion("acme", "alice", gone("t1", "_root/root"))
    assert acme.list_keys("acme", "alice") == []
    assert acme.resolve_key("00".ljust(64, "9")) is None


def test_rotation_replaces_the_named_key_atomically(acme: StateStore) -> None:
    acme.add_key(key("acme", "bob", "ci", "4" * 64))
    acme.add_key(key("acme", "bob", "default", "5" * 64), replace_named="default")
    assert sorted(k.name for k in acme.list_keys("acme", "bob")) == ["ci", "default"]
    assert acme.resolve_key(H_BOB) is None
    assert acme.resolve_key("5" * 64) is not None and acme.resolve_key("4" * 64) is not None


def test_touch_key_records_last_use(acme: StateStore) -> None:
    resolved = acme.resolve_key(H_ALICE)
    assert resolved is not None and resolved.key.last_used_at is None
    acme.touch_key(resolved.key, T0 + 77)
    again = acme.resolve_key(H_ALICE)
    assert again is not None and again.key.last_used_at == T0 + 77
    acme.delete_key("acme", "alice", resolved.key.key_id)
    acme.touch_key(resolved.key, T0 + 99)  # a revoked key: nothing comes back
    assert acme.resolve_key(H_ALICE) is None
    assert acme.list_keys("acme", "alice") == []


def test_concurrent_key_changes_never_exceed_the_limit(acme: StateStore) -> None:
    n = MAX_KEYS_PER_USER + 4
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []

    def attempt(i: int) -> None:
        barrier.wait()
        try:
            acme.add_key(key("acme", "bob", f"k{i}", f"{i:03d}".ljust(64, "7")))
        except StateConflict:
            pass
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, "".join(traceback.format_exception(errors[0])) if errors else ""
    keys = acme.list_keys("acme", "bob")
    assert len(keys) == MAX_KEYS_PER_USER
    acme.begin_user_deletion("acme", "bob", gone("t1"))
    assert all(acme.resolve_key(k.key_hash) is None for k in keys)


def test_accounts_persist_across_instances(state_backend: StateOpener) -> None:
    first = state_backend()
    first.create_account(Account("acme", created_at=T0))
    first.create_user(User("acme", "alice", "admin", T0, "g"), key("acme", "alice", "d", "8" * 64))
    first.begin_user_deletion("acme", "alice", gone("t1"))
    second = state_backend()
    user = second.get_user("acme", "alice")
    assert user is not None and user.status == DELETING and user.deletion == gone("t1")
    assert replace(user, status=ACTIVE, deletion=None) == User("acme", "alice", "admin", T0, "g")


# --------------------------------------------------------------------------------------------
# stores written before several keys per user


def test_local_migration_keeps_each_users_key(tmp_path: Path) -> None:
    from skald.adapters.local.sqlite.statestore import STATE_MIGRATIONS, SqliteDb, SqliteStateStore

    path = tmp_path / "state.db"
    db = SqliteDb(path)
    db.ensure_schema("state", STATE_MIGRATIONS[:1])
    with db.write() as conn:
        conn.execute("INSERT INTO accounts (account_id, created_at) VALUES ('acme', ?)", (T0,))
        conn.execute(
            "INSERT INTO users (account_id, user_id, role, created_at, key_hash)"
            " VALUES ('acme', 'alice', 'admin', ?, ?)",
            (T0, H_ALICE),
        )
    db.close()
    store = SqliteStateStore(path)
    resolved = store.resolve_key(H_ALICE)
    assert resolved is not None and resolved.active
    assert (resolved.key.name, resolved.key.key_id) == ("default", H_ALICE[:16])
    assert resolved.user.generation is None  # older than generations: jobs are not checked
    store.add_key(key("acme", "alice", "default", "9" * 64), replace_named="default")
    assert store.resolve_key(H_ALICE) is None
    store.close()


def test_dynamodb_user_items_with_one_key_still_resolve(
    state_backend: StateOpener, request: pytest.FixtureRequest
) -> None:
    if request.node.callspec.params.get("state_backend") != "dynamodb":
        pytest.skip("the item layout of the DynamoDB adapter")
    store = state_backend()
    table = store._t  # type: ignore[attr-defined]
    store.create_account(Account("acme", created_at=T0))
    table.client.put_item(
        TableName=table.name,
        Item={
            "pk": {"S": "ACCT#acme"},
            "sk": {"S": "USER#alice"},
            "account_id": {"S": "acme"},
            "user_id": {"S": "alice"},
            "role": {"S": "admin"},
            "created_at": {"N": str(T0)},
            "key_hash": {"S": H_ALICE},
        },
    )
    table.client.put_item(
        TableName=table.name,
        Item={
            "pk": {"S": f"KEY#{H_ALICE}"},
            "sk": {"S": "META"},
            "account_id": {"S": "acme"},
            "user_id": {"S": "alice"},
        },
    )
    resolved = store.resolve_key(H_ALICE)
    assert resolved is not None and resolved.active and resolved.key.name == "default"
    assert [k.key_id for k in store.list_keys("acme", "alice")] == [H_ALICE[:16]]
    store.add_key(key("acme", "alice", "ci", "6" * 64))
    assert len(store.list_keys("acme", "alice")) == 2
    store.begin_user_deletion("acme", "alice", gone("t1"))
    assert store.resolve_key(H_ALICE) is None and store.resolve_key("6" * 64) is None
    assert table.get(f"KEY#{H_ALICE}", "META") is None
