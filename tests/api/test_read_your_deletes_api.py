"""Read your deletes: once a removal answers (rm of a folder or a file, mv of the source, a
session's delete, the MCP forget tool), no find, search (every search type, context mode),
grep, glob or MCP retrieval answers the removed text or a directory summary quoting it: the
summaries above the removed path are refreshed later, by the semantic job, and until then
they are out of the index. On `skald serve` (embedded index) and on `--backend aws-local`
(OpenSearch on osmem-server: keyword retrieval only, as it has no k-NN).

The semantic worker is held while a removal is probed (tests/support/llm_gate.py): its job
cannot run before the probes, so they see what the removal's answer alone did, whatever the
timing. Each probe follows the removal at once, with no wait."""

from __future__ import annotations

import json
import random
import string
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from openviking_sdk import SyncHTTPClient
from openviking_sdk.errors import NotFoundError

from tests.api.conftest import make_client
from tests.support.llm_gate import LlmGate
from tests.support.mcp_client import dev_headers, hit_uris, mcp_client, ok, run, wait_task
from tests.support.server import SkaldServer

TRIALS = 3  # the removal the defect was reported on
FEW = 2  # the other removals
HELD_BELOW = "viking://user/alice/resources"  # a namespace of its own, away from the tests'


@dataclass(frozen=True)
class Target:
    url: str
    dense: bool  # dense and hybrid retrieval (and so context mode) available
    gate: LlmGate


@pytest.fixture(scope="module", params=["local", "aws-local"])
def target(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Target]:
    env: dict[str, str] = {}
    if request.param == "aws-local":
        pytest.importorskip("moto")
        pytest.importorskip("osmem_server")
        env["SKALD_BACKEND"] = "aws-local"
    gate = LlmGate()
    server = SkaldServer(
        tmp_path_factory.mktemp(f"rydel-{request.param}") / "data", env={**env, **gate.env}
    )
    try:
        server.start(timeout_s=180)
        yield Target(server.url, request.param == "local", gate)
    finally:
        server.stop()
        gate.close()


@dataclass
class Caller:
    target: Target
    account: str
    client: SyncHTTPClient
    http: httpx.Client

    @property
    def types(self) -> list[str]:
        return ["hybrid", "semantic", "keywords"] if self.target.dense else ["keywords"]

    def held(self) -> Any:
        """The semantic worker held for the block (no job runs), then drained."""
        return self.target.gate.held(self.client.write, HELD_BELOW)


@pytest.fixture
def caller(target: Target) -> Iterator[Caller]:
    account = "rydel-" + uuid.uuid4().hex[:10]
    client = make_client(target.url, account=account, user="alice")
    with httpx.Client(base_url=target.url, timeout=60, headers=dev_headers(account)) as http:
        yield Caller(target, account, client, http)
    client.close()


def word() -> str:
    """A word no other text holds (letters only: the tokenizer keeps it whole)."""
    return "ryd" + "".join(random.choice(string.ascii_lowercase) for _ in range(10))


def retrieval(c: Caller, query: str, above: Sequence[str] = ()) -> dict[str, Any]:
    """Every retrieval answer for `query`, by route: find and search in each search type,
    context mode, grep and glob over the whole tree, and the MCP find and search tools; and
    grep of the summaries of the directories `above` a removed path, whose sidecar files
    still quote it until their refresh (grep never reads a sidecar: 404)."""
    out: dict[str, Any] = {}
    for d in above:
        for name in (".abstract.md", ".overview.md"):
            with pytest.raises(NotFoundError):
                c.client.grep(f"{d}/{name}", query, case_insensitive=True)
    out["glob sidecars"] = c.client.glob("**/.*", uri="viking://resources")
    for kind in c.types:
        out[f"find/{kind}"] = c.client.find(
            query, limit=50, options={"extra": {"search_type": kind}}
        )
        # (The SDK types search_type as semantic or keywords; the server takes hybrid too.)
        options: Any = {"search_type": kind}
        out[f"search/{kind}"] = c.client.search(query, limit=50, options=options)
        # Directory summaries only: no file below them hides them from the answer.
        out[f"search/{kind}/summaries"] = c.client.search(
            query, limit=50, options={**options, "level": [0, 1]}
        )
    if c.target.dense:
        out["context"] = c.client.search_context(query, options={"max_tokens": 8000})
    for scope in ("viking://resources", "viking://user"):
        out[f"grep {scope}"] = c.client.grep(scope, query, case_insensitive=True)
        out[f"glob {scope}"] = c.client.glob(f"**/*{query}*", uri=scope)
    kind = "hybrid" if c.target.dense else "keywords"

    async def tools() -> None:
        async with mcp_client(c.target.url, dev_headers(c.account)) as m:
            for tool in ("find", "search"):
                out[f"mcp {tool}"] = ok(
                    await m.call_tool(tool, {"query": query, "search_type": kind, "limit": 50})
                )

    run(tools)
    return out


