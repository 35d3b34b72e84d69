"""Tenant safety through openviking-sdk and plain HTTP against `skald serve` in api_key mode:
removing a user or an account really removes (a tombstone at once, a purge that finishes, even
after kill -9), keys that can be rotated, revoked and expire, roles that only promote, and no
key in anything the server writes."""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openviking_sdk import SyncHTTPClient
from openviking_sdk.errors import InvalidArgumentError, NotFoundError, UnauthenticatedError

from skald.services.tenancy.keys import hash_key
from tests.api.conftest import ROOT_KEY, make_client
from tests.support.server import SkaldServer
from tests.support.tenant_stores import local_leftovers, nothing_left

SECRET = "Bob keeps the launch codes under the third stair"


def _account() -> str:
    return "acme-" + uuid.uuid4().hex[:8]


def admin(
    url: str, path: str, key: str, method: str = "GET", body: dict[str, Any] | None = None
) -> httpx.Response:
    return httpx.request(
        method, f"{url}/api/v1/admin{path}", json=body, headers={"X-API-Key": key}, timeout=60
    )


def wait_task(url: str, key: str, task_id: str, timeout_s: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        task = httpx.get(
            f"{url}/api/v1/tasks/{task_id}", headers={"X-API-Key": key}, timeout=30
        ).json()["result"]
        if task["status"] in ("completed", "failed", "cancelled"):
            return dict(task)
        assert time.monotonic() < deadline, task
        time.sleep(0.1)


def populate(url: str, key: str, user: str) -> None:
    """A user's private files, a committed session (archives, memories) and an upload."""
    c = make_client(url, api_key=key)
    try:
        c.write(f"viking://user/{user}/resources/secret.md", f"# Secret\n\n{SECRET}.\n", wait=True)
        session = c.create_session()["session_id"]
        c.add_message(session, "user", f"Remember: {SECRET}.")
        c.add_message(session, "assistant", "Noted.")
        commit = c.commit_session(session)
        if commit.get("task_id"):
            wait_task(url, key, commit["task_id"])
        httpx.post(
            f"{url}/api/v1/resources/temp_upload",
            headers={"X-API-Key": key},
            files={"file": ("note.md", b"an unused upload")},
            timeout=30,
        )
    finally:
        c.close()


# --------------------------------------------------------------------------------------------
# finding 1: a removed user's data does not pass to the next holder of the id


def test_a_new_user_of_a_removed_id_starts_empty(key_server: SkaldServer) -> None:
    url, account = key_server.url, _account()
    boss_key = admin(
        url, "/accounts", ROOT_KEY, "POST", {"account_id": account, "admin_user_id": "alice"}
    ).json()["result"]["user_key"]
    bob_key = admin(url, f"/accounts/{account}/users", boss_key, "POST", {"user_id": "bob"}).json()[
        "result"
    ]["user_key"]
    populate(url, bob_key, "bob")

    removed = admin(url, f"/accounts/{account}/users/bob", boss_key, "DELETE")
    assert removed.status_code == 202, removed.text
    result = removed.json()["result"]
    assert result["status"] == "deleting" and result["task_id"]
    # the key stops at once, before the purge has run
    gone = httpx.get(
        f"{url}/api/v1/fs/ls",
        params={"uri": "viking://resources"},
        headers={"X-API-Key": bob_key},
        timeout=30,
    )
    assert gone.status_code == 401
    task = wait_task(url, boss_key, result["task_id"])
    assert task["status"] == "completed", task
    assert task["result"]["deleted"] is True
    removed_counts = task["result"]["removed"]
    assert removed_counts["blobs"] > 0 and removed_counts["sessions"] == 1
    assert removed_counts["uploads"] == 1 and removed_counts["index_records"] > 0
    # a DELETE repeated after the purge: the user is gone
    assert admin(url, f"/accounts/{account}/users/bob", boss_key, "DELETE").status_code == 404

    new_bob = admin(url, f"/accounts/{account}/users", boss_key, "POST", {"user_id": "bob"}).json()[
        "result"
    ]["user_key"]
    c = make_client(url, api_key=new_bob)
    try:
        with pytest.raises(NotFoundError):
            c.read("viking://user/bob/resources/secret.md")
        assert c.list_sessions() == []
        found = httpx.post(
            f"{url}/api/v1/search/find",
            headers={"X-API-Key": new_bob},
            json={"query": "launch codes third stair", "target_uri": "viking://user/bob"},
            timeout=60,
        )
        assert found.status_code == 200 and "launch codes" not in found.text
        assert (
            httpx.get(f"{url}/api/v1/tasks", headers={"X-API-Key": new_bob}, timeout=30).json()[
                "result"
            ]
            == []
        )
    finally:
        c.close()
    # and the admin, who sees every user space, finds nothing of the old bob either
    boss = make_client(url, api_key=boss_key)
    try:
        hits = boss.grep("viking://user/bob", "launch codes")
        assert hits.get("matches", []) == []
    finally:
        boss.close()


# --------------------------------------------------------------------------------------------
# finding 2: deleting an account answers 202 with a task, can be repeated, and finishes


def test_account_deletion_answers_a_task_and_can_be_repeated(key_server: SkaldServer) -> None:
    url, account = key_server.url, _account()
    boss_key = admin(
        url, "/accounts", ROOT_KEY, "POST", {"account_id": account, "admin_user_id": "alice"}
    ).json()["result"]["user_key"]
    populate(url, boss_key, "alice")
    first = admin(url, f"/accounts/{account}", ROOT_KEY, "DELETE")
    assert first.status_code == 202, first.text
    task_id = first.json()["result"]["task_id"]
    assert first.json()["result"]["deleted"] is True  # OpenViking's field, kept
    second = admin(url, f"/accounts/{account}", ROOT_KEY, "DELETE")
    # while the purge runs the same task answers; once it has finished the account is gone
    assert (second.status_code, (second.json().get("result") or {}).get("task_id")) in (
        (202, task_id),
        (404, None),
    )
    # the id cannot be taken while the purge runs
    again = admin(url, "/accounts", ROOT_KEY, "POST", {"account_id": account, "admin_user_id": "x"})
    assert again.status_code in (409, 200)
    if again.status_code == 409:
        assert "being deleted" in again.json()["error"]["message"]
        assert wait_task(url, ROOT_KEY, task_id)["status"] == "completed"
        again = admin(
            url, "/accounts", ROOT_KEY, "POST", {"account_id": account, "admin_user_id": "x"}
        )
        assert again.status_code == 200
    assert wait_task(url, ROOT_KEY, task_id)["status"] == "completed"
    fresh = make_client(url, api_key=again.json()["result"]["user_key"])
    try:
        assert [e["name"] for e in fresh.ls("viking://resources")] == []
        assert fresh.list_sessions() == []
    finally:
        fresh.close()


@pytest.fixture
def crashing_server(tmp_path: Path) -> Iterator[SkaldServer]:
    """A server that dies like kill -9 as its first purge has removed the blobs."""
    server = SkaldServer(
        tmp_path / "data",
        root_api_key=ROOT_KEY,
        env={"SKALD_FAULT_POINTS": "purge.after_blobs=exit"},
    )
    server.start()
    yield server
    server.stop()


def test_a_purge_killed_half_way_finishes_after_a_restart(crashing_server: SkaldServer) -> None:
    url, account = crashing_server.url, "doomed"
    boss_key = admin(
        url, "/accounts", ROOT_KEY, "POST", {"account_id": account, "admin_user_id": "alice"}
    ).json()["result"]["user_key"]
    bob_key = admin(url, f"/accounts/{account}/users", boss_key, "POST", {"user_id": "bob"}).json()[
        "result"
    ]["user_key"]
    populate(url, bob_key, "bob")
    populate(url, boss_key, "alice")
    data_dir = crashing_server.data_dir
    before = local_leftovers(data_dir, account, "bob")
    assert before["blobs"] and before["sessions"] and before["api_keys"]
    assert before["index_records"]

    removed = admin(url, f"/accounts/{account}/users/bob", boss_key, "DELETE")
    assert removed.status_code == 202  # answered; the purge runs on a worker thread
    proc = crashing_server.proc
    assert proc is not None
    assert proc.wait(timeout=30) == 137  # os._exit at the crash point: no cleanup ran
    half = local_leftovers(data_dir, account, "bob")
    assert not half["blobs"] and half["users"], half  # cut between two steps

    crashing_server.extra_env = {}
    crashing_server.start()
    deadline = time.monotonic() + 60
    while (rows := local_leftovers(data_dir, account, "bob"))["users"]:
        assert time.monotonic() < deadline, rows
        time.sleep(0.2)
    crashing_server.stop()
    left = local_leftovers(data_dir, account, "bob")
    assert nothing_left(left), left
    assert local_leftovers(data_dir, account, "alice")["blobs"]  # the others untouched


def test_a_whole_account_leaves_nothing_in_any_store(tmp_path: Path) -> None:
    server = SkaldServer(tmp_path / "data", root_api_key=ROOT_KEY)
    server.start()
    try:
        url, account = server.url, "gone"
        boss_key = admin(
            url, "/accounts", ROOT_KEY, "POST", {"account_id": account, "admin_user_id": "alice"}
        ).json()["result"]["user_key"]
        populate(url, boss_key, "alice")
        c = make_client(url, api_key=boss_key)
        c.write("viking://resources/team/plan.md", "# Plan\n\nShared plan.\n", wait=True)
        c.close()
        deleted = admin(url, f"/accounts/{account}", ROOT_KEY, "DELETE")
        assert deleted.status_code == 202
        assert (
            wait_task(url, ROOT_KEY, deleted.json()["result"]["task_id"])["status"] == "completed"
        )
    finally:
        server.stop()
    left = local_leftovers(server.data_dir, "gone")
    assert nothing_left(left), left


# --------------------------------------------------------------------------------------------
# finding 3: keys


def test_named_keys_rotate_without_a_gap(key_server: SkaldServer) -> None:
    url, account = key_server.url, _account()
    boss_key = admin(
        url, "/accounts", ROOT_KEY, "POST", {"account_id": account, "admin_user_id": "alice"}
    ).json()["result"]["user_key"]
    bob_key = admin(url, f"/accounts/{account}/users", boss_key, "POST", {"user_id": "bob"}).json()[
        "result"
    ]["user_key"]
    keys = f"/accounts/{account}/users/bob/keys"
    # the user mints a second key for themself, with an expiry
    made = admin(url, keys, bob_key, "POST", {"name": "ci", "expires_in_s": 3600})
    assert made.status_code == 200, made.text
    ci = made.json()["result"]
    assert ci["user_key"] and ci["name"] == "ci" and ci["expires_at"]
    assert ci["created_by"] == f"{account}/bob"
    both = {k["name"]: k for k in admin(url, keys, boss_key).json()["result"]}
    assert set(both) == {"default", "ci"}
    assert all("user_key" not in k and "key_hash" not in k for k in both.values())
    # both keys work; the list shows their last use
    for key in (bob_key, ci["user_key"]):
        assert (
            httpx.get(
                f"{url}/api/v1/fs/ls",
                params={"uri": "viking://resources"},
                headers={"X-API-Key": key},
                timeout=30,
            ).status_code
            == 200
        )
    listed = {k["name"]: k for k in admin(url, keys, boss_key).json()["result"]}
    assert listed["default"]["last_used_at"] and listed["ci"]["last_used_at"]
    # rotation: the old key is revoked once the new one is in place, effective at once
    revoked = admin(url, f"{keys}/{listed['default']['key_id']}", bob_key, "DELETE")
    assert revoked.status_code == 200 and revoked.json()["result"]["revoked"] is True
    assert (
        httpx.get(
            f"{url}/api/v1/fs/ls",
            params={"uri": "viking://resources"},
            headers={"X-API-Key": bob_key},
            timeout=30,
        ).status_code
        == 401
    )
    assert (
        httpx.get(
            f"{url}/api/v1/fs/ls",
            params={"uri": "viking://resources"},
            headers={"X-API-Key": ci["user_key"]},
            timeout=30,
        ).status_code
        == 200
    )
    # regenerate keeps OpenViking's meaning: a new default key; named keys are left alone
    regen = make_client(url, api_key=boss_key).admin_regenerate_key(account, "bob")
    assert (
        httpx.get(
            f"{url}/api/v1/fs/ls",
            params={"uri": "viking://resources"},
            headers={"X-API-Key": regen["user_key"]},
            timeout=30,
        ).status_code
        == 200
    )
    assert {k["name"] for k in admin(url, keys, boss_key).json()["result"]} == {"default", "ci"}
    # bad input: a clear 4xx, nothing written
    for body, status in (
        ({"name": ""}, 400),
        ({"name": "default"}, 400),
        ({"name": "x", "expires_in_s": 5}, 400),
        ({"name": "ci"}, 409),
        ({"name": "x", "bogus": 1}, 400),
    ):
        answer = admin(url, keys, boss_key, "POST", body)
        assert answer.status_code == status, (body, answer.text)
    assert len(admin(url, keys, boss_key).json()["result"]) == 2
    assert admin(url, f"{keys}/nope", boss_key, "DELETE").status_code == 404
    # another user may not touch bob's keys
    carol = admin(url, f"/accounts/{account}/users", boss_key, "POST", {"user_id": "carol"}).json()[
        "result"
    ]["user_key"]
    assert admin(url, keys, carol).status_code == 403


def test_roles_only_promote(key_server: SkaldServer) -> None:
    url, account = key_server.url, _account()
    boss_key = admin(
        url, "/accounts", ROOT_KEY, "POST", {"account_id": account, "admin_user_id": "alice"}
    ).json()["result"]["user_key"]
    boss = make_client(url, api_key=boss_key)
    try:
        boss.admin_register_user(account, "bob", "admin")
        with pytest.raises(InvalidArgumentError, match="promotion to admin"):
            boss.admin_set_role(account, "bob", "user")  # no demotion of another admin
        assert boss.admin_get_user(account, "bob")["role"] == "admin"
        boss.admin_register_user(account, "carol", "user")
        boss.admin_set_role(account, "carol", "admin")
        assert boss.admin_get_user(account, "carol")["role"] == "admin"
    finally:
        boss.close()


def test_keys_never_appear_in_anything_the_server_writes(tmp_path: Path) -> None:
    """Every key minted or presented in a run, looked for in the server's log, its data
    dir, its metrics, task results and error answers."""
    server = SkaldServer(tmp_path / "data", root_api_key=ROOT_KEY)
    server.start()
    seen: list[str] = []  # every body the server answered
    minted: list[str] = []
    try:
        url = server.url

        def call(
            path: str, key: str, method: str = "GET", body: dict[str, Any] | None = None
        ) -> dict[str, Any]:
            answer = admin(url, path, key, method, body)
            seen.append(answer.text)
            return dict(answer.json())

        boss = call(
            "/accounts", ROOT_KEY, "POST", {"account_id": "keys", "admin_user_id": "alice"}
        )["result"]["user_key"]
        bob = call("/accounts/keys/users", boss, "POST", {"user_id": "bob"})["result"]["user_key"]
        ci = call("/accounts/keys/users/bob/keys", bob, "POST", {"name": "ci"})["result"]
        regen = call("/accounts/keys/users/bob/key", boss, "POST", {})["result"]["user_key"]
        minted += [boss, bob, ci["user_key"], regen]
        populate(url, regen, "bob")
        for key in minted:  # a revoked key, a wrong one, good ones: errors and successes
            seen.append(
                httpx.get(
                    f"{url}/api/v1/fs/ls",
                    params={"uri": "viking://"},
                    headers={"X-API-Key": key},
                    timeout=30,
                ).text
            )
            seen.append(
                httpx.get(
                    f"{url}/api/v1/tasks", headers={"Authorization": f"Bearer {key}"}, timeout=30
                ).text
            )
        seen.append(
            httpx.get(f"{url}/api/v1/fs/ls", headers={"X-API-Key": bob + "x"}, timeout=30).text
        )
        seen.append(httpx.get(f"{url}/metrics", timeout=30).text)
        call(f"/accounts/keys/users/bob/keys/{ci['key_id']}", bob, "DELETE")
        removed = call("/accounts/keys/users/bob", boss, "DELETE")["result"]
        seen.append(str(wait_task(url, boss, removed["task_id"])))
    finally:
        server.stop()
    secrets = [k.split(".")[2] for k in minted] + [ROOT_KEY]
    written = [server.log_path.read_bytes()] + [
        p.read_bytes() for p in server.data_dir.rglob("*") if p.is_file()
    ]
    for secret in secrets:
        assert not any(secret.encode() in blob for blob in written), secret[:8]
        # only the answers that minted a key show it (once); nothing else does
        assert not any(secret in text for text in seen[4:]), secret[:8]


def test_the_server_stops_cleanly_with_purges_queued(tmp_path: Path) -> None:
    """A purge queued when the server stops (SIGTERM) runs once it is back."""
    server = SkaldServer(
        tmp_path / "data", root_api_key=ROOT_KEY, env={"SKALD_WORKER_THREADS": "0"}
    )  # nothing drains the queue
    server.start()
    try:
        url = server.url
        boss = admin(
            url, "/accounts", ROOT_KEY, "POST", {"account_id": "later", "admin_user_id": "alice"}
        ).json()["result"]["user_key"]
        admin(url, "/accounts/later/users", boss, "POST", {"user_id": "bob"})
        removed = admin(url, "/accounts/later/users/bob", boss, "DELETE")
        task_id = removed.json()["result"]["task_id"]
        assert (
            httpx.get(
                f"{url}/api/v1/tasks/{task_id}", headers={"X-API-Key": boss}, timeout=30
            ).json()["result"]["status"]
            == "pending"
        )
        assert server.proc is not None
        server.proc.send_signal(signal.SIGTERM)
        server.proc.wait(timeout=30)
        server.proc = None
        server.extra_env = {}
        server.start()
        url = server.url
        assert wait_task(url, boss, task_id)["status"] == "completed"
        assert admin(url, "/accounts/later/users/bob", boss).status_code == 404
    finally:
        server.stop()


def test_unauthenticated_after_removal_even_with_a_bearer_header(key_server: SkaldServer) -> None:
    url, account = key_server.url, _account()
    boss_key = admin(
        url, "/accounts", ROOT_KEY, "POST", {"account_id": account, "admin_user_id": "alice"}
    ).json()["result"]["user_key"]
    bob = admin(url, f"/accounts/{account}/users", boss_key, "POST", {"user_id": "bob"}).json()[
        "result"
    ]["user_key"]
    admin(url, f"/accounts/{account}/users/bob", boss_key, "DELETE")
    client = SyncHTTPClient(url=url, api_key=bob, timeout=30)
    with pytest.raises(UnauthenticatedError):
        client.initialize()
        client.ls("viking://resources")


def test_admin_and_key_actions_are_audited_refusals_included(key_server: SkaldServer) -> None:
    url, account = key_server.url, _account()
    boss_key = admin(
        url, "/accounts", ROOT_KEY, "POST", {"account_id": account, "admin_user_id": "alice"}
    ).json()["result"]["user_key"]
    bob_key = admin(url, f"/accounts/{account}/users", boss_key, "POST", {"user_id": "bob"}).json()[
        "result"
    ]["user_key"]
    made = admin(
        url, f"/accounts/{account}/users/bob/keys", bob_key, "POST", {"name": "ci"}
    ).json()["result"]
    admin(url, f"/accounts/{account}/users/bob/keys/{made['key_id']}", bob_key, "DELETE")
    assert (
        admin(
            url, f"/accounts/{account}/users/bob/role", boss_key, "PUT", {"role": "user"}
        ).status_code
        == 400
    )
    assert (
        admin(
            url, f"/accounts/{account}/users", bob_key, "POST", {"user_id": "mallory"}
        ).status_code
        == 403
    )  # refused, and recorded
    admin(url, f"/accounts/{account}/users/bob", boss_key, "DELETE")
    trail = httpx.get(
        f"{url}/api/v1/console/audit",
        headers={"X-API-Key": boss_key},
        params={"api_type": "admin,key", "page_size": 100},
        timeout=30,
    )
    items = {(i["action"], i["outcome"], i["user_id"]) for i in trail.json()["result"]["items"]}
    assert {
        ("account.create", "ok", "root"),
        ("user.register", "ok", "alice"),
        ("key.create", "ok", "bob"),
        ("key.revoke", "ok", "bob"),
        ("user.role", "error", "alice"),
        ("user.register", "error", "bob"),
        ("user.remove", "ok", "alice"),
    } <= items, items
    record = next(i for i in trail.json()["result"]["items"] if i["action"] == "key.create")
    assert record["detail"]["key_id"] == made["key_id"]  # the key's public id, never the key
    assert record["key_id"] == hash_key(bob_key)[:16]  # the principal's key, by its id
    assert made["user_key"] not in trail.text and bob_key not in trail.text
