"""User isolation inside an account, one test per reproduction: scopes wider than the caller's
space (`viking://user`, `viking://`) are narrowed to what the caller may see in find, search
(every search type) and context mode; tasks and uploads belong to their user; summaries of
directories spanning users or peers never gather their children's."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from openviking_sdk import SyncHTTPClient
from openviking_sdk.errors import NotFoundError, PermissionDeniedError

from tests.api.conftest import ROOT_KEY, make_client
from tests.support.server import SkaldServer


@dataclass
class People:
    url: str
    boss: SyncHTTPClient  # account admin
    alice: SyncHTTPClient
    bob: SyncHTTPClient
    outsider: SyncHTTPClient  # "alice" of another account
    keys: dict[str, str]
    bob_marker: str
    alice_marker: str
    bob_task: str
    bob_session: str


def _user(
    root: SyncHTTPClient, url: str, account: str, user: str, keys: dict[str, str]
) -> SyncHTTPClient:
    keys[user] = root.admin_register_user(account, user, "user")["user_key"]
    return make_client(url, api_key=keys[user])


@pytest.fixture(scope="module")
def people(key_server: SkaldServer) -> Iterator[People]:
    url = key_server.url
    root = make_client(url, api_key=ROOT_KEY)
    account = "iso-" + uuid.uuid4().hex[:8]
    keys = {"boss": root.admin_create_account(account, "boss")["user_key"]}
    boss = make_client(url, api_key=keys["boss"])
    alice = _user(root, url, account, "alice", keys)
    bob = _user(root, url, account, "bob", keys)
    other = "iso-" + uuid.uuid4().hex[:8]
    outsider = make_client(url, api_key=root.admin_create_account(other, "alice")["user_key"])
    bob_marker, alice_marker = "bobmark" + uuid.uuid4().hex[:12], "alimark" + uuid.uuid4().hex[:12]
    alice.write(
        "viking://~/memories/preferences/tea.md",
        f"Alice prefers green tea. {alice_marker}",
        wait=True,
    )
    res = bob.write(
        "viking://~/memories/preferences/coffee.md",
        f"Bob prefers black coffee. {bob_marker}",
        wait=True,
    )
    bob.write("viking://~/resources/plans/secret.md", f"Bob's secret plan. {bob_marker}", wait=True)
    bob_session = "bob-chat-" + uuid.uuid4().hex[:6]
    bob.create_session(bob_session)
    bob.add_message(bob_session, "user", f"I prefer black coffee, says {bob_marker}.")
    commit = bob.commit_session(bob_session)
    outsider.write(
        "viking://~/memories/preferences/coffee.md",
        f"Outsider prefers black coffee. {bob_marker}x",
        wait=True,
    )
    httpx.post(
        url + "/api/v1/system/wait", headers={"X-API-Key": ROOT_KEY}, params={"timeout": 120}
    ).raise_for_status()
    yield People(
        url, boss, alice, bob, outsider, keys, bob_marker, alice_marker, res["task_id"], bob_session
    )
    assert commit["task_id"]
    for c in (root, boss, alice, bob, outsider):
        c.close()


def _text(result: object) -> str:
    return json.dumps(result, default=str)


@pytest.mark.parametrize(
    "target",
    ["viking://user", "viking://user/", "viking://", ["viking://user", "viking://resources"]],
)
def test_find_on_a_wide_scope_keeps_to_the_callers_space(
    people: People, target: str | list[str]
) -> None:
    hits = people.alice.find("prefers coffee tea", target_uri=target, limit=50)
    text = _text(hits)
    assert people.bob_marker not in text and "viking://user/bob" not in text
    assert people.alice_marker in text  # her own memory is still found


@pytest.mark.parametrize("search_type", ["hybrid", "semantic", "keywords"])
def test_search_on_viking_user_keeps_to_the_callers_space(people: People, search_type: str) -> None:
    for target in ("viking://user", "viking://"):
        hits = people.alice.search(
            "prefers coffee",
            target_uri=target,
            limit=50,
            options={"search_type": search_type, "read_content": True},
        )
        text = _text(hits)
        assert people.bob_marker not in text and "viking://user/bob" not in text
    own = people.alice.search(
        "green tea", target_uri="viking://user", limit=50, options={"search_type": "keywords"}
    )
    assert people.alice_marker in _text(own)


def test_context_mode_keeps_to_the_callers_space(people: People) -> None:
    result = people.alice.search_context("prefers black coffee", options={"max_tokens": 4000})
    text = _text(result)
    assert people.bob_marker not in text and "viking://user/bob" not in text


def test_another_users_space_is_still_refused(people: People) -> None:
    with pytest.raises(PermissionDeniedError):
        people.alice.find("coffee", target_uri="viking://user/bob")
    with pytest.raises(PermissionDeniedError):
        people.alice.read("viking://user/bob/memories/preferences/coffee.md")
    with pytest.raises(PermissionDeniedError):
        people.alice.ls("viking://user/bob")
    assert [e["name"] for e in people.alice.ls("viking://user")] == ["alice"]
    assert "bob" not in _text(people.alice.tree("viking://user", level_limit=4))
    assert people.alice.grep("viking://user", "coffee")["count"] == 0
    assert people.alice.glob("**", uri="viking://")["matches"]  # her own files
    assert "viking://user/bob" not in _text(people.alice.glob("**", uri="viking://"))


def test_admins_still_search_every_user_space_of_their_account(people: People) -> None:
    text = _text(people.boss.find("prefers black coffee", target_uri="viking://user", limit=50))
    assert people.bob_marker in text
    assert people.bob_marker + "x" not in text  # never another account's


def test_other_accounts_see_nothing(people: People) -> None:
    text = _text(people.outsider.find("prefers black coffee", target_uri="viking://", limit=50))
    assert people.bob_marker + "x" in text  # the outsider's own memory
    assert people.bob_marker + "." not in text and "viking://user/bob" not in text


def test_tasks_belong_to_their_user(people: People) -> None:
    mine = people.alice.list_tasks(limit=200)
    assert all(t["task_id"] != people.bob_task for t in mine)
    assert people.bob_session not in _text(mine)
    assert people.alice.get_task(people.bob_task) is None
    with pytest.raises(NotFoundError):
        people.alice.cancel_task(people.bob_task)
    assert people.outsider.get_task(people.bob_task) is None
    resp = httpx.get(
        people.url + "/api/v1/tasks",
        headers={"X-API-Key": people.keys["alice"]},
        params={"include_internal": "true", "limit": 200},
    )
    assert people.bob_task not in resp.text and people.bob_session not in resp.text
    # The owner and the account's admin see it.
    assert people.bob.get_task(people.bob_task) is not None
    assert people.boss.get_task(people.bob_task) is not None
    commits = people.boss.list_tasks(task_type="session_commit", limit=200)
    assert any(people.bob_session in (t["resource_id"] or "") for t in commits)


def _upload(people: People, user: str, text: str) -> str:
    resp = httpx.post(
        people.url + "/api/v1/resources/temp_upload",
        headers={"X-API-Key": people.keys[user]},
        files={"file": ("notes.md", text.encode())},
    )
    resp.raise_for_status()
    temp_id: str = resp.json()["result"]["temp_file_id"]
    return temp_id


def _import(people: People, key: str, temp_id: str, to: str) -> httpx.Response:
    return httpx.post(
        people.url + "/api/v1/resources",
        headers={"X-API-Key": key},
        json={"temp_file_id": temp_id, "to": to},
    )


def test_a_temp_upload_belongs_to_its_uploader(people: People) -> None:
    temp_id = _upload(people, "bob", "bob's upload")
    target = "viking://resources/stolen-" + uuid.uuid4().hex[:6]
    for key in (people.keys["alice"], people.keys["boss"]):
        resp = _import(people, key, temp_id, target)
        assert resp.status_code == 404, resp.text
        assert resp.json()["error"]["code"] == "NOT_FOUND"
    with pytest.raises(NotFoundError):
        people.alice.stat(target)
    resp = _import(people, people.keys["bob"], temp_id, target)  # still there for bob
    assert resp.status_code == 200, resp.text
    assert people.bob.read(target + "/notes.md") == "bob's upload"


def test_sessions_and_archives_belong_to_their_user(people: People) -> None:
    assert people.bob.get_session_archive(people.bob_session, "archive_001")
    with pytest.raises(NotFoundError):
        people.alice.get_session(people.bob_session)
    with pytest.raises(NotFoundError):
        people.alice.get_session_archive(people.bob_session, "archive_001")
    with pytest.raises(NotFoundError):
        people.boss.get_session_archive(people.bob_session, "archive_001")
    assert people.bob_session not in _text(people.alice.list_sessions())
    hits = people.alice.find("black coffee", target_uri="viking://", limit=50)
    assert "sessions/" + people.bob_session not in _text(hits)


def test_directories_spanning_users_or_peers_do_not_summarise_them(people: People) -> None:
    """An admin reindexing `viking://user` and a user reindexing their `peers` must not make
    either directory's summary list what lies below (other users, other peers)."""
    marker = "peermark" + uuid.uuid4().hex[:10]
    people.alice.write("viking://~/peers/p2/memories/bio.md", f"Peer two. {marker}", wait=True)
    people.alice.reindex("viking://~/peers", mode="semantic_and_vectors", recursive=False)
    people.boss.reindex("viking://user", mode="semantic_and_vectors", recursive=False)
    as_p1 = make_client(people.url, api_key=people.keys["alice"], actor_peer_id="p1")
    try:
        for uri in ("viking://~/peers", "viking://~"):
            assert marker not in as_p1.overview(uri) + as_p1.abstract(uri)
        hits = as_p1.find("peer two", target_uri="viking://~", limit=50)
        assert marker not in _text(hits) and "peers/p2" not in _text(hits)
        assert [e["name"] for e in as_p1.ls("viking://~/peers")] == []
        with pytest.raises(NotFoundError):
            as_p1.read("viking://~/peers/p2/memories/bio.md")
    finally:
        as_p1.close()
    for uri in ("viking://user",):
        seen = people.alice.overview(uri) + people.alice.abstract(uri)
        assert "bob" not in seen and people.bob_marker not in seen
