"""A real `skald serve` killed in the middle of adding an upload, then restarted on the same
data dir, and the add retried with the same temp_file_id.

SKALD_FAULT_POINTS ends the server with os._exit (as kill -9 would) once the root is reserved
and before any file is written, then, on the second attempt, once the files are written and
before the add's task is recorded. The upload is the add's record until then: each retry
lands in the root the first attempt reserved, and nothing is left beside it.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import httpx
import pytest

from skald.services.faults import EXIT_CODE
from tests.api.conftest import make_client
from tests.api.test_sessions_api import wait_task
from tests.support.server import SkaldServer

HEADERS = {"X-OpenViking-Account": "crash", "X-OpenViking-User": "alice"}
FILES = {
    "corpus/lighthouse.md": "# Lighthouse\n\nThe keeper logs every passing ship.\n",
    "corpus/tides.md": "# Tides\n\nSpring tides follow the full moon.\n",
}


def _corpus_zip() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        for name, text in FILES.items():
            zf.writestr(name, text)
    return out.getvalue()


def _add(server: SkaldServer, temp_id: str) -> httpx.Response:
    return httpx.post(
        f"{server.url}/api/v1/resources",
        headers=HEADERS,
        timeout=120,
        json={"temp_file_id": temp_id, "wait": True},
    )


def test_an_add_killed_before_its_task_is_retried_into_the_same_root(tmp_path: Path) -> None:
    server = SkaldServer(tmp_path / "data", env={"SKALD_FAULT_POINTS": "resources.after_root=exit"})
    server.start()
    try:
        up = httpx.post(
            f"{server.url}/api/v1/resources/temp_upload",
            headers=HEADERS,
            files={"file": ("corpus.zip", _corpus_zip())},
            timeout=60,
        )
        temp_id = up.json()["result"]["temp_file_id"]
        for point in ("resources.after_root", "resources.after_files"):
            with pytest.raises(httpx.HTTPError):  # the connection dies with the server
                _add(server, temp_id)
            assert server.proc is not None and server.proc.wait(timeout=30) == EXIT_CODE, point
            server.extra_env = {"SKALD_FAULT_POINTS": "resources.after_files=exit"}
            if point == "resources.after_root":
                server.start()

        server.extra_env = {}  # the same data dir, no crash point: a plain restart
        server.start()
        added = _add(server, temp_id)
        assert added.status_code == 200, added.text
        result = added.json()["result"]
        assert result["root_uri"] == "viking://resources/corpus"
        c = make_client(server.url, account="crash", user="alice")
        assert wait_task(c, result["task_id"])["status"] == "completed"
        # One root, no numbered sibling beside an empty orphan.
        names = [e["uri"] for e in c.ls("viking://resources")]
        assert names == ["viking://resources/corpus"], names
        assert sorted(e["uri"] for e in c.ls("viking://resources/corpus")) == [
            "viking://resources/corpus/lighthouse.md",
            "viking://resources/corpus/tides.md",
        ]
        assert "passing ship" in c.read("viking://resources/corpus/lighthouse.md")
        found = c.find("who logs the ships", target_uri="viking://resources/corpus")
        assert found["resources"][0]["uri"] == "viking://resources/corpus/lighthouse.md"
        checked = httpx.post(
            f"{server.url}/api/v1/system/consistency",
            headers=HEADERS,
            json={"uri": "viking://resources"},
            timeout=60,
        ).json()["result"]
        assert checked["ok"], checked
        # The add is recorded by its task now: the upload is consumed.
        again = _add(server, temp_id)
        assert again.status_code == 404 and again.json()["error"]["code"] == "NOT_FOUND"
        c.close()
    finally:
        server.stop()


def test_a_second_add_of_the_same_source_still_gets_a_numbered_root(tmp_path: Path) -> None:
    # What the retry reuses is the root its own upload reserved, never another add's.
    server = SkaldServer(tmp_path / "data")
    server.start()
    try:
        roots = []
        for _ in range(2):
            up = httpx.post(
                f"{server.url}/api/v1/resources/temp_upload",
                headers=HEADERS,
                files={"file": ("corpus.zip", _corpus_zip())},
                timeout=60,
            )
            added = _add(server, up.json()["result"]["temp_file_id"])
            roots.append(added.json()["result"]["root_uri"])
        assert roots == ["viking://resources/corpus", "viking://resources/corpus_1"]
    finally:
        server.stop()
