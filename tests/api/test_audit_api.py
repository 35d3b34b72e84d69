"""The audit trail through the real clients on a live `skald serve` in api_key mode: what
openviking-sdk (and the MCP client) did is listed by `GET /api/v1/console/audit` at once, with
who, from where, which request, what and how it ended; root sees every account, an account
admin their own, a user nothing; paging and every filter; bad filters are 400s."""

from __future__ import annotations

import io
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from openviking_sdk import SyncHTTPClient
from openviking_sdk.errors import NotFoundError, OpenVikingError

from tests.api.conftest import make_client
from tests.support.mcp_client import mcp_client, ok, run
from tests.support.remote_fixtures import Site, serve_site
from tests.support.server import SkaldServer

ROOT_KEY = "audit-root-" + uuid.uuid4().hex
AUDIT = "/api/v1/console/audit"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with serve_site(tmp_path_factory.mktemp("site")) as s:
        s.page("/guide.html", "<html><body><h1>Guide</h1><p>Watched page.</p></body></html>")
        yield s


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SkaldServer]:
    srv = SkaldServer(
        tmp_path_factory.mktemp("audit") / "data",
        root_api_key=ROOT_KEY,
        env={"SKALD_FETCH_ALLOW_LOOPBACK": "true"},
    )
    srv.start()
    yield srv
    srv.stop()


@dataclass
class Account:
    """A fresh account: ada its admin, bob a plain user; `seen` holds the X-Request-ID of
    each response ada's SDK client received, by (method, path)."""

    name: str
    url: str
    ada_key: str
    bob_key: str
    ada: SyncHTTPClient
    seen: list[tuple[str, str, str]] = field(default_factory=list)

    def request_id(self, method: str, path: str) -> str:
        return next(rid for m, p, rid in reversed(self.seen) if (m, p) == (method, path))


DATA_FAMILIES = "fs,memory,skill,pack,session,watch"


def listing(url: str, key: str, expect: int = 200, **params: Any) -> Any:
    """The records of data actions (the admin and key actions that set each test's account
    up are recorded too: tests of those name their family or action)."""
    if "api_type" not in params and "action" not in params:
        params["api_type"] = DATA_FAMILIES
    response = httpx.get(url + AUDIT, headers={"X-API-Key": key}, params=params, timeout=60)
    assert response.status_code == expect, response.text
    body = response.json()
    return body["result"] if expect == 200 else body


def new_account(server: SkaldServer) -> Account:
    name = "acct-" + uuid.uuid4().hex[:8]
    root = make_client(server.url, api_key=ROOT_KEY)
    ada_key = root.admin_create_account(name, "ada")["user_key"]
    bob_key = root.admin_register_user(name, "bob", "user")["user_key"]
    root.close()
    seen: list[tuple[str, str, str]] = []

    async def note(response: httpx.Response) -> None:
        seen.append(
            (
                response.request.method,
                response.request.url.path,
                response.headers.get("x-request-id", ""),
            )
        )

    ada = SyncHTTPClient(
        url=server.url, api_key=ada_key, timeout=120, event_hooks={"response": [note]}
    )
    ada.initialize()
    return Account(name, server.url, ada_key, bob_key, ada, seen)


@pytest.fixture
def acct(server: SkaldServer) -> Iterator[Account]:
    a = new_account(server)
    yield a
    a.ada.close()


def actions_of(result: dict[str, Any]) -> list[str]:
    return [i["action"] for i in result["items"]]


# -- rm, as the issue tells it -------------------------------------------------------------------


