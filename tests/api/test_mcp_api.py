"""/mcp through the official MCP client (streamable HTTP) against a live `skald serve`: the
tool list, the agent loop find -> read -> remember -> find, every tool's happy path and error
path, protocol errors, and the same keys as the HTTP API."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS
from openviking_sdk import SyncHTTPClient

from tests.api.conftest import ROOT_KEY, make_client
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


def test_tools_are_listed_with_descriptions_and_schemas(
    dev_server: SkaldServer, account: str
) -> None:
    async def scenario() -> None:
        async with mcp_client(dev_server.url, dev_headers(account)) as c:
            assert c.server_info is None or c.server_info.name == "skald"
            tools = {t.name: t for t in (await c.list_tools()).tools}
            assert set(tools) == TOOLS
            for t in tools.values():
                # a description long enough to say when to use the tool, without indentation
                assert t.description and len(t.description) > 80, t.name
                assert "\n    " not in t.description, t.name
                assert t.input_schema["type"] == "object"
            find = tools["find"].input_schema
            assert find["required"] == ["query"]
            assert set(find["properties"]) >= {"query", "target_uri", "limit", "search_type"}
            assert find["properties"]["search_type"]["enum"] == ["hybrid", "semantic", "keywords"]
            assert {"type": "array", "items": {"type": "string"}} in tools["read"].input_schema[
                "properties"
            ]["uris"]["anyOf"]
            search = tools["search"].input_schema["properties"]
            assert search["mode"]["enum"] == ["list", "context"] and "max_tokens" in search
            assert tools["edit"].input_schema["required"] == ["uri", "old_string", "new_string"]
            message = tools["remember"].input_schema["$defs"]["Message"]
            assert message["properties"]["role"]["enum"] == ["user", "assistant"]
            assert tools["find"].annotations and tools["find"].annotations.read_only_hint
            forget = tools["forget"].annotations
            assert forget and forget.destructive_hint and not forget.read_only_hint
            assert "remember" in (c.instructions or "")

    run(scenario)


def test_find_read_remember_find(
    dev_server: SkaldServer, client: SyncHTTPClient, account: str
) -> None:
    client.write(
        "viking://resources/garden/watering.md",
        "# Watering\n\nWater the tomatoes every morning before nine.\n",
        wait=True,
    )

    async def scenario() -> None:
        async with mcp_client(dev_server.url, dev_headers(account)) as c:
            found = await c.call_tool(
                "find",
                {"query": "when should I water the tomatoes", "target_uri": "viking://resources"},
            )
            assert "viking://resources/garden/watering.md" in hit_uris(ok(found))[:3]
            assert "viking://resources/garden/watering.md" in text(found)
            read = await c.call_tool("read", {"uris": "viking://resources/garden/watering.md"})
            assert text(read) == "# Watering\n\nWater the tomatoes every morning before nine.\n"

            stored = ok(
                await c.call_tool(
                    "remember",
                    {
                        "messages": [
                            {
                                "role": "user",
                                "content": "I prefer tabs over spaces when writing Python.",
                            },
                            {"role": "assistant", "content": "Noted, tabs it is."},
                        ]
                    },
                )
            )
            assert stored["status"] == "accepted" and stored["messages_added"] == 2
            assert stored["archive_uri"].endswith("/history/archive_001")
            # extraction runs in the background: wait for its task through the HTTP API
            assert wait_task(client, stored["task_id"])["status"] == "completed"

            again = ok(
                await c.call_tool(
                    "find", {"query": "tabs or spaces for indentation", "context_type": "memory"}
                )
            )
            memories = [u for u in hit_uris(again) if "/memories/preferences/" in u]
            assert memories and memories[0].startswith("viking://user/alice/memories/")
            memory = await c.call_tool("read", {"uris": memories[0]})
            assert "tabs" in text(memory).lower()

    run(scenario)


def test_each_tool_happy_path(
    dev_server: SkaldServer, client: SyncHTTPClient, account: str
) -> None:
    async def scenario() -> None:
        async with mcp_client(dev_server.url, dev_headers(account)) as c:
            health = ok(await c.call_tool("health", {}))
            assert health["healthy"] and health["account_id"] == account
            assert health["user_id"] == "alice" and health["checks"]["index"] == "ok"

            w = ok(
                await c.call_tool(
                    "write",
                    {
                        "uri": "viking://resources/notes/plan.md",
                        "content": "# Plan\n\nShip on Friday.\n",
                        "wait": True,
                    },
                )
            )
            assert w["created"] is True and w["semantic_status"] == "complete"
            appended = ok(
                await c.call_tool(
                    "write",
                    {
                        "uri": "viking://resources/notes/plan.md",
                        "content": "Party after.\n",
                        "mode": "append",
                    },
                )
            )
            assert appended["written_bytes"] == len("Party after.\n")
            stat = ok(await c.call_tool("stat", {"uri": "viking://resources/notes/plan.md"}))
            assert stat["isDir"] is False and stat["size"] == len(
                "# Plan\n\nShip on Friday.\nParty after.\n"
            )

            edited = ok(
                await c.call_tool(
                    "edit",
                    {
                        "uri": "viking://resources/notes/plan.md",
                        "old_string": "Friday",
                        "new_string": "Monday",
                        "wait": True,
                    },
                )
            )
            assert edited["replacements"] == 1 and edited["semantic_status"] == "complete"
            lines = await c.call_tool(
                "read", {"uris": "viking://resources/notes/plan.md", "offset": 2, "limit": 1}
            )
            assert text(lines) == "Ship on Monday.\n"
            both = ok(
                await c.call_tool(
                    "edit",
                    {
                        "uri": "viking://resources/notes/plan.md",
                        "old_string": "a",
                        "new_string": "A",
                        "replace_all": True,
                    },
                )
            )
            assert both["replacements"] == 4
            assert (
                client.read("viking://resources/notes/plan.md")
                == "# PlAn\n\nShip on MondAy.\nPArty After.\n"
            )

            listing = await c.call_tool("list", {"uri": "viking://resources/notes"})
            assert ok(listing)["entries"][0]["uri"] == "viking://resources/notes/plan.md"
            assert "file viking://resources/notes/plan.md" in text(listing)
            tree = ok(await c.call_tool("tree", {"uri": "viking://resources", "level_limit": 2}))
            assert "viking://resources/notes/plan.md" in [e["uri"] for e in tree["entries"]]
            globbed = ok(
                await c.call_tool("glob", {"pattern": "**/*.md", "uri": "viking://resources"})
            )
            assert globbed["matches"] == ["viking://resources/notes/plan.md"]
            grep = await c.call_tool(
                "grep", {"pattern": "mondAy", "case_insensitive": True, "uri": "viking://resources"}
            )
            assert [(m["uri"], m["line"]) for m in ok(grep)["matches"]] == [
                ("viking://resources/notes/plan.md", 3)
            ]
            assert "  3: Ship on MondAy." in text(grep)

            many = await c.call_tool(
                "read",
                {"uris": ["viking://resources/notes/plan.md", "viking://resources/notes/gone.md"]},
            )
            results = ok(many)["result"]
            assert results[0]["content"].startswith("# PlAn")
            assert results[1]["error"]["code"] == "NOT_FOUND"
            assert "=== viking://resources/notes/gone.md ===\nNOT_FOUND:" in text(many)

            added = ok(
                await c.call_tool(
                    "add_resource",
                    {
                        "name": "runbook.md",
                        "wait": True,
                        "content": "# Runbook\n\nRestart the queue worker when jobs pile up.\n",
                    },
                )
            )
            assert added["root_uri"] == "viking://resources/runbook"
            assert added["semantic_status"] == "complete"
            assert client.read("viking://resources/runbook/runbook.md").startswith("# Runbook")
            listed = ok(
                await c.call_tool(
                    "search", {"query": "queue worker restart", "target_uri": "viking://resources"}
                )
            )
            assert "viking://resources/runbook/runbook.md" in hit_uris(listed)
            context = await c.call_tool(
                "search", {"query": "queue worker restart", "mode": "context", "max_tokens": 200}
            )
            block = ok(context)
            assert block["stats"]["max_tokens"] == 200
            assert block["stats"]["used_tokens"] <= 200 and block["entries"]
            assert text(context).startswith(block["rendered"])

            gone = ok(
                await c.call_tool(
                    "forget", {"uri": "viking://resources/runbook", "recursive": True}
                )
            )
            assert gone["estimated_deleted_count"] >= 1
            assert (
                error(await c.call_tool("stat", {"uri": "viking://resources/runbook"}))["code"]
                == "NOT_FOUND"
            )

    run(scenario)


def test_tool_errors_carry_the_skald_code(
    dev_server: SkaldServer, client: SyncHTTPClient, account: str
) -> None:
    client.write("viking://resources/e/doc.md", "one two two\n", wait=False)

    async def scenario() -> None:
        async with mcp_client(dev_server.url, dev_headers(account)) as c:

            async def err(tool: str, args: dict[str, object]) -> dict[str, object]:
                return error(await c.call_tool(tool, args))

            missing = await err("read", {"uris": "viking://resources/e/nope.md"})
            assert missing["code"] == "NOT_FOUND"
            assert missing["message"] == "File not found: viking://resources/e/nope.md"
            assert missing["details"] == {
                "resource": "viking://resources/e/nope.md",
                "type": "file",
            }
            none = await err("read", {"uris": ["viking://resources/x", "viking://resources/y"]})
            assert none["code"] == "NOT_FOUND"
            assert (await err("read", {"uris": []}))["code"] == "INVALID_ARGUMENT"
            assert (await err("read", {"uris": "resources/e/doc.md"}))["code"] == "INVALID_URI"
            assert (await err("list", {"uri": "viking://resources/nothing"}))["code"] == "NOT_FOUND"
            twice = await err(
                "edit",
                {"uri": "viking://resources/e/doc.md", "old_string": "two", "new_string": "2"},
            )
            assert twice["code"] == "INVALID_ARGUMENT" and twice["details"] == {"occurrences": 2}
            absent = await err(
                "edit",
                {"uri": "viking://resources/e/doc.md", "old_string": "three", "new_string": "3"},
            )
            assert absent["details"] == {"occurrences": 0}
            assert (
                await err(
                    "write",
                    {"uri": "viking://resources/e/doc.md", "content": "x", "mode": "create"},
                )
            )["code"] == "ALREADY_EXISTS"
            assert (await err("forget", {"uri": "viking://resources"}))[
                "code"
            ] == "PERMISSION_DENIED"
            assert (await err("forget", {"uri": "viking://resources/e"}))[
                "code"
            ] == "INVALID_ARGUMENT"  # a directory needs recursive
            assert (await err("grep", {"pattern": "(", "uri": "viking://resources"}))[
                "code"
            ] == "INVALID_ARGUMENT"
            assert (await err("search", {"query": "q", "max_tokens": 100}))[
                "code"
            ] == "INVALID_ARGUMENT"
            assert (
                await err(
                    "search", {"query": "q", "mode": "context", "target_uri": "viking://resources"}
                )
            )["code"] == "INVALID_ARGUMENT"
            bad_to = await err(
                "add_resource",
                {"name": "a.md", "content": "x", "to": "viking://user/alice/memories/a"},
            )
            assert bad_to["code"] == "INVALID_URI"
            # nothing was written by the failed calls
            assert client.read("viking://resources/e/doc.md") == "one two two\n"
            assert [e["uri"] for e in client.ls("viking://resources")] == ["viking://resources/e"]

    run(scenario)


def test_unknown_tool_and_bad_arguments_are_protocol_errors(
    dev_server: SkaldServer, account: str
) -> None:
    async def scenario() -> None:
        async with mcp_client(dev_server.url, dev_headers(account)) as c:
            cases: list[tuple[str, dict[str, Any], str]] = [
                ("nope", {}, "Unknown tool: nope"),
                ("find", {}, "'query' is a required property"),
                ("find", {"query": 5}, "query: 5 is not of type 'string'"),
                ("find", {"query": "q", "limit": 0}, "limit"),
                ("find", {"query": "q", "search_type": "fuzzy"}, "search_type"),
                ("read", {"uri": "viking://resources"}, "'uri' was unexpected"),
                ("remember", {"messages": [{"role": "system", "content": "x"}]}, "role"),
            ]
            for name, args, words in cases:
                with pytest.raises(MCPError) as info:
                    await c.call_tool(name, args)
                assert info.value.code == INVALID_PARAMS
                assert words in info.value.message, info.value.message
            # the connection is still usable afterwards
            assert ok(await c.call_tool("health", {}))["healthy"]

    run(scenario)


def test_handshake_era_client(dev_server: SkaldServer, account: str) -> None:
    """Clients on the 2025 protocol (initialize handshake) are served too."""

    async def scenario() -> None:
        async with mcp_client(dev_server.url, dev_headers(account), mode="legacy") as c:
            assert c.protocol_version.startswith("2025-")
            assert {t.name for t in (await c.list_tools()).tools} == TOOLS
            assert ok(await c.call_tool("health", {}))["account_id"] == account

    run(scenario)


def test_http_edges_of_the_endpoint(dev_server: SkaldServer) -> None:
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    accept = {"Accept": "application/json, text/event-stream"}
    resp = httpx.post(dev_server.url + "/mcp", json=listing, headers=accept)
    assert resp.status_code == 200 and resp.headers["content-type"] == "application/json"
    assert {t["name"] for t in resp.json()["result"]["tools"]} == TOOLS
    # no SSE stream and no session to delete: stateless JSON mode answers POST only
    assert httpx.get(dev_server.url + "/mcp").status_code == 405
    assert httpx.delete(dev_server.url + "/mcp").status_code == 405
    # dev mode has no keys: a foreign Host (DNS rebinding) is refused
    foreign = httpx.post(
        dev_server.url + "/mcp", json=listing, headers={**accept, "Host": "attacker.example"}
    )
    assert foreign.status_code == 421
    page = httpx.post(
        dev_server.url + "/mcp",
        json=listing,
        headers={**accept, "Origin": "http://attacker.example"},
    )
    assert page.status_code == 403


def test_api_key_mode(key_server: SkaldServer) -> None:
    root = make_client(key_server.url, api_key=ROOT_KEY)
    account = "mcp-" + uuid.uuid4().hex[:8]
    admin_key = root.admin_create_account(account, "boss")["user_key"]
    boss = make_client(key_server.url, api_key=admin_key)
    user_key = boss.admin_register_user(account, "ann", "user")["user_key"]
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    accept = {"Accept": "application/json, text/event-stream"}

    for headers in ({}, {"X-API-Key": "wrong"}, {"X-OpenViking-Account": account}):
        resp = httpx.post(key_server.url + "/mcp", json=listing, headers={**accept, **headers})
        assert resp.status_code == 401, headers
        assert resp.json()["error"]["code"] == "UNAUTHENTICATED"

    async def scenario() -> None:
        bearer = {"Authorization": f"Bearer {user_key}"}
        async with mcp_client(key_server.url, bearer) as c:
            health = ok(await c.call_tool("health", {}))
            assert (health["account_id"], health["user_id"], health["role"]) == (
                account,
                "ann",
                "user",
            )
            assert health["auth_mode"] == "api_key"
            ok(await c.call_tool("write", {"uri": "viking://resources/k.md", "content": "key\n"}))
            # dev-mode identity headers are ignored with keys
        async with mcp_client(
            key_server.url, {"X-API-Key": user_key, "X-OpenViking-User": "boss"}
        ) as c:
            assert ok(await c.call_tool("health", {}))["user_id"] == "ann"
            assert text(await c.call_tool("read", {"uris": "viking://resources/k.md"})) == "key\n"
            other = error(await c.call_tool("read", {"uris": "viking://user/boss/memories"}))
            assert other["code"] == "PERMISSION_DENIED"
        async with mcp_client(key_server.url, {"X-API-Key": ROOT_KEY}) as c:
            assert ok(await c.call_tool("health", {}))["role"] == "root"
            refused = error(await c.call_tool("find", {"query": "key"}))
            assert refused["code"] == "PERMISSION_DENIED"
            assert "ROOT API keys cannot access tenant-scoped data" in refused["message"]
        with pytest.raises(Exception):  # noqa: B017 - the SDK's error for an HTTP 401
            async with mcp_client(key_server.url, {"X-API-Key": "wrong"}) as c:
                await c.list_tools()

    run(scenario)
    root.close()
    boss.close()
