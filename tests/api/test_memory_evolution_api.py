"""Memories that evolve, through openviking-sdk: sessions are committed one after another and
the memories they leave are read back (updates, restatements, retractions, reporting lines,
tools, schedules, error-then-fix experiences, slug names and provenance)."""

from __future__ import annotations

import json
import re
from typing import Any

from openviking_sdk import SyncHTTPClient

from tests.support.sessions import commit_and_wait as commit

MEM = "viking://user/alice/memories"


def files(c: SyncHTTPClient, uri: str = MEM) -> list[str]:
    return sorted(e["uri"] for e in c.ls(uri, recursive=True) if not e["isDir"])


def body(c: SyncHTTPClient, uri: str) -> str:
    text: str = c.read(uri)
    return text


def frontmatter(text: str) -> dict[str, Any]:
    m = re.match(r"\A---\n(.*?)\n---\n", text, re.DOTALL)
    assert m, text
    return {k: json.loads(v) for k, _, v in (ln.partition(": ") for ln in m.group(1).splitlines())}


def test_switching_tools_supersedes_the_old_memory(client: SyncHTTPClient) -> None:
    first = commit(client, "tools1", "I always use Poetry.")
    poetry = f"{MEM}/preferences/alice/poetry.md"
    assert poetry in [a["uri"] for a in first["operations"]["adds"]]
    diff = commit(client, "tools2", "I moved from Poetry to uv, I now always use uv.")
    deleted = {d["uri"]: d for d in diff["operations"]["deletes"]}
    assert poetry in deleted and deleted[poetry]["reason"] == "retracted"
    assert "User always uses Poetry" in deleted[poetry]["before"]
    assert deleted[poetry]["archive"].endswith("sessions/tools2/history/archive_001")
    memories = files(client)
    assert poetry not in memories
    uv = body(client, f"{MEM}/preferences/alice/uv.md")
    assert "User always uses uv." in uv and "switched from Poetry to uv" in uv
    assert not any(
        "Poetry" in body(client, u) and "uv" not in body(client, u)
        for u in memories
        if "/preferences/" in u
    )


def test_still_true_adds_no_duplicate(client: SyncHTTPClient) -> None:
    commit(client, "still1", "I always use uv.")
    uv = f"{MEM}/preferences/alice/uv.md"
    before = body(client, uv)
    diff = commit(client, "still2", "I always use uv, that's still true.")
    assert uv not in [u["uri"] for u in diff["operations"]["updates"]]
    assert any(
        s["reason"] == "unchanged" and s["detail"] == uv for s in diff["skipped_operations"]
    ), diff["skipped_operations"]
    after = body(client, uv)
    assert after == before  # no line added, no new version
    assert [u for u in files(client) if "/preferences/" in u] == [uv]


def test_manager_is_a_profile_fact_and_a_person(client: SyncHTTPClient) -> None:
    commit(client, "mgr1", "My manager is Dana Whitfield.")
    profile = body(client, f"{MEM}/profile.md")
    assert "User's manager is Dana Whitfield." in profile
    person = f"{MEM}/entities/person/dana-whitfield.md"
    assert "Dana Whitfield is the user's manager." in body(client, person)
    assert not any("/entities/other/" in u for u in files(client))
    # a new manager supersedes the old one in the profile, never both
    diff = commit(client, "mgr2", "I report to Omar Haddad now.")
    profile = body(client, f"{MEM}/profile.md")
    assert "User's manager is Omar Haddad." in profile
    assert "Dana Whitfield" not in profile
    update = next(u for u in diff["operations"]["updates"] if u["uri"].endswith("/profile.md"))
    assert update["reason"] == "superseded"
    assert update["superseded"] == ["User's manager is Dana Whitfield."]
    assert "Dana Whitfield" in update["before"] and "Omar Haddad" in update["after"]


def test_tools_and_platforms(client: SyncHTTPClient) -> None:
    commit(client, "stack", "We use Snowflake and dbt for our analytics.")
    memories = files(client)
    assert f"{MEM}/entities/tool/snowflake.md" in memories
    assert f"{MEM}/entities/tool/dbt.md" in memories
    assert "User's team uses Snowflake." in body(client, f"{MEM}/entities/tool/snowflake.md")
    hits = client.find("which data warehouse does the team use", target_uri=MEM)
    assert any(h["uri"].endswith("/snowflake.md") for h in hits["memories"][:5]), hits


def test_recurring_schedule(client: SyncHTTPClient) -> None:
    commit(client, "sched1", "We have a standup every weekday at 9:30.")
    standup = f"{MEM}/entities/schedule/standup.md"
    assert "Schedule: standup every weekday at 9:30." in body(client, standup)
    # a routine is no one-day event (the archive's conversation event aside)
    assert not any(
        "/events/" in u and "standup" in u and "/conversation-" not in u for u in files(client)
    )
    commit(client, "sched2", "Our standup is every weekday at 10:15 from now on.")
    text = body(client, standup)
    assert "every weekday at 10:15" in text
    assert "Schedule: standup every weekday at 9:30." not in text


