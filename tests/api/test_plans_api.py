"""Plans and quotas through openviking-sdk against `skald serve` with a root key: the account
settings route (root sets a plan and limits, an account's admin reads them), and each limit
the app enforces: at the limit (allowed), over it (the error with its details, nothing
written), and after the window or once root raises the limit (allowed again)."""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openviking_sdk import SyncHTTPClient
from openviking_sdk.errors import OpenVikingError

from tests.api.conftest import ROOT_KEY, make_client
from tests.support.remote_fixtures import Site, make_repo, serve_site
from tests.support.server import SkaldServer


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SkaldServer]:
    srv = SkaldServer(
        tmp_path_factory.mktemp("plans") / "data",
        root_api_key=ROOT_KEY,
        env={"SKALD_FETCH_ALLOW_LOOPBACK": "true"},
    )
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def root(server: SkaldServer) -> Iterator[SyncHTTPClient]:
    c = make_client(server.url, api_key=ROOT_KEY)
    yield c
    c.close()


class Tenant:
    """A fresh account: its id, its admin's key and an SDK client as that admin."""

    def __init__(self, server: SkaldServer, root: SyncHTTPClient) -> None:
        self.url = server.url
        self.account = "plan-" + uuid.uuid4().hex[:8]
        self.key = root.admin_create_account(self.account, "boss")["user_key"]
        self.ov = make_client(server.url, api_key=self.key)

    def patch(self, body: dict[str, Any], key: str = ROOT_KEY) -> httpx.Response:
        return httpx.patch(
            f"{self.url}/api/v1/admin/accounts/{self.account}/settings",
            json=body,
            headers={"X-API-Key": key},
            timeout=30,
        )

    def limits(self, **limits: Any) -> dict[str, Any]:
        resp = self.patch({"limits": limits})
        assert resp.status_code == 200, resp.text
        out: dict[str, Any] = resp.json()["result"]
        return out


@pytest.fixture
def tenant(server: SkaldServer, root: SyncHTTPClient) -> Iterator[Tenant]:
    t = Tenant(server, root)
    yield t
    t.ov.close()


def quota_error(exc: pytest.ExceptionInfo[OpenVikingError], limit: str) -> dict[str, Any]:
    assert exc.value.code == "QUOTA_EXCEEDED", exc.value
    details: dict[str, Any] = dict(exc.value.details or {})
    assert details["limit"] == limit, details
    return details


# ------------------------------------------------------------------------ the settings route


def test_settings_read_by_root_and_the_admin_changed_by_root_only(
    tenant: Tenant, root: SyncHTTPClient, server: SkaldServer
) -> None:
    fresh = root.admin_get_account_settings(tenant.account)
    assert fresh["account_id"] == tenant.account
    assert fresh["settings"]["plan"] == "unlimited"
    assert set(fresh["settings"]["limits"].values()) == {None}
    assert fresh["overrides"] == {}

    changed = tenant.patch({"plan": "free", "limits": {"sessions": 7, "watches": None}})
    assert changed.status_code == 200, changed.text
    view = changed.json()["result"]
    assert view["settings"]["plan"] == "free"
    assert view["settings"]["limits"]["sessions"] == 7
    assert view["settings"]["limits"]["watches"] is None  # null: unlimited
    assert view["settings"]["limits"]["rate_per_s"] == 5.0  # the free tier's
    assert view["overrides"] == {"plan": "free", "limits": {"sessions": 7, "watches": None}}
    # the account's admin reads its own settings, the same
    assert tenant.ov.admin_get_account_settings(tenant.account) == view

    # "default" drops an override; a null plan goes back to the deployment's default tier
    back = tenant.patch({"plan": None, "limits": {"sessions": "default"}}).json()["result"]
    assert back["overrides"] == {"limits": {"watches": None}}
    assert back["settings"]["plan"] == "unlimited"

    # the admin may not change its own plan
    denied = tenant.patch({"plan": "business"}, key=tenant.key)
    assert denied.status_code == 403 and denied.json()["error"]["code"] == "PERMISSION_DENIED"
    # Skald has no agent evolution: a clear 400 naming what is supported
    with pytest.raises(OpenVikingError) as err:
        root.admin_set_account_agent_evolution(tenant.account, True)
    assert err.value.code == "INVALID_ARGUMENT"
    assert err.value.details["supported"] == ["plan", "limits"]
    for bad in ({"plan": "gold"}, {"limits": {"nope": 1}}, {"limits": {"sessions": -1}}, {}):
        resp = tenant.patch(bad)
        assert resp.status_code == 400, (bad, resp.text)
        assert resp.json()["error"]["code"] == "INVALID_ARGUMENT"
    assert root.admin_get_account_settings(tenant.account) == back  # nothing applied

    # another account's admin sees nothing of it; an unknown account is a 404
    other = Tenant(server, root)
    with pytest.raises(OpenVikingError) as err:
        other.ov.admin_get_account_settings(tenant.account)
    assert err.value.code == "PERMISSION_DENIED"
    other.ov.close()
    with pytest.raises(OpenVikingError) as err:
        root.admin_get_account_settings("no-such-" + uuid.uuid4().hex[:6])
    assert err.value.code == "NOT_FOUND"
    # the change is in the audit trail
    audit = httpx.get(
        f"{server.url}/api/v1/console/audit",
        params={"action": "account.settings", "account_id": tenant.account, "page_size": 100},
        headers={"X-API-Key": ROOT_KEY},
        timeout=30,
    )
    assert audit.status_code == 200, audit.text
    items = audit.json()["result"]["items"]
    outcomes = sorted((i["outcome"], i["actor_account_id"]) for i in items)
    # the changes root made, and the admin's refused attempt; bad bodies are attempts too
    assert ("ok", "_root") in outcomes and ("error", tenant.account) in outcomes
    assert all(i["target"] == tenant.account for i in items)


