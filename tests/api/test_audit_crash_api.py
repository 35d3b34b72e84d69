"""The audit record is durable before its action runs: a real `skald serve` killed (os._exit,
as kill -9) right after writing the record of an rm, then restarted on the same data dir,
lists the record as pending, and the file was never removed."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest

from skald.services.faults import EXIT_CODE
from tests.api.conftest import make_client
from tests.support.server import SkaldServer

ROOT_KEY = "crash-root-" + uuid.uuid4().hex


def test_a_record_written_before_a_crash_is_listed_pending(tmp_path: Path) -> None:
    server = SkaldServer(tmp_path / "data", root_api_key=ROOT_KEY)
    server.start()
    try:
        root = make_client(server.url, api_key=ROOT_KEY)
        key = root.admin_create_account("crashco", "ada")["user_key"]
        root.close()
        ada = make_client(server.url, api_key=key)
        ada.write("viking://resources/kept.md", "still here", mode="create")
        ada.close()
        server.stop()

        server.extra_env = {"SKALD_FAULT_POINTS": "audit.after_record=exit"}
        server.start()
        with pytest.raises(httpx.HTTPError):  # the connection dies with the server
            httpx.delete(
                server.url + "/api/v1/fs",
                headers={"X-API-Key": key},
                params={"uri": "viking://resources/kept.md"},
                timeout=60,
            )
        assert server.proc is not None and server.proc.wait(timeout=30) == EXIT_CODE

        server.extra_env = {}
        server.start()
        listed = httpx.get(
            server.url + "/api/v1/console/audit",
            headers={"X-API-Key": key},
            params={"status": "pending"},
            timeout=60,
        ).json()["result"]
        [item] = listed["items"]
        assert (item["action"], item["target"], item["outcome"], item["status_code"]) == (
            "fs.rm",
            "viking://resources/kept.md",
            "pending",
            0,
        )
        assert (item["user_id"], item["source_ip"]) == ("ada", "127.0.0.1")
        ada = make_client(server.url, api_key=key)
        assert ada.read("viking://resources/kept.md") == "still here"
        ada.close()
    finally:
        server.stop()
