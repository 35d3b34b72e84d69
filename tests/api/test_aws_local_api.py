"""End to end on `skald serve --backend aws-local`: the AWS adapters (S3, DynamoDB, SQS and
the worker Lambda handlers on moto; OpenSearch on osmem-server) driven by openviking-sdk.
Dense retrieval is excluded: no k-NN engine runs here, and find answers a clear 400."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from openviking_sdk import SyncHTTPClient
from openviking_sdk.errors import (
    AlreadyExistsError,
    InvalidArgumentError,
    NotFoundError,
    OpenVikingError,
)

from tests.api.conftest import make_client
from tests.support.mcp_client import (
    TOOLS,
    dev_headers,
    error,
    hit_uris,
    mcp_client,
    ok,
    run,
    text,
    wait_task,
)
from tests.support.server import SkaldServer
from tests.support.tenancy_capture import check_capture_file

pytest.importorskip("moto")
pytest.importorskip("osmem_server")


@pytest.fixture(scope="module")
def aws_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SkaldServer]:
    # Every AWS request the server sends while the module runs is captured with the tenant of
    # its call, and must name exactly that account (tests/support/tenancy.py).
    work = tmp_path_factory.mktemp("awslocal")
    server = SkaldServer(
        work / "data", env={"SKALD_BACKEND": "aws-local"}, capture=work / "requests.jsonl"
    )
    server.start(timeout_s=120)
    yield server
    server.stop()
    assert server.capture is not None
    check_capture_file(server.capture, tenants=1)


@pytest.fixture(scope="module")
def c(aws_server: SkaldServer) -> Iterator[SyncHTTPClient]:
    client = make_client(aws_server.url, account="aws", user="ann")
    yield client
    client.close()


def test_fs_and_content(c: SyncHTTPClient) -> None:
    c.mkdir("viking://resources/notes", description="Notes kept in S3.")
    c.write("viking://resources/notes/a.md", "# Alpha\n\nFirst line.\n", wait=True)
    c.write("viking://resources/notes/a.md", "Second line.\n", mode="append", wait=True)
    assert c.read("viking://resources/notes/a.md") == "# Alpha\n\nFirst line.\nSecond line.\n"
    with pytest.raises(AlreadyExistsError):
        c.write("viking://resources/notes/a.md", "x", mode="create")
    assert [e["name"] for e in c.ls("viking://resources/notes")] == ["a.md"]
    assert c.abstract("viking://resources/notes") == "Notes kept in S3."
    assert "a.md" in c.overview("viking://resources/notes")
    c.set_tags("viking://resources/notes/a.md", ["k=v"])
    assert c.attrs("viking://resources/notes/a.md")["attrs"]["tags"] == ["k=v"]
    c.mv("viking://resources/notes", "viking://resources/moved")
    assert c.read("viking://resources/moved/a.md").startswith("# Alpha")
    with pytest.raises(NotFoundError):
        c.stat("viking://resources/notes")
    c.rm("viking://resources/moved", recursive=True)
    with pytest.raises(NotFoundError):
        c.read("viking://resources/moved/a.md")


def test_resources_grep_glob_and_keywords(c: SyncHTTPClient, tmp_path: Path) -> None:
    src = tmp_path / "handbook"
    (src / "ops").mkdir(parents=True)
    (src / "ops" / "backups.md").write_text("# Backups\n\nSnapshots run nightly at 02:00.\n")
    (src / "intro.md").write_text("# Intro\n\nWelcome to the handbook.\n")
    res = c.add_resource(str(src), wait=True)
    assert res["root_uri"] == "viking://resources/handbook"
    c.wait_processed()
    assert c.get_task(res["task_id"])["status"] == "completed"
    grep = c.grep("viking://resources/handbook", "nightly")
    assert [m["uri"] for m in grep["matches"]] == ["viking://resources/handbook/ops/backups.md"]
    assert sorted(c.glob("**/*.md", uri="viking://resources/handbook")["matches"]) == [
        "viking://resources/handbook/intro.md",
        "viking://resources/handbook/ops/backups.md",
    ]
    hits = c.search("snapshots nightly", options={"search_type": "keywords"})
    files = [h["uri"] for h in hits["resources"] if h["level"] == 2]
    assert files[0] == "viking://resources/handbook/ops/backups.md"


def test_a_folder_whose_job_exceeds_one_sqs_message_is_indexed_completely(
    c: SyncHTTPClient, tmp_path: Path
) -> None:
    """400 files with long names: the semantic job lists ~290 KB of URIs, more than one SQS
    message holds (256 KiB). Its payload goes through the bucket, and every file is indexed."""
    long_dirs = ("d" * 240, "e" * 240)
    deep = tmp_path.joinpath("archive", *long_dirs)
    deep.mkdir(parents=True)
    # Siblings at each level: an upload's lone top directory would be folded away.
    for level in (deep.parent, deep.parent.parent):
        (level / "index.md").write_text("# Index\n")
    count = 400
    names = [f"{i:04d}-" + "n" * 215 + ".md" for i in range(count)]
    for i, name in enumerate(names):
        (deep / name).write_text(f"# Note {i}\n\nzebra{i:04d}\n")
    folder = "viking://resources/archive/" + "/".join(long_dirs)
    assert sum(len(f"{folder}/{name}") for name in names) > 256 * 1024
    res = c.add_resource(str(tmp_path / "archive"), wait=True)
    c.wait_processed()
    task = c.get_task(res["task_id"])
    assert task["status"] == "completed", task
    assert task["result"]["indexed_files"] == count + 2
    for i in (0, count // 2, count - 1):
        hits = c.search(f"zebra{i:04d}", options={"search_type": "keywords"})
        assert [h["uri"].rsplit("/", 1)[-1][:4] for h in hits["resources"] if h["level"] == 2][
            :1
        ] == [f"{i:04d}"], hits


def test_dense_find_is_a_clear_error(c: SyncHTTPClient) -> None:
    with pytest.raises(InvalidArgumentError) as exc:
        c.find("anything")
    assert "k-NN" in exc.value.message


def test_sessions_commit_and_memories(c: SyncHTTPClient) -> None:
    s = c.session("aws-chat")
    s.add_message("user", "My name is Ann Lee and I prefer oolong tea.")
    s.add_message("assistant", "Noted.")
    res = s.commit()
    task = wait_task(c, res["task_id"])
    assert task["status"] == "completed", task
    diff = json.loads(c.read(res["archive_uri"] + "/memory_diff.json"))
    assert any(op["memory_type"] == "preferences" for op in diff["operations"]["adds"])
    meta = c.get_session("aws-chat")
    assert meta["commit_count"] == 1 and meta["message_count"] == 0
    hits = c.search("oolong", options={"search_type": "keywords", "context_type": "memory"})
    assert any("preferences" in h["uri"] for h in hits["memories"])
    with pytest.raises(OpenVikingError):
        c.get_session_archive("aws-chat", "archive_002")


def test_accounts_are_partitioned(aws_server: SkaldServer, c: SyncHTTPClient) -> None:
    c.write("viking://resources/private.md", "only for aws", wait=True)
    other = make_client(aws_server.url, account="other", user="ann")
    with pytest.raises(NotFoundError):
        other.read("viking://resources/private.md")


def test_mcp_agent_loop(aws_server: SkaldServer, c: SyncHTTPClient) -> None:
    """The MCP endpoint on the AWS adapters: find (keywords: no k-NN here) -> read ->
    remember -> find, the new memory found once its commit task completed."""

    async def scenario() -> None:
        async with mcp_client(aws_server.url, dev_headers("aws-mcp", "max")) as m:
            assert {t.name for t in (await m.list_tools()).tools} == TOOLS
            added = ok(
                await m.call_tool(
                    "add_resource",
                    {
                        "name": "kettle.md",
                        "wait": True,
                        "content": "# Kettle\n\nDescale the kettle with citric acid monthly.\n",
                    },
                )
            )
            assert added["root_uri"] == "viking://resources/kettle"
            found = ok(
                await m.call_tool(
                    "find", {"query": "descale kettle citric", "search_type": "keywords"}
                )
            )
            assert "viking://resources/kettle/kettle.md" in hit_uris(found)
            read = await m.call_tool("read", {"uris": "viking://resources/kettle/kettle.md"})
            assert "citric acid" in text(read)
            dense = error(await m.call_tool("find", {"query": "kettle"}))
            assert dense["code"] == "INVALID_ARGUMENT" and "k-NN" in dense["message"]
            stored = ok(
                await m.call_tool(
                    "remember",
                    {
                        "messages": [
                            {"role": "user", "content": "I prefer rooibos tea in the evening."}
                        ]
                    },
                )
            )
            api = make_client(aws_server.url, account="aws-mcp", user="max")
            assert wait_task(api, stored["task_id"])["status"] == "completed"
            api.close()
            again = ok(
                await m.call_tool(
                    "find",
                    {"query": "rooibos", "context_type": "memory", "search_type": "keywords"},
                )
            )
            memories = [u for u in hit_uris(again) if "/memories/preferences/" in u]
            assert memories, again
            assert "rooibos" in text(await m.call_tool("read", {"uris": memories[0]})).lower()

    run(scenario)


def test_the_queues_count_the_jobs_their_workers_ran(c: SyncHTTPClient) -> None:
    # The worker Lambdas are handed their jobs by the event source mapping, which deletes each
    # message itself: the counts of settled jobs (the observer's, the wait's) come from them.
    before = c.wait_processed()["Semantic"]["processed"]
    c.write("viking://resources/counted/a.md", "# Counted\n\nOne job, counted.\n", wait=True)
    after = c.wait_processed()["Semantic"]
    assert after["processed"] > before, after
    assert after["pending"] == 0 and after["in_progress"] == 0


def test_the_ready_line_names_the_emulated_backend(aws_server: SkaldServer) -> None:
    log = aws_server.log_path.read_text(errors="replace")
    assert (
        f"Skald is ready at {aws_server.url} (backend aws-local; data in-memory "
        "emulators (moto, osmem-server), gone at exit; auth dev" in log
    )
