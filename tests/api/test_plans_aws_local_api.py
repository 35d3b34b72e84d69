"""Plans on `skald serve --backend aws-local`: an account's settings are kept in the DynamoDB
state table (moto) and survive a restart, the sessions quota counts through the DynamoDB
session store, and the app's request rate applies there as in `skald serve`."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest
from openviking_sdk.errors import OpenVikingError

from tests.api.conftest import make_client
from tests.support.server import SkaldServer

pytest.importorskip("moto")
pytest.importorskip("osmem_server")

ROOT_KEY = "aws-plans-root-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def aws_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SkaldServer]:
    server = SkaldServer(
        tmp_path_factory.mktemp("awsplans") / "data",
        root_api_key=ROOT_KEY,
        env={"SKALD_BACKEND": "aws-local"},
    )
    server.start(timeout_s=120)
    yield server
    server.stop()


def test_settings_and_limits_on_dynamodb(aws_server: SkaldServer) -> None:
    url = aws_server.url
    root = make_client(url, api_key=ROOT_KEY)
    account = "aws-" + uuid.uuid4().hex[:8]
    key = root.admin_create_account(account, "ada")["user_key"]
    resp = httpx.patch(
        f"{url}/api/v1/admin/accounts/{account}/settings",
        json={"plan": "free", "limits": {"sessions": 1, "rate_per_s": 0.5, "burst": 4}},
        headers={"X-API-Key": ROOT_KEY},
        timeout=60,
    )
    assert resp.status_code == 200, resp.text
    view = root.admin_get_account_settings(account)
    assert view["overrides"] == {
        "plan": "free",
        "limits": {"sessions": 1, "rate_per_s": 0.5, "burst": 4},
    }
    # listed with the account too (its copy in the listing changed with it)
    listed = [a for a in root.admin_list_accounts() if a["account_id"] == account]
    assert listed[0]["settings"]["plan"] == "free"

    ada = make_client(url, api_key=key)  # initialize: one request of the burst
    ada.create_session()
    with pytest.raises(OpenVikingError) as err:
        ada.create_session()
    assert err.value.code == "QUOTA_EXCEEDED"
    assert err.value.details == {"limit": "sessions", "value": 1, "current": 1, "requested": 1}
    assert len(ada.list_sessions()) == 1
    # the rest of the burst, then refused (a token comes back every 2 s meanwhile)
    statuses = [
        httpx.get(f"{url}/api/v1/fs/ls", params={"uri": "viking://"}, headers={"X-API-Key": key})
        for _ in range(12)
    ]
    refused = [r for r in statuses if r.status_code != 200]
    assert refused and all(r.status_code == 429 for r in refused), statuses
    assert int(refused[0].headers["Retry-After"]) >= 1
    ada.close()
    root.close()