def quoting(answers: dict[str, Any], text: str) -> list[str]:
    """The routes whose answer holds `text` (other than the query that context mode's
    stats repeat)."""

    def found(answer: Any) -> Any:
        if isinstance(answer, dict) and isinstance(answer.get("stats"), dict):
            answer = {
                **answer,
                "stats": {k: v for k, v in answer["stats"].items() if k != "queries"},
            }
        return answer

    return [
        route
        for route, answer in answers.items()
        if text.lower() in json.dumps(found(answer), default=str).lower()
    ]


def uris_below(answers: dict[str, Any], prefix: str) -> list[str]:
    found: list[str] = []
    for answer in answers.values():
        if isinstance(answer, dict):
            found += [u for u in hit_uris(answer) if u == prefix or u.startswith(prefix + "/")]
    return found


def keyword_hits(c: Caller, query: str, *, summaries: bool = False) -> list[str]:
    """The URIs keyword search finds; with `summaries`, of directory summaries only (a
    summary gives way to a file found below it)."""
    res = c.client.search(
        query,
        limit=50,
        options={"search_type": "keywords", **({"level": [0, 1]} if summaries else {})},
    )
    return hit_uris(res)


def rm(c: Caller, uri: str, recursive: bool) -> dict[str, Any]:
    r = c.http.delete("/api/v1/fs", params={"uri": uri, "recursive": recursive})
    assert r.status_code == 200, r.text
    result: dict[str, Any] = r.json()["result"]
    return result


def seed(c: Caller, files: dict[str, str]) -> None:
    """Writes `files` (URI -> text) in one request and waits until all is processed."""
    res = c.client.batch_write(
        "viking://resources",
        [{"uri": uri, "content": text} for uri, text in files.items()],
        wait=True,
    )
    assert res["written"] == len(files), res
    c.client.wait_processed()


def test_rm_of_a_folder_leaves_nothing_that_quotes_it(caller: Caller) -> None:
    c = caller
    secrets = [word() for _ in range(TRIALS)]
    seed(
        c,
        {
            "viking://resources/kept/keep.md": "# Kept\n\nThe kept note stays.\n",
            **{
                f"viking://resources/proj{i}/b/{secret}.md": (
                    f"# Ownership\n\nTeam Alpha owns the pipeline {secret}.\n"
                )
                for i, secret in enumerate(secrets)
            },
            **{
                f"viking://resources/proj{i}/other.md": "# Other\n\nMarmalade on toast.\n"
                for i in range(TRIALS)
            },
        },
    )
    for i, secret in enumerate(secrets):
        # The directories above quote it: the case this test is about.
        assert keyword_hits(c, secret, summaries=True)
        folder = f"viking://resources/proj{i}/b"
        with c.held():
            gone = rm(c, folder, True)
            answers = retrieval(c, secret, [f"viking://resources/proj{i}", "viking://resources"])
            assert quoting(answers, secret) == [], answers
            assert uris_below(answers, folder) == []
            assert isinstance(gone["memory_cleanup"]["removed_records"], int)
            assert gone["memory_cleanup"]["removed_records"] >= 1, gone
        # The summaries come back once the semantic job refreshed them, without the text.
        c.client.wait_processed()
        assert any(
            u.startswith(f"viking://resources/proj{i}/.")
            for u in keyword_hits(c, "marmalade", summaries=True)
        )
        assert quoting(retrieval(c, secret), secret) == []
    assert "viking://resources/proj0/other.md" in keyword_hits(c, "marmalade")


def test_rm_of_a_file_leaves_nothing_that_quotes_it(caller: Caller) -> None:
    c = caller
    secrets = [word() for _ in range(FEW)]
    seed(
        c,
        {
            **{
                f"viking://resources/notes{i}/deep/{secret}.md": (
                    f"# Secret\n\nThe launch code is {secret}.\n"
                )
                for i, secret in enumerate(secrets)
            },
            **{
                f"viking://resources/notes{i}/deep/plain.md": "# Plain\n\nA plain note.\n"
                for i in range(FEW)
            },
        },
    )
    for i, secret in enumerate(secrets):
        assert keyword_hits(c, secret, summaries=True)
        with c.held():
            gone = rm(c, f"viking://resources/notes{i}/deep/{secret}.md", False)
            answers = retrieval(c, secret)
            assert quoting(answers, secret) == [], answers
            assert gone["memory_cleanup"]["removed_records"] == 1, gone
        c.client.wait_processed()
        assert quoting(retrieval(c, secret), secret) == []


