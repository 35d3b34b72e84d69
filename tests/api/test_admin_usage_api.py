"""GET /api/v1/admin/accounts/{id}/usage: what an account holds, for root and its admins."""

from __future__ import annotations

import uuid

import httpx

from tests.api.conftest import ROOT_KEY, make_client
from tests.support.server import SkaldServer


def test_usage_counts_users_sessions_and_records(key_server: SkaldServer) -> None:
    account = "use-" + uuid.uuid4().hex[:8]
    root = make_client(key_server.url, api_key=ROOT_KEY)
    admin_key = root.admin_create_account(account, "ann")["user_key"]
    user_key = root.admin_register_user(account, "ben", "user")["user_key"]
    root.close()
    ann = make_client(key_server.url, api_key=admin_key)
    ann.write("viking://resources/notes/a.md", "# A\n\nFirst note.\n", mode="create", wait=True)
    sid = ann.create_session()["session_id"]
    ann.add_message(sid, "user", "hello")
    ann.add_message(sid, "assistant", "hi")
    ann.commit_session(sid)
    ann.wait_processed()
    ann.close()

    path = f"/api/v1/admin/accounts/{account}/usage"
    with httpx.Client(base_url=key_server.url) as http:
        for key in (ROOT_KEY, admin_key):
            r = http.get(path, headers={"X-API-Key": key})
            assert r.status_code == 200, r.text
            usage = r.json()["result"]
            assert usage["account_id"] == account
            assert usage["users"] == {"total": 2, "admin": 1, "user": 1}
            assert usage["sessions"] == {"total": 1, "messages": 2, "commits": 1}
            records = usage["records"]
            assert records["resource"] >= 1 and records["memory"] >= 1
            assert records["total"] >= records["resource"] + records["memory"]
        denied = http.get(path, headers={"X-API-Key": user_key})
        assert denied.status_code == 403
        assert denied.json()["error"]["code"] == "PERMISSION_DENIED"
        other = http.get(
            "/api/v1/admin/accounts/nope-" + uuid.uuid4().hex[:6] + "/usage",
            headers={"X-API-Key": ROOT_KEY},
        )
        assert other.status_code == 404
        assert other.json()["error"]["code"] == "NOT_FOUND"
        assert http.get(path).status_code == 401