def test_a_plan_given_when_the_account_is_created(server: SkaldServer) -> None:
    def create(settings: dict[str, Any]) -> httpx.Response:
        return httpx.post(
            f"{server.url}/api/v1/admin/accounts",
            json={
                "account_id": "plan-" + uuid.uuid4().hex[:8],
                "admin_user_id": "boss",
                "settings": settings,
            },
            headers={"X-API-Key": ROOT_KEY},
            timeout=30,
        )

    bad = create({"plan": "gold"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "INVALID_ARGUMENT"
    made = create({"plan": "team", "limits": {"sessions": 3}})
    assert made.status_code == 200, made.text
    account = made.json()["result"]["account_id"]
    root = make_client(server.url, api_key=ROOT_KEY)
    try:
        view = root.admin_get_account_settings(account)
        assert view["settings"]["plan"] == "team" and view["settings"]["limits"]["sessions"] == 3
    finally:
        root.close()


# ------------------------------------------------------------------------ request rate


def test_request_rate_burst_then_429_then_allowed_after_retry_after(tenant: Tenant) -> None:
    tenant.limits(rate_per_s=0.5, burst=3)
    headers = {"X-API-Key": tenant.key}
    with httpx.Client(base_url=tenant.url, headers=headers, timeout=30) as http:
        for _ in range(3):
            assert http.get("/api/v1/fs/ls", params={"uri": "viking://"}).status_code == 200
        refused = http.get("/api/v1/fs/ls", params={"uri": "viking://"})
        assert refused.status_code == 429, refused.text
        error = refused.json()["error"]
        assert error["code"] == "RESOURCE_EXHAUSTED"
        retry = int(refused.headers["Retry-After"])
        assert 1 <= retry <= 2
        assert error["details"] == {
            "limit": "rate_per_s",
            "value": 0.5,
            "burst": 3,
            "retry_after_s": retry,
        }
        # not counted: health, readiness, the console's files; never limited: the root key
        for path in ("/health", "/ready", "/console/"):
            assert http.get(path).status_code == 200
        for _ in range(10):
            resp = httpx.get(
                f"{tenant.url}/api/v1/admin/accounts/{tenant.account}",
                headers={"X-API-Key": ROOT_KEY},
            )
            assert resp.status_code == 200
        time.sleep(retry)
        assert http.get("/api/v1/fs/ls", params={"uri": "viking://"}).status_code == 200
    # raising the limit applies at once
    tenant.limits(rate_per_s=100, burst=100)
    for _ in range(20):
        tenant.ov.ls("viking://")


# ------------------------------------------------------------------------ sessions


def test_sessions_at_over_and_after_raising_the_limit(tenant: Tenant) -> None:
    ov = tenant.ov
    tenant.limits(sessions=2)
    first = ov.create_session()["session_id"]
    ov.create_session()  # the second: at the limit
    with pytest.raises(OpenVikingError) as err:
        ov.create_session()
    assert quota_error(err, "sessions") == {
        "limit": "sessions",
        "value": 2,
        "current": 2,
        "requested": 1,
    }
    assert len(ov.list_sessions()) == 2  # nothing written
    ov.delete_session(first)  # room again
    ov.create_session()
    with pytest.raises(OpenVikingError):
        ov.create_session()
    tenant.limits(sessions=3)
    ov.create_session()
    assert len(ov.list_sessions()) == 3


# ------------------------------------------------------------------------ index records


def _records(tenant: Tenant) -> int:
    usage = httpx.get(
        f"{tenant.url}/api/v1/admin/accounts/{tenant.account}/usage",
        headers={"X-API-Key": ROOT_KEY},
        timeout=30,
    ).json()["result"]
    return int(usage["records"]["total"])


def test_index_records_at_over_and_after_raising_the_limit(tenant: Tenant, tmp_path: Path) -> None:
    ov = tenant.ov
    base = "viking://resources/quota"
    ov.write(f"{base}/one.md", "# One\n\nThe first note.\n", wait=True)
    current = _records(tenant)
    tenant.limits(index_records=current + 1)
    ov.write(f"{base}/two.md", "# Two\n\nThe second note.\n", wait=True)  # at the limit
    with pytest.raises(OpenVikingError) as err:
        ov.write(f"{base}/three.md", "# Three\n")
    details = quota_error(err, "index_records")
    assert details["value"] == current + 1 and details["requested"] == 1
    assert details["current"] >= current + 1
    with pytest.raises(OpenVikingError) as err:
        ov.stat(f"{base}/three.md")
    assert err.value.code == "NOT_FOUND"  # nothing written
    ov.write(f"{base}/two.md", "# Two\n\nRewritten: it adds no record.\n")
    # a batch, an upload and a skill that would add records write nothing
    with pytest.raises(OpenVikingError) as err:
        ov.batch_write(base, [{"uri": f"{base}/b1.md", "content": "b1"}])
    quota_error(err, "index_records")
    folder = tmp_path / "pack"
    folder.mkdir()
    for name in ("a.md", "b.md", "c.md"):
        (folder / name).write_text(f"# {name}\n")
    with pytest.raises(OpenVikingError) as err:
        ov.add_resource(str(folder), to="viking://resources/pack", wait=True)
    assert quota_error(err, "index_records")["requested"] == 3
    with pytest.raises(OpenVikingError) as err:
        ov.add_skill("---\nname: tally\ndescription: Counts things.\n---\n\n# Tally\n")
    quota_error(err, "index_records")
    pack = ov.export_ovpack(base, str(tmp_path / "quota.ovpack"))
    with pytest.raises(OpenVikingError) as err:
        ov.import_ovpack(pack, "viking://resources/copy")
    assert quota_error(err, "index_records")["requested"] == 2  # one.md, two.md
    names = {e["name"] for e in ov.ls(base)}
    assert "b1.md" not in names and "three.md" not in names
    for root in ("viking://resources/pack", "viking://resources/copy"):
        with pytest.raises(OpenVikingError):
            ov.stat(root)

    tenant.limits(index_records=None)  # an unlimited override
    ov.write(f"{base}/three.md", "# Three\n")
    ov.add_resource(str(folder), to="viking://resources/pack", wait=True)
    assert ov.stat("viking://resources/pack/a.md")


# ------------------------------------------------------------------------ watches


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    git_root = tmp_path_factory.mktemp("watched")
    for name in ("alpha", "beta"):
        make_repo(git_root / "team", name, {"note.md": f"# {name}\n\nA note.\n".encode()})
    with serve_site(git_root) as s:
        yield s


@pytest.mark.skipif(shutil.which("git") is None, reason="needs the git client")
def test_watches_count_and_interval(tenant: Tenant, site: Site) -> None:
    ov = tenant.ov
    tenant.limits(watches=1, watch_min_interval_s=600)
    alpha = f"{site.url}/git/team/alpha.git"
    with pytest.raises(OpenVikingError) as err:  # every 5 min: more often than the plan
        ov.add_resource(alpha, wait=True, options={"watch_interval": 5})
    details = quota_error(err, "watch_min_interval_s")
    assert details["value"] == 600 and details["current"] == 300
    assert _tasks(ov) == [] and "alpha" not in _names(ov)  # nothing fetched, no root

    out = ov.add_resource(alpha, wait=True, options={"watch_interval": 10})  # at the limit
    watch_id = str(out["watch_task_id"])
    with pytest.raises(OpenVikingError) as err:
        ov.add_resource(f"{site.url}/git/team/beta.git", options={"watch_interval": 60})
    assert quota_error(err, "watches") == {
        "limit": "watches",
        "value": 1,
        "current": 1,
        "requested": 1,
    }
    assert "beta" not in _names(ov)
    with pytest.raises(OpenVikingError) as err:
        ov.update_watch(watch_id, watch_interval=1)
    quota_error(err, "watch_min_interval_s")
    assert _result(ov.get_watch(watch_id))["watch_interval"] == 10

    tenant.limits(watches=2, watch_min_interval_s="default")  # the tier's: unlimited
    ov.add_resource(f"{site.url}/git/team/beta.git", wait=True, options={"watch_interval": 60})
    assert _result(ov.update_watch(watch_id, watch_interval=1))["watch_interval"] == 1
    assert len(_tasks(ov)) == 2


def _result(resp: dict[str, Any]) -> dict[str, Any]:
    inner = resp.get("result", resp)
    assert isinstance(inner, dict)
    return inner


def _tasks(ov: SyncHTTPClient) -> list[Any]:
    tasks = _result(ov.list_watches())["tasks"]
    assert isinstance(tasks, list)
    return tasks


def _names(ov: SyncHTTPClient) -> set[str]:
    try:
        return {str(e["name"]) for e in ov.ls("viking://resources/team")}
    except OpenVikingError:
        return set()


def test_unlimited_accounts_check_nothing(tenant: Tenant) -> None:
    # the default plan: many requests, sessions and writes without any refusal
    for _ in range(30):
        tenant.ov.ls("viking://")
    for i in range(5):
        tenant.ov.create_session()
        tenant.ov.write(f"viking://resources/free/{i}.md", f"# {i}\n")
    assert len(tenant.ov.list_sessions()) == 5
