"""api_key mode: hashed keys, roles, root key scope, and no crossing between accounts."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openviking_sdk import SyncHTTPClient
from openviking_sdk.errors import (
    NotFoundError,
    OpenVikingError,
    PermissionDeniedError,
    UnauthenticatedError,
)

from tests.api.conftest import ROOT_KEY, make_client
from tests.support.server import SkaldServer


@pytest.fixture
def root(key_server: SkaldServer) -> Iterator[SyncHTTPClient]:
    c = make_client(key_server.url, api_key=ROOT_KEY)
    yield c
    c.close()


def new_account(root: SyncHTTPClient) -> tuple[str, str]:
    account = "acme-" + uuid.uuid4().hex[:8]
    res = root.admin_create_account(account, "boss")
    return account, res["user_key"]


def test_admin_lifecycle(root: SyncHTTPClient, key_server: SkaldServer) -> None:
    account, boss_key = new_account(root)
    assert account in [a["account_id"] for a in root.admin_list_accounts()]
    assert root.admin_get_account(account)["account_id"] == account
    boss = make_client(key_server.url, api_key=boss_key)
    assert boss_key.count(".") == 2 and len(boss_key.split(".")[2]) == 64
    bob = boss.admin_register_user(account, "bob", "user")
    assert bob["role"] == "user" and bob["user_key"]
    users = {u["user_id"]: u["role"] for u in boss.admin_list_users(account)}
    assert users == {"boss": "admin", "bob": "user"}
    boss.admin_set_role(account, "bob", "admin")
    assert boss.admin_get_user(account, "bob")["role"] == "admin"
    old_key = bob["user_key"]
    new_key = boss.admin_regenerate_key(account, "bob")["user_key"]
    assert new_key != old_key
    with pytest.raises(UnauthenticatedError):
        make_client(key_server.url, api_key=old_key).ls("viking://resources")
    bob_client = make_client(key_server.url, api_key=new_key)
    assert bob_client.ls("viking://~/")  # the new key works
    boss.admin_remove_user(account, "bob")
    with pytest.raises(UnauthenticatedError):
        bob_client.ls("viking://resources")
    with pytest.raises(PermissionDeniedError):
        boss.admin_create_account("other-" + uuid.uuid4().hex[:6], "x")
    deleted = root.admin_delete_account(account)
    assert deleted["status"] == "deleting" and deleted["deleted"] is True
    with pytest.raises(UnauthenticatedError):
        boss.ls("viking://resources")
    # tombstoned until its purge has run, then gone
    deadline = time.monotonic() + 60
    while root.get_task(deleted["task_id"])["status"] != "completed":
        assert time.monotonic() < deadline, root.get_task(deleted["task_id"])
        time.sleep(0.1)
    with pytest.raises(NotFoundError):
        root.admin_get_account(account)


def test_keys_are_stored_hashed(root: SyncHTTPClient, key_server: SkaldServer) -> None:
    _, key = new_account(root)
    secret = key.split(".")[2].encode()
    for path in key_server.data_dir.rglob("*"):
        if path.is_file():
            assert secret not in path.read_bytes(), path


def test_missing_and_wrong_keys(key_server: SkaldServer) -> None:
    resp = httpx.get(key_server.url + "/api/v1/fs/ls", params={"uri": "viking://resources"})
    assert resp.status_code == 401
    assert resp.json()["error"]["message"] == "Missing API Key when resolving identity."
    resp = httpx.get(
        key_server.url + "/api/v1/fs/ls",
        params={"uri": "viking://resources"},
        headers={"X-API-Key": "nope"},
    )
    assert resp.status_code == 401 and resp.json()["error"]["code"] == "UNAUTHENTICATED"
    resp = httpx.get(
        key_server.url + "/api/v1/fs/ls",
        params={"uri": "viking://resources"},
        headers={"Authorization": "Bearer nope"},
    )
    assert resp.status_code == 401
    assert httpx.get(key_server.url + "/health").json()["auth_mode"] == "api_key"


def test_root_key_cannot_reach_data(root: SyncHTTPClient, key_server: SkaldServer) -> None:
    with pytest.raises(PermissionDeniedError):
        root.ls("viking://resources")
    with pytest.raises(PermissionDeniedError):
        root.write("viking://resources/x.md", "x")
    resp = httpx.post(key_server.url + "/api/v1/system/wait", headers={"X-API-Key": ROOT_KEY})
    assert resp.status_code == 200
    resp = httpx.get(
        key_server.url + "/api/v1/system/status", headers={"Authorization": f"Bearer {ROOT_KEY}"}
    )
    assert resp.json()["result"]["initialized"] is True


def test_accounts_are_isolated(root: SyncHTTPClient, key_server: SkaldServer) -> None:
    a_acc, a_key = new_account(root)
    b_acc, b_key = new_account(root)
    a = make_client(key_server.url, api_key=a_key)
    b = make_client(key_server.url, api_key=b_key)
    a.write("viking://resources/secret/plan.md", "the plan of A", wait=True)
    res = a.write("viking://~/memories/note.md", "A private", wait=True)
    # identity headers are ignored in api_key mode
    spoof = make_client(key_server.url, api_key=b_key, account=a_acc, user="boss")
    for c in (b, spoof):
        with pytest.raises(NotFoundError):
            c.read("viking://resources/secret/plan.md")
        with pytest.raises(NotFoundError):
            c.stat("viking://resources/secret")
        assert "secret" not in [e["name"] for e in c.ls("viking://resources")]
        with pytest.raises(NotFoundError):
            c.mv("viking://resources/secret", "viking://resources/stolen")
        with pytest.raises(NotFoundError):
            c.rm("viking://resources/secret", recursive=True)
        assert c.get_task(res["task_id"]) is None
        hits = c.find("the plan of A", limit=20)
        assert all("secret" not in h["uri"] for h in hits["resources"] + hits["memories"])
        assert c.grep("viking://resources", "plan")["count"] == 0
        assert c.glob("**/*.md", uri="viking://resources")["matches"] == []
    with pytest.raises(PermissionDeniedError):
        b.admin_list_users(a_acc)
    assert a.read("viking://resources/secret/plan.md") == "the plan of A"


def test_users_of_one_account_keep_their_spaces(
    root: SyncHTTPClient, key_server: SkaldServer
) -> None:
    account, boss_key = new_account(root)
    boss = make_client(key_server.url, api_key=boss_key)
    carol = make_client(
        key_server.url, api_key=boss.admin_register_user(account, "carol", "user")["user_key"]
    )
    dave = make_client(
        key_server.url, api_key=boss.admin_register_user(account, "dave", "user")["user_key"]
    )
    carol.write("viking://~/memories/diary.md", "carol's diary")
    with pytest.raises(PermissionDeniedError):
        dave.read("viking://user/carol/memories/diary.md")
    assert [e["name"] for e in dave.ls("viking://user")] == ["dave"]
    carol.write("viking://resources/shared.md", "for everyone")
    assert dave.read("viking://resources/shared.md") == "for everyone"


def test_actor_peer_header_is_validated(key_server: SkaldServer, root: SyncHTTPClient) -> None:
    _, key = new_account(root)
    resp = httpx.get(
        key_server.url + "/api/v1/fs/ls",
        params={"uri": "viking://~/"},
        headers={"X-API-Key": key, "X-OpenViking-Actor-Peer": "a/b"},
    )
    assert resp.status_code == 400


def test_bad_admin_input(root: SyncHTTPClient) -> None:
    for bad in ["_system", "a/b", "..", "x" * 300, "a@b@c"]:
        with pytest.raises(OpenVikingError) as exc:
            root.admin_create_account(bad, "admin")
        assert exc.value.code == "INVALID_ARGUMENT"
    account, _ = new_account(root)
    with pytest.raises(OpenVikingError) as exc:
        root.admin_create_account(account, "admin")
    assert exc.value.code == "ALREADY_EXISTS"
    with pytest.raises(OpenVikingError):
        root.admin_register_user(account, "x", "superuser")


def test_admin_cli_over_http(key_server: SkaldServer) -> None:
    import json
    import subprocess
    import sys

    account = "cli-" + uuid.uuid4().hex[:6]
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "skald.cli",
            "admin",
            "--url",
            key_server.url,
            "--api-key",
            ROOT_KEY,
            "create-account",
            account,
            "--admin-user",
            "ops",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    key = json.loads(out.stdout)["user_key"]
    c = make_client(key_server.url, api_key=key)
    assert c.admin_list_users(account)[0]["user_id"] == "ops"
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "skald.cli",
            "admin",
            "--url",
            key_server.url,
            "--api-key",
            "wrong",
            "list-accounts",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "UNAUTHENTICATED" in bad.stderr


def test_admin_cli_on_a_data_dir(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "skald.cli",
            "admin",
            "--data-dir",
            str(tmp_path),
            "create-account",
            "offline",
            "--admin-user",
            "a",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["account_id"] == "offline"
    server = SkaldServer(tmp_path, root_api_key="r")
    server.start()
    try:
        c = make_client(server.url, api_key=json.loads(out.stdout)["user_key"])
        assert c.ls("viking://~/")
    finally:
        server.stop()