def test_an_rm_is_listed_at_once_with_who_where_and_which_request(acct: Account) -> None:
    acct.ada.write("viking://resources/notes.md", "# Notes\n", mode="create")
    acct.ada.rm("viking://resources/notes.md")
    request_id = acct.request_id("DELETE", "/api/v1/fs")
    assert request_id
    callers: list[tuple[str, dict[str, Any]]] = [
        (ROOT_KEY, {"account_id": acct.name}),
        (acct.ada_key, {}),
    ]
    for key, params in callers:
        result = listing(acct.url, key, **params)
        assert result["total"] == 1 and result["success_rate"] == 1.0
        assert (result["page"], result["page_size"]) == (1, 10)
        [item] = result["items"]
        assert {
            k: item[k]
            for k in (
                "account_id",
                "user_id",
                "role",
                "source_ip",
                "request_id",
                "action",
                "target",
                "outcome",
            )
        } == {
            "account_id": acct.name,
            "user_id": "ada",
            "role": "admin",
            "source_ip": "127.0.0.1",
            "request_id": request_id,
            "action": "fs.rm",
            "target": "viking://resources/notes.md",
            "outcome": "ok",
        }
        # OpenViking's fields
        assert (item["method"], item["route"], item["api_type"], item["status_code"]) == (
            "DELETE",
            "/api/v1/fs",
            "fs",
            200,
        )
        assert item["error_code"] is None and item["duration_ms"] >= 0
        assert item["actor_account_id"] == acct.name
        assert item["created_at"].endswith("Z")
        assert datetime.fromisoformat(item["created_at"].replace("Z", "+00:00"))
        assert item["detail"] == {"recursive": False, "deleted": 1}
        assert ROOT_KEY not in str(item) and acct.ada_key not in str(item)


def test_a_failed_rm_is_recorded_as_an_error(acct: Account) -> None:
    with pytest.raises(NotFoundError):
        acct.ada.rm("viking://resources/never-there.md")
    [item] = listing(acct.url, acct.ada_key)["items"]
    assert (item["action"], item["outcome"], item["status_code"], item["error_code"]) == (
        "fs.rm",
        "error",
        404,
        "NOT_FOUND",
    )
    assert item["request_id"] == acct.request_id("DELETE", "/api/v1/fs")
    assert "never-there.md" in item["error_message"]


# -- who may read it -----------------------------------------------------------------------------


def test_visibility_root_all_an_admin_their_own_a_user_nothing(
    server: SkaldServer, acct: Account
) -> None:
    other = new_account(server)
    try:
        acct.ada.write("viking://resources/a.md", "a", mode="create")
        acct.ada.rm("viking://resources/a.md")
        other.ada.write("viking://resources/b.md", "b", mode="create")
        other.ada.rm("viking://resources/b.md")
        # a plain user: refused
        refused = listing(acct.url, acct.bob_key, expect=403)
        assert refused["error"]["code"] == "PERMISSION_DENIED"
        # an admin of another account sees none of it, and may not ask for it
        theirs = listing(acct.url, other.ada_key, page_size=100)
        assert {i["account_id"] for i in theirs["items"]} == {other.name}
        assert acct.name not in str(theirs)
        assert (
            listing(acct.url, other.ada_key, expect=403, account_id=acct.name)["error"]["code"]
            == "PERMISSION_DENIED"
        )
        # root sees every account
        everything = listing(acct.url, ROOT_KEY, page_size=100)
        assert {acct.name, other.name} <= {i["account_id"] for i in everything["items"]}
        # a key that is not a key
        assert httpx.get(acct.url + AUDIT, headers={"X-API-Key": "nope"}).status_code == 401
    finally:
        other.ada.close()


# -- paging and filters --------------------------------------------------------------------------


