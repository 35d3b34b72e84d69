"""Remote sources through openviking-sdk: web pages and git repositories served from loopback
(the test-only loopback allowance), fetched by the fetch worker, found by their content; and
every refusal with its cause, nothing left behind."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import httpx
import pytest
from openviking_sdk import SyncHTTPClient

from tests.api.conftest import make_client
from tests.support.mcp_client import dev_headers, error, hit_uris, mcp_client, ok, run, wait_task
from tests.support.remote_fixtures import Site, make_repo, serve_site, slow
from tests.support.server import SkaldServer, free_port

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs the git client")

ARTICLE = """<html><head><title>Zebra migration</title></head><body>
<nav><a href="/">Home</a> | <a href="/about">About</a></nav>
<main><h1>Zebra migration</h1>
<p>Every year the zebras of the Serengeti walk north to the Masai Mara following the rain.</p>
<table><tr><th>Month</th><th>Place</th></tr><tr><td>July</td><td>Mara river</td></tr></table>
<p>See <a href="/guide/herds.html">the herds page</a>.</p></main>
<footer>copyright</footer></body></html>"""


SITE = {
    "/lab/index.html": "<main><h1>Lab handbook</h1><p>Start here.</p><ul>"
    '<li><a href="setup.html">Setup</a></li><li><a href="api/keys.html#top">Keys</a></li>'
    '<li><a href="/outside.html">Elsewhere</a></li><li><a href="missing.html">Gone</a></li>'
    '<li><a href="http://example.invalid/x.html">Away</a></li></ul></main>',
    "/lab/setup.html": "<main><h1>Setup</h1><p>Calibrate the centrifuge with the blue rotor "
    'before every run.</p><a href="deep/one.html">More</a> <a href="index.html">Home</a>'
    "</main>",
    "/lab/api/keys.html": "<main><h1>Keys</h1><p>Badge keys open the cold room.</p></main>",
    "/lab/deep/one.html": '<main><h1>One</h1><p>Depth two.</p><a href="two.html">Deeper</a></main>',
    "/lab/deep/two.html": "<main><h1>Two</h1><p>Too deep to follow.</p></main>",
    "/outside.html": "<main><p>Not part of the lab.</p></main>",
}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    root = tmp_path_factory.mktemp("git")
    make_repo(
        root / "team",
        "tools",
        {
            "README.md": b"# Tools\n\nThe lighthouse keeper's toolkit for foghorn calibration.\n",
            "docs/usage.md": (
                b"# Usage\n\nCalibrate the foghorn at dawn with the brass tuning fork.\n"
            ),
            "docs/build/generated.md": b"# Generated\n\nbuild output\n",
            "src/horn.py": (
                b'"""Foghorn driver."""\n\n\ndef blast(seconds: int) -> None:\n    pass\n'
            ),
            "assets/blob.bin": b"\x00\x01\x02\x03" * 64,
        },
        tag="v1",
    )
    with serve_site(root) as s:
        s.page("/guide/zebras.html", ARTICLE)
        for path, body in SITE.items():
            s.page(path, body)
        s.page(
            "/notes.md", "# Notes\n\nThe okapi is a giraffid with striped legs.\n", "text/markdown"
        )
        s.page("/big", b"x" * (300 * 1024), "text/plain")
        s.pages["/slow"] = slow(8)
        s.page("/gone", "missing", status=404)
        s.redirect("/hop", "/notes.md")
        s.redirect("/to-metadata", "http://169.254.169.254/latest/meta-data/")
        s.redirect("/to-private", "http://10.0.0.7/")
        s.redirect("/loop", "/loop")
        yield s


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SkaldServer]:
    srv = SkaldServer(
        tmp_path_factory.mktemp("remote") / "data",
        env={
            "SKALD_FETCH_ALLOW_LOOPBACK": "true",
            "SKALD_FETCH_TIMEOUT_S": "3",
            "SKALD_FETCH_MAX_BYTES": str(200 * 1024),
        },
    )
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def ov(server: SkaldServer, account: str) -> Iterator[SyncHTTPClient]:
    c = make_client(server.url, account=account, user="alice")
    yield c
    c.close()


def _failed(ov: SyncHTTPClient, path: str) -> tuple[dict[str, object], str]:
    out = ov.add_resource(path, wait=True)
    task = ov.get_task(out["task_id"])
    assert task["status"] == "failed", task
    return out, str(task["error"])


def test_a_page_is_fetched_by_the_worker_converted_and_found(
    ov: SyncHTTPClient, site: Site
) -> None:
    out = ov.add_resource(f"{site.url}/guide/zebras.html", wait=True)
    assert out["root_uri"] == "viking://resources/zebras"
    assert out["source_path"] == f"{site.url}/guide/zebras.html"
    assert ov.get_task(out["task_id"])["status"] == "completed"
    text = ov.read("viking://resources/zebras/zebras.html")
    assert "Serengeti" in text and "Mara river" in text and "Home" not in text
    assert "<main>" not in text
    hits = ov.find("where do zebras walk every year", target_uri="viking://resources/zebras")
    assert hits["resources"] and hits["resources"][0]["uri"].startswith("viking://resources/zebras")


def test_a_page_without_wait_answers_a_task_and_a_redirect_is_followed(
    ov: SyncHTTPClient, site: Site
) -> None:
    out = ov.add_resource(f"{site.url}/hop")
    assert out["root_uri"] == "viking://resources/hop" and out["task_id"]
    ov.wait_processed()
    assert ov.get_task(out["task_id"])["status"] == "completed"
    assert "okapi" in ov.read("viking://resources/hop/hop.md")


def test_a_git_repository_lands_under_owner_and_repo(ov: SyncHTTPClient, site: Site) -> None:
    out = ov.add_resource(
        f"{site.url}/git/team/tools.git", wait=True, options={"exclude": "build/"}
    )
    assert out["root_uri"] == "viking://resources/team/tools", out
    task = ov.get_task(out["task_id"])
    assert task["status"] == "completed", task["error"]
    files = sorted(
        e["uri"]
        for e in ov.ls("viking://resources/team/tools", recursive=True, simple=False)
        if not e["isDir"]
    )
    assert files == [
        "viking://resources/team/tools/README.md",
        "viking://resources/team/tools/docs/usage.md",
        "viking://resources/team/tools/src/horn.py",
    ]
    hits = ov.find("how to calibrate the foghorn", target_uri="viking://resources/team/tools")
    assert any("usage.md" in h["uri"] for h in hits["resources"])


def test_a_repository_subpath_and_tag(ov: SyncHTTPClient, site: Site) -> None:
    out = ov.add_resource(
        f"{site.url}/git/team/tools.git/docs", to="viking://resources/tool-docs", wait=True
    )
    task = ov.get_task(out["task_id"])
    assert task["status"] == "completed", task["error"]
    entries = ov.ls("viking://resources/tool-docs", recursive=True, simple=False)
    assert sorted(e["uri"] for e in entries if not e["isDir"]) == [
        "viking://resources/tool-docs/build/generated.md",
        "viking://resources/tool-docs/usage.md",
    ]


@pytest.mark.parametrize(
    ("path", "cause"),
    [
        ("/gone", "HTTP 404"),
        ("/big", "above the limit of 204800 bytes"),
        ("/slow", "Timed out"),
        (
            "/to-metadata",
            "Blocked address: 169.254.169.254 resolves to 169.254.169.254 "
            "(cloud metadata endpoint)",
        ),
        ("/to-private", "(private)"),
        ("/loop", "More than 5 redirects"),
    ],
)
def test_fetch_failures_end_the_task_with_their_cause_and_leave_nothing(
    ov: SyncHTTPClient, site: Site, path: str, cause: str
) -> None:
    out, error = _failed(ov, site.url + path)
    assert cause in error, error
    assert out["status"] == "error"
    root = str(out["root_uri"])
    assert root.rsplit("/", 1)[-1] not in [
        e.rsplit("/", 1)[-1].rstrip("/") for e in ov.ls("viking://resources", simple=True)
    ]


@pytest.mark.parametrize(
    ("url", "cause"),
    [
        ("http://169.254.169.254/latest/meta-data/", "cloud metadata endpoint"),
        ("http://[::ffff:169.254.169.254]/", "cloud metadata endpoint"),
        ("http://[fd00::1]/", "unique local (private)"),
        ("http://10.1.2.3/", "(private)"),
        ("http://host.invalid/page", "DNS lookup failed for host.invalid"),
    ],
)
def test_blocked_and_unresolvable_addresses(ov: SyncHTTPClient, url: str, cause: str) -> None:
    _, error = _failed(ov, url)
    assert cause in error, error


def test_connection_refused_and_missing_repository(ov: SyncHTTPClient, site: Site) -> None:
    _, error = _failed(ov, f"http://127.0.0.1:{free_port()}/x.html")
    assert "Connection refused" in error
    _, error = _failed(ov, f"{site.url}/git/team/nothing.git")
    assert "nothing.git" in error


def test_loopback_is_refused_without_the_test_allowance(
    dev_server: SkaldServer, client: SyncHTTPClient, site: Site
) -> None:
    out = client.add_resource(f"{site.url}/notes.md", wait=True)
    error = str(client.get_task(out["task_id"])["error"])
    assert "Blocked address: 127.0.0.1" in error and "(loopback)" in error
    resp = httpx.get(
        f"{dev_server.url}/api/v1/observer/system",
        headers={"X-OpenViking-Account": "a", "X-OpenViking-User": "u"},
    )
    assert resp.json()["result"]["features"]["remote_sources"] is True


def test_unfetchable_urls_are_refused_in_the_request(ov: SyncHTTPClient) -> None:
    for bad in ("git://example.com/r.git", "https://user:pw@example.com/x"):
        with pytest.raises(Exception) as exc:
            ov.add_resource(bad)
        assert (
            "INVALID_ARGUMENT" in str(exc.value)
            or "400" in str(exc.value)
            or "not fetched" in str(exc.value)
        )


def test_an_agent_adds_a_page_by_url_over_mcp(
    server: SkaldServer, ov: SyncHTTPClient, account: str, site: Site
) -> None:
    async def scenario() -> None:
        async with mcp_client(server.url, dev_headers(account)) as c:
            added = ok(await c.call_tool("add_resource", {"url": f"{site.url}/notes.md"}))
            assert added["root_uri"] == "viking://resources/notes" and added["task_id"]
            assert wait_task(ov, added["task_id"])["status"] == "completed"
            ov.wait_processed()
            found = ok(
                await c.call_tool(
                    "find",
                    {
                        "query": "which animal has striped legs",
                        "target_uri": "viking://resources/notes",
                    },
                )
            )
            assert hit_uris(found)[:1] == ["viking://resources/notes/notes.md"]
            for arguments, message in (
                ({"url": "file:///etc/passwd"}, "url must be"),
                ({"url": f"{site.url}/notes.md", "name": "a.md", "content": "x"}, "not both"),
                ({"name": "a.md"}, "give name and content"),
            ):
                err = error(await c.call_tool("add_resource", arguments))
                assert err["code"] == "INVALID_ARGUMENT" and message in err["message"], err

    run(scenario)


def test_a_site_of_linked_pages_is_crawled_below_its_folder(ov: SyncHTTPClient, site: Site) -> None:
    out = ov.add_resource(f"{site.url}/lab/index.html", wait=True)
    root = out["root_uri"]
    assert root == "viking://resources/index"
    assert ov.get_task(out["task_id"])["status"] == "completed"
    files = sorted(
        e["uri"].removeprefix(root + "/")
        for e in ov.tree(root, output="original")
        if not e["isDir"]
    )
    # linked pages two links deep, below /lab/ only; a broken link is left out
    assert files == ["api/keys.html", "deep/one.html", "index.html", "setup.html"]
    assert "blue rotor" in ov.read(f"{root}/setup.html")
    hits = ov.find("how do I calibrate the centrifuge", target_uri=root)
    assert hits["resources"][0]["uri"] == f"{root}/setup.html"