def test_mv_leaves_nothing_at_the_old_path(caller: Caller) -> None:
    c = caller
    secrets = [word() for _ in range(FEW)]
    seed(
        c,
        {
            **{
                f"viking://resources/box{i}/oldplace/note.md": f"# Note\n\nMoved {secret}.\n"
                for i, secret in enumerate(secrets)
            },
            **{f"viking://resources/box{i}/stay.md": "# Stay\n\nStays.\n" for i in range(FEW)},
        },
    )
    for i, secret in enumerate(secrets):
        old = f"viking://resources/box{i}/oldplace"
        new = f"viking://resources/box{i}/newplace"
        assert any(u.startswith(old) for u in keyword_hits(c, secret))
        with c.held():
            c.client.mv(old, new)
            answers = retrieval(c, secret)
            # Nothing names the old path: no record below it, no summary above it listing
            # it (the new path is indexed by the job).
            assert quoting(answers, f"box{i}/oldplace") == [], answers
        c.client.wait_processed()
        assert f"{new}/note.md" in keyword_hits(c, secret)
        assert quoting(retrieval(c, secret), f"box{i}/oldplace") == []


def test_a_deleted_session_leaves_nothing_that_quotes_it(caller: Caller) -> None:
    c = caller
    secret = word()
    s = c.client.session("chat-" + uuid.uuid4().hex[:6])
    s.add_message("user", f"Our standup codename is {secret} this quarter.")
    s.add_message("assistant", "Noted.")
    res = s.commit()
    assert wait_task(c.client, res["task_id"])["status"] == "completed"
    c.client.wait_processed()
    base = f"viking://user/alice/sessions/{s.session_id}"
    # The archive's summary and the summaries above it quote it (no memory was extracted).
    assert any(u.startswith(base) for u in keyword_hits(c, secret))
    assert keyword_hits(c, secret, summaries=True)
    with c.held():
        r = c.http.delete(f"/api/v1/sessions/{s.session_id}")
        assert r.status_code == 200, r.text
        answers = retrieval(c, secret)
        assert quoting(answers, secret) == [], answers
    c.client.wait_processed()
    assert quoting(retrieval(c, secret), secret) == []


def test_the_mcp_forget_tool_leaves_nothing_that_quotes_it(caller: Caller) -> None:
    c = caller
    secret = word()
    seed(
        c,
        {
            f"viking://resources/tools/{secret}.md": f"# Tool\n\nThe forgotten tool {secret}.\n",
            "viking://resources/tools/hammer.md": "# Hammer\n\nA hammer.\n",
        },
    )
    assert keyword_hits(c, secret, summaries=True)

    async def forget() -> dict[str, Any]:
        async with mcp_client(c.target.url, dev_headers(c.account)) as m:
            return ok(await m.call_tool("forget", {"uri": f"viking://resources/tools/{secret}.md"}))

    with c.held():
        gone = run(forget)
        answers = retrieval(c, secret)
        assert quoting(answers, secret) == [], answers
        assert gone["memory_cleanup"]["removed_records"] == 1, gone


def test_a_rewrite_right_after_rm_keeps_its_records(caller: Caller) -> None:
    """rm then an immediate write of the same path: the removal's later job must not drop
    the new file's records."""
    c = caller
    firsts, seconds = [word() for _ in range(FEW)], [word() for _ in range(FEW)]
    seed(
        c,
        {
            **{
                f"viking://resources/again{i}/doc.md": f"# Doc\n\nFirst version {first}.\n"
                for i, first in enumerate(firsts)
            },
            **{f"viking://resources/again{i}/peer.md": "# Peer\n\nA peer.\n" for i in range(FEW)},
        },
    )
    for i, (first, second) in enumerate(zip(firsts, seconds, strict=True)):
        uri = f"viking://resources/again{i}/doc.md"
        with c.held():
            rm(c, uri, False)
            c.client.write(uri, f"# Doc\n\nSecond version {second}.\n")
            assert quoting(retrieval(c, first), first) == []
        c.client.wait_processed()
        assert uri in keyword_hits(c, second)
        assert quoting(retrieval(c, first), first) == []