def test_error_then_fix_becomes_an_experience(client: SyncHTTPClient) -> None:
    commit(
        client,
        "err",
        "Running the tests fails with ModuleNotFoundError: No module named 'yaml'.",
        ("assistant", "Add PyYAML to the project: uv add pyyaml."),
        "That worked, the tests pass now.",
        "The nightly backup job failed with a lock timeout.",
        "Fixed it by setting lock_timeout to 30s before the dump.",
    )
    exps = [u for u in files(client) if "/experiences/" in u]
    texts = [body(client, u) for u in exps]
    yaml = next(t for t in texts if "ModuleNotFoundError" in t)
    assert "uv add pyyaml" in yaml
    lock = next(t for t in texts if "lock timeout" in t)
    assert "lock_timeout to 30s" in lock


def test_names_are_unique_slugs(client: SyncHTTPClient) -> None:
    commit(
        client,
        "slug1",
        "I prefer concise answers with code first.",
        "My colleague Anna Lee helps me with Rust.",
    )
    commit(client, "slug2", "I prefer  Concise answers with code first!")
    memories = files(client)
    for uri in memories:
        name = uri.rsplit("/", 1)[-1]
        assert " " not in name and name == name.lower(), uri
        assert re.fullmatch(r"[\w.-]+", name), uri
    assert f"{MEM}/preferences/alice/concise-answers-with-code-first.md" in memories
    assert f"{MEM}/entities/person/anna-lee.md" in memories
    names = [u.rsplit("/", 1)[-1] for u in memories]
    dirs = [u.rsplit("/", 1)[0] for u in memories]
    assert len(set(zip(dirs, names, strict=True))) == len(memories)


def test_every_memory_records_its_provenance(client: SyncHTTPClient) -> None:
    commit(client, "prov1", "I prefer green tea in the morning.", "My name is Alice Martin.")
    diff = commit(client, "prov2", "I prefer green tea in the afternoon too.")
    archive2 = "viking://user/alice/sessions/prov2/history/archive_001"
    for uri in files(client):
        if "/memories/" not in uri:
            continue
        meta = frontmatter(client.read(uri))
        assert meta["archive_uri"].startswith("viking://user/alice/sessions/"), uri
        assert meta["archive_uri"].endswith(
            f"/sessions/{meta['session_id']}/history/{meta['archive_id']}"
        ), uri
        assert meta["message_ids"], uri
        # a reader can open the messages behind the memory
        got = client.get_session_archive(meta["session_id"], meta["archive_id"])
        ids = {m["id"] for m in got["messages"]}
        assert set(meta["message_ids"]) <= ids, (uri, meta, ids)
    tea = f"{MEM}/preferences/alice/green-tea.md"
    meta = frontmatter(client.read(tea))
    assert meta["archive_uri"] == archive2
    assert [s["archive_uri"].split("/sessions/")[1].split("/")[0] for s in meta["sources"]] == [
        "prov1",
        "prov2",
    ]
    assert tea in [u["uri"] for u in diff["operations"]["updates"]]
    # the provenance is metadata: what is found and summarised is the memory itself
    hits = client.find("green tea", target_uri=MEM)["memories"]
    hit = next(h for h in hits if h["uri"] == tea)
    assert "green tea" in hit["abstract"].lower() and "viking://" not in hit["abstract"]


def test_i_no_longer_retracts_the_fact(client: SyncHTTPClient) -> None:
    commit(client, "ret1", "I love espresso after lunch.", "I work at Acme Robotics.")
    espresso = f"{MEM}/preferences/alice/espresso.md"
    assert espresso in files(client)
    diff = commit(client, "ret2", "I no longer drink espresso.", "I no longer work at Acme.")
    deleted = {d["uri"]: d for d in diff["operations"]["deletes"]}
    assert espresso in deleted
    assert deleted[espresso]["archive"].endswith("/sessions/ret2/history/archive_001")
    assert deleted[espresso]["source_message_ids"]
    assert espresso not in files(client)
    assert (
        "Acme" not in body(client, f"{MEM}/profile.md")
        if f"{MEM}/profile.md" in files(client)
        else True
    )
    assert {r["phrase"] for r in diff["retractions"]} == {"espresso", "Acme"}
    hits = client.find("espresso after lunch", target_uri=MEM)
    assert not any(h["uri"] == espresso for h in hits["memories"]), hits


def test_a_file_named_before_slugs_is_carried_over(client: SyncHTTPClient) -> None:
    legacy = f"{MEM}/preferences/alice/green tea.md"
    client.write(legacy, "# Summary\n\nUser likes green tea.\n\nUser likes green tea.\n", wait=True)
    diff = commit(client, "legacy", "I prefer green tea in the morning.")
    slug = f"{MEM}/preferences/alice/green-tea.md"
    renamed = next(d for d in diff["operations"]["deletes"] if d["uri"] == legacy)
    assert renamed["reason"] == "renamed" and renamed["renamed_to"] == slug
    prefs = [u for u in files(client) if "/preferences/" in u]
    assert prefs == [slug]
    text = body(client, slug)
    assert "User likes green tea." in text and "User prefers green tea in the morning." in text