def test_paging_and_every_filter(server: SkaldServer, acct: Account) -> None:
    ada = acct.ada
    for name in ("p1", "p2", "p3"):
        ada.write(f"viking://resources/{name}.md", name, mode="create")
    ada.rm("viking://resources/p1.md")
    first = acct.request_id("DELETE", "/api/v1/fs")
    ada.mv("viking://resources/p2.md", "viking://resources/p2b.md")
    with pytest.raises(NotFoundError):
        ada.rm("viking://resources/missing.md")
    with pytest.raises(OpenVikingError):  # the destination exists: refused (409)
        ada.mv("viking://resources/p3.md", "viking://resources/p2b.md")
    bob = make_client(acct.url, api_key=acct.bob_key)
    bob.write("viking://resources/bob.md", "bob", mode="create")
    bob.rm("viking://resources/bob.md")
    bob.close()
    url, key = acct.url, acct.ada_key

    everything = listing(url, key)
    assert actions_of(everything) == ["fs.rm", "fs.mv", "fs.rm", "fs.mv", "fs.rm"]
    assert everything["total"] == 5 and everything["success_rate"] == pytest.approx(0.6)
    pages = [listing(url, key, page=p, page_size=2) for p in (1, 2, 3, 4)]
    assert [len(p["items"]) for p in pages] == [2, 2, 1, 0]
    assert [i["id"] for p in pages for i in p["items"]] == [i["id"] for i in everything["items"]]
    assert {p["total"] for p in pages} == {5}

    def count(**params: Any) -> int:
        return int(listing(url, key, page_size=100, **params)["total"])

    assert count(status="success") == 3 and count(status="ok") == 3
    assert count(status="error") == 2 and count(status="failed") == 2
    assert count(status="4xx") == 2 and count(status="404") == 1 and count(status="2xx") == 3
    assert count(status=["404", "409"]) == 2 and count(status="404,2xx") == 4
    assert count(status="5xx") == 0 and count(status="pending") == 0
    assert count(api_type="fs") == 5 and count(api_type="session,pack") == 0
    assert count(action="fs.mv") == 2 and count(action=["fs.mv", "fs.rm"]) == 5
    assert count(user_id="bob") == 1 and count(user_id="ada") == 4
    assert count(request_id=first) == 1
    [only] = listing(url, key, request_id=first)["items"]
    assert only["target"] == "viking://resources/p1.md"
    assert count(since="1h") == 5 and count(until="2000-01-01") == 0
    assert count(since="2000-01-01", until="2100-01-01") == 5
    mv_failed = listing(url, key, action="fs.mv", status="error")["items"]
    assert [(i["status_code"], i["error_code"]) for i in mv_failed] == [(409, "ALREADY_EXISTS")]
    assert mv_failed[0]["detail"] == {"to": "viking://resources/p2b.md"}
    # root filters on one account, and on a user across accounts
    assert listing(url, ROOT_KEY, account_id=acct.name, page_size=100)["total"] == 5


@pytest.mark.parametrize(
    "params",
    [
        {"status": "sometimes"},
        {"status": "600"},
        {"status": "6xx"},
        {"page": "0"},
        {"page": "x"},
        {"page_size": "0"},
        {"page_size": "101"},
        {"api_type": "nope"},
        {"action": "fs.nuke"},
        {"since": "last tuesday"},
        {"until": "2020-13-45"},
        {"since": "1h", "until": "2h"},
        {"user_id": "a b"},
        {"account_id": "a/b"},
        {"request_id": "r" * 300},
    ],
)
def test_bad_filters_are_400s(acct: Account, params: dict[str, Any]) -> None:
    body = listing(acct.url, ROOT_KEY, expect=400, **params)
    assert body["status"] == "error" and body["error"]["code"] == "INVALID_ARGUMENT"


# -- each recorded action ------------------------------------------------------------------------


def test_forgetting_a_memory_over_http_and_mcp(acct: Account) -> None:
    memory = "viking://user/ada/memories/preferences/tea.md"
    acct.ada.write(memory, "Prefers green tea.", mode="create")
    acct.ada.rm(memory)
    other = "viking://user/ada/memories/preferences/coffee.md"
    acct.ada.write(other, "No coffee.", mode="create")
    acct.ada.write("viking://resources/mcp.md", "gone soon", mode="create")

    async def forget() -> None:
        async with mcp_client(acct.url, {"X-API-Key": acct.ada_key}) as client:
            ok(await client.call_tool("forget", {"uri": other}))
            ok(await client.call_tool("forget", {"uri": "viking://resources/mcp.md"}))

    run(forget)
    items = listing(acct.url, acct.ada_key)["items"]
    assert [(i["action"], i["target"], i["route"], i["outcome"]) for i in items] == [
        ("fs.rm", "viking://resources/mcp.md", "/mcp", "ok"),
        ("memory.forget", other, "/mcp", "ok"),
        ("memory.forget", memory, "/api/v1/fs", "ok"),
    ]
    assert {i["api_type"] for i in items} == {"fs", "memory"}
    assert {i["source_ip"] for i in items} == {"127.0.0.1"}


def test_session_delete(acct: Account) -> None:
    sid = acct.ada.create_session()["session_id"]
    acct.ada.add_message(sid, "user", "hello")
    acct.ada.delete_session(sid)
    with pytest.raises(NotFoundError):
        acct.ada.delete_session(sid)
    items = listing(acct.url, acct.ada_key)["items"]
    target = f"viking://user/ada/sessions/{sid}"
    assert [(i["action"], i["target"], i["outcome"]) for i in items] == [
        ("session.delete", target, "error"),
        ("session.delete", target, "ok"),
    ]
    deletes = [rid for m, p, rid in acct.seen if (m, p) == ("DELETE", f"/api/v1/sessions/{sid}")]
    assert [i["request_id"] for i in items] == deletes[::-1]


def test_pack_import_and_restore(acct: Account, tmp_path: Path) -> None:
    ada = acct.ada
    ada.mkdir("viking://resources/kit")
    ada.write("viking://resources/kit/a.md", "# A\n", mode="create")
    pack = ada.export_ovpack("viking://resources/kit", str(tmp_path / "kit.ovpack"))
    ada.import_ovpack(pack, "viking://resources/copies")
    ada.import_ovpack(pack, "viking://resources/copies", on_conflict="overwrite")
    backup = ada.backup_ovpack(str(tmp_path / "all.ovpack"))
    ada.restore_ovpack(backup, on_conflict="overwrite")
    bob = make_client(acct.url, api_key=acct.bob_key)
    with pytest.raises(OpenVikingError):  # only an admin restores the whole tree
        bob.restore_ovpack(backup, on_conflict="overwrite")
    bob.close()
    items = listing(acct.url, acct.ada_key, api_type="pack")["items"]
    assert [(i["action"], i["user_id"], i["outcome"]) for i in items] == [
        ("pack.restore", "bob", "error"),
        ("pack.restore", "ada", "ok"),
        ("pack.import", "ada", "ok"),
        ("pack.import", "ada", "ok"),
    ]
    assert items[0]["error_code"] == "PERMISSION_DENIED"
    assert items[2]["detail"]["on_conflict"] == "overwrite"
    assert items[2]["detail"]["uri"] == "viking://resources/copies/kit"
    assert items[1]["target"] == "viking://"
    with zipfile.ZipFile(io.BytesIO(Path(backup).read_bytes())) as zf:
        assert zf.namelist()  # a real backup went through


def test_skill_delete(acct: Account) -> None:
    acct.ada.add_skill("---\nname: brew-tea\ndescription: Brew tea.\n---\n\nHot water.\n")
    acct.ada.delete_skill("brew-tea")
    [item] = listing(acct.url, acct.ada_key)["items"]
    assert (item["action"], item["api_type"], item["outcome"]) == ("skill.delete", "skill", "ok")
    assert item["target"].endswith("/brew-tea")


def test_watch_create_update_cancel(acct: Account, site: Site) -> None:
    http = httpx.Client(base_url=acct.url, headers={"X-API-Key": acct.ada_key}, timeout=60)
    with http:
        added = http.post(
            "/api/v1/resources",
            json={
                "path": f"{site.url}/guide.html",
                "to": "viking://resources/guide",
                "watch_interval": 60,
            },
        ).json()["result"]
        watch = added["watch_task_id"]
        assert (
            http.patch(f"/api/v1/watches/{watch}", json={"watch_interval": 120}).status_code == 200
        )
        assert (
            http.delete(
                "/api/v1/watches", params={"to_uri": "viking://resources/guide"}
            ).status_code
            == 200
        )
        assert http.delete(f"/api/v1/watches/{watch}").status_code == 404
    items = listing(acct.url, acct.ada_key, api_type="watch")["items"]
    assert [(i["action"], i["outcome"]) for i in items] == [
        ("watch.cancel", "error"),
        ("watch.cancel", "ok"),
        ("watch.update", "ok"),
        ("watch.create", "ok"),
    ]
    assert {i["target"] for i in items[1:]} == {"viking://resources/guide"}
    assert items[0]["target"] == watch  # not found: the id the request named
    assert {i["detail"]["task_id"] for i in items[1:]} == {watch}
    assert items[2]["detail"] == {"watch_interval": 120, "task_id": watch}
    assert items[3]["detail"]["source"] == f"{site.url}/guide.html"
