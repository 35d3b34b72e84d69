"""Skills through the real openviking-sdk client against a live `skald serve`: add from SKILL.md
text, a skill object, an MCP tool definition and an uploaded package; list, show, find (one
hit per package), validate, replace and remove; bad input is a clear 4xx that writes nothing."""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openviking_sdk import SyncHTTPClient
from openviking_sdk.errors import OpenVikingError

from tests.support.server import SkaldServer

# The SDK first checks whether `data` names a local file: text stays under 255 bytes so that
# the check does not fail on the name length.
REVIEW = """---
name: code-review
description: Review a pull request for security bugs.
allowed-tools: Bash(git diff:*) Read
tags: [git, review]
---

Read the diff with `git diff`; flag unchecked input and leaked secrets.
"""

TEA = """---
name: brew-tea
description: Brew green tea at 80 degrees for two minutes.
---

Warm the pot, add the leaves, pour water at 80 degrees, wait two minutes.
"""


@pytest.fixture
def http(dev_server: SkaldServer, account: str) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=dev_server.url,
        timeout=60,
        headers={"X-OpenViking-Account": account, "X-OpenViking-User": "alice"},
    ) as c:
        yield c


def error_of(resp: httpx.Response) -> dict[str, Any]:
    body = resp.json()
    assert body["status"] == "error", body
    error: dict[str, Any] = body["error"]
    return error


def test_add_list_show_and_find_a_skill_from_skill_md(client: SyncHTTPClient) -> None:
    added = client.add_skill(REVIEW, wait=True, options={"extra": {"timeout": 60}})
    root = "viking://user/alice/skills/code-review"
    assert added["status"] == "success" and added["name"] == "code-review"
    assert added["root_uri"] == root and added["semantic_status"] == "complete"
    client.add_skill(TEA, wait=True, options={"target_uri": "viking://agent/skills"})

    listed = client.list_skills()
    assert listed["root_uris"] == ["viking://user/alice/skills", "viking://agent/skills"]
    by_name = {s["name"]: s for s in listed["skills"]}
    assert listed["total"] == 2 and set(by_name) == {"code-review", "brew-tea"}
    review = by_name["code-review"]
    assert review["uri"] == root and review["skill_md_uri"] == f"{root}/SKILL.md"
    assert review["description"].startswith("Review a pull request")
    assert review["allowed_tools"] == ["Bash(git diff:*)", "Read"]
    assert review["tags"] == ["git", "review"]
    assert by_name["brew-tea"]["root_uri"] == "viking://agent/skills/brew-tea"
    only_agent = client.list_skills(target_uri="viking://agent/skills")
    assert only_agent["root_uri"] == "viking://agent/skills"
    assert [s["name"] for s in only_agent["skills"]] == ["brew-tea"]

    shown = client.get_skill("code-review")
    assert shown["content"] == REVIEW
    assert shown["abstract"] == review["description"]  # the package's L0 is its description
    assert "SKILL.md" in shown["overview"]
    assert [(f["path"], f["kind"]) for f in shown["files"]] == [("SKILL.md", "definition")]
    assert client.read(f"{root}/SKILL.md") == REVIEW

    found = client.find_skills("review a pull request for security bugs")
    assert found["skills"], found
    top = found["skills"][0]
    assert top["name"] == "code-review" and top["uri"] == root and top["score"] > 0
    assert [s["uri"] for s in found["skills"]].count(root) == 1  # one hit per package
    tea = client.find_skills("green tea", target_uri="viking://agent/skills")
    assert tea["root_uri"] == "viking://agent/skills"
    assert [s["name"] for s in tea["skills"]] == ["brew-tea"]


def test_find_and_search_with_context_type_skill_return_each_package_once(
    client: SyncHTTPClient, tmp_path: Path
) -> None:
    package = tmp_path / "deploy-widget"
    (package / "scripts").mkdir(parents=True)
    (package / "SKILL.md").write_text(
        "---\nname: deploy-widget\ndescription: Deploy the widget service to production.\n"
        "---\n\nRun scripts/deploy.sh with the release tag.\n"
    )
    (package / "scripts" / "deploy.sh").write_text("#!/bin/sh\necho deploy widget $1\n")
    (package / "reference.md").write_text("# Widget deployment reference\n\nRollback steps.\n")
    added = client.add_skill(str(package), wait=True)  # zipped and uploaded by the SDK
    root = "viking://user/alice/skills/deploy-widget"
    assert added["root_uri"] == root and added["auxiliary_files"] == 2
    shown = client.get_skill("deploy-widget")
    assert {f["path"] for f in shown["files"]} == {
        "SKILL.md",
        "reference.md",
        "scripts",
        "scripts/deploy.sh",
    }
    assert client.read(f"{root}/scripts/deploy.sh").startswith("#!/bin/sh")

    only_skills = {"context_type": "skill"}
    for result in (
        client.find("deploy the widget", options=only_skills),
        client.search("deploy the widget", options=only_skills),
    ):
        uris = [h["uri"] for h in result["skills"]]
        assert uris == [f"{root}/SKILL.md"], result  # every file of the package folds into one
        assert result["resources"] == [] and result["memories"] == []


def test_add_from_a_dict_an_mcp_tool_and_an_uploaded_skill_md(
    client: SyncHTTPClient, tmp_path: Path
) -> None:
    client.add_skill(
        {
            "name": "summarise",
            "description": "Summarise a long document.",
            "content": "Read it, then write five bullets.",
        },
        wait=True,
    )
    text = client.get_skill("summarise")["content"]
    assert text.startswith("---\nname: summarise\ndescription: Summarise a long document.\n")
    assert text.rstrip().endswith("Read it, then write five bullets.")

    tool = {
        "name": "search_issues",
        "description": "Search the issue tracker.",
        "inputSchema": {
            "type": "object",
            "required": ["query"],
            "properties": {
                "query": {"type": "string", "description": "Words to look for"},
                "state": {"type": "string"},
            },
        },
    }
    added = client.add_skill(tool, wait=True)
    assert added["name"] == "search-issues"
    body = client.get_skill("search-issues")["content"]
    assert "- **query** (string, required): Words to look for" in body
    assert "- **state** (string, optional)" in body and "`search_issues`" in body

    file = tmp_path / "SKILL.md"
    file.write_text(TEA)
    assert client.add_skill(str(file))["name"] == "brew-tea"  # uploaded single file
    source = client.get_skill("brew-tea", include_source=True)["source"]
    assert source == {
        "type": "api",
        "source": "temp_upload",
        "operation": "add",
        "original_filename": "SKILL.md",
    }
    names = {s["name"] for s in client.list_skills()["skills"]}
    assert names == {"summarise", "search-issues", "brew-tea"}


def test_update_replaces_the_package_and_delete_removes_it(
    client: SyncHTTPClient, tmp_path: Path
) -> None:
    package = tmp_path / "brew-tea"
    package.mkdir()
    (package / "SKILL.md").write_text(TEA)
    (package / "notes.md").write_text("Old notes about oolong.\n")
    client.add_skill(str(package), wait=True)
    newer = TEA.replace("two minutes", "three minutes")
    updated = client.update_skill("brew-tea", newer, wait=True)
    assert updated["action"] == "update" and updated["name"] == "brew-tea"
    shown = client.get_skill("brew-tea", include_integrity=True)
    assert shown["content"] == newer and "three minutes" in shown["description"]
    assert [f["path"] for f in shown["files"]] == ["SKILL.md"]  # old files went with it
    assert shown["files"][0]["size"] == len(newer.encode()) and len(shown["revision"]) == 64
    assert client.find_skills("oolong notes")["skills"] == [] or all(
        "notes.md" not in s["uri"] for s in client.find_skills("oolong notes")["skills"]
    )

    with pytest.raises(OpenVikingError) as exc:
        client.update_skill("brew-tea", REVIEW)  # the content names another skill
    assert exc.value.code == "INVALID_ARGUMENT" and "mismatch" in str(exc.value)
    assert client.get_skill("brew-tea")["content"] == newer

    removed = client.delete_skill("brew-tea")
    assert removed["uri"] == "viking://user/alice/skills/brew-tea"
    assert removed["estimated_deleted_count"] == 1
    assert client.list_skills()["skills"] == []
    with pytest.raises(OpenVikingError) as exc:
        client.get_skill("brew-tea")
    assert exc.value.code == "NOT_FOUND"
    client.wait_processed()
    assert client.find_skills("green tea")["skills"] == []


def test_validate_reports_errors_and_warnings(client: SyncHTTPClient) -> None:
    good = client.validate_skill(REVIEW)
    assert good["valid"] is True and good["name"] == "code-review" and good["errors"] == []
    assert good["allowed_tools"] == ["Bash(git diff:*)", "Read"]
    missing = client.validate_skill("---\ndescription: no name here\n---\nbody")
    assert missing["valid"] is False
    assert [e["rule"] for e in missing["errors"]] == ["name_required"]
    no_front = client.validate_skill("just text")
    assert no_front["valid"] is False and no_front["errors"][0]["rule"] == "yaml_format"
    odd = "---\nname: Bad Name!\ndescription: d\n---\n"
    assert client.validate_skill(odd)["valid"] is True  # advice only, unless strict
    assert client.validate_skill(odd)["warnings"][0]["rule"] == "name_allowed_characters"
    strict = client.validate_skill(odd, strict=True, skill_dir_name="other")
    assert strict["valid"] is False
    assert {e["rule"] for e in strict["errors"]} == {
        "name_allowed_characters",
        "name_matches_directory",
    }


@pytest.mark.parametrize(
    ("body", "code", "says"),
    [
        ({}, "INVALID_ARGUMENT", "Either 'data' or 'temp_file_id'"),
        ({"data": ""}, "INVALID_ARGUMENT", "empty"),
        ({"data": {}}, "INVALID_ARGUMENT", "empty"),
        ({"data": "---\ndescription: no name\n---\nbody"}, "INVALID_ARGUMENT", "'name'"),
        ({"data": "---\nname: x\n---\nbody"}, "INVALID_ARGUMENT", "'description'"),
        ({"data": "no frontmatter at all"}, "INVALID_ARGUMENT", "frontmatter"),
        ({"data": "---\nname: [unclosed\n---\n"}, "INVALID_ARGUMENT", "YAML"),
        (
            {"data": "---\nname: ../escape\ndescription: d\n---\n"},
            "INVALID_ARGUMENT",
            "Invalid skill name",
        ),
        ({"data": {"name": "a" * 65, "description": "d"}}, "INVALID_ARGUMENT", "64"),
        ({"data": 42}, "INVALID_ARGUMENT", "Unsupported"),
        ({"data": TEA, "temp_file_id": "upload_x.md"}, "INVALID_ARGUMENT", "not both"),
        ({"temp_file_id": "upload_0123.zip"}, "NOT_FOUND", "Temp file not found"),
        (
            {"data": TEA, "target_uri": "viking://resources/x"},
            "INVALID_ARGUMENT",
            "Unsupported skill target",
        ),
        ({"data": TEA, "surprise": 1}, "INVALID_ARGUMENT", "surprise"),
        ({"data": TEA, "wait": True, "timeout": 0}, "INVALID_ARGUMENT", "timeout"),
    ],
)
def test_bad_skills_are_4xx_and_write_nothing(
    http: httpx.Client, body: dict[str, Any], code: str, says: str
) -> None:
    resp = http.post("/api/v1/skills", json=body)
    assert 400 <= resp.status_code < 500 and resp.status_code != 404 or code == "NOT_FOUND"
    err = error_of(resp)
    assert err["code"] == code and says in err["message"] + str(err.get("details")), err
    listed = http.get("/api/v1/skills").json()["result"]
    assert listed["skills"] == []


def test_a_package_without_skill_md_is_refused(http: httpx.Client, tmp_path: Path) -> None:
    archive = tmp_path / "pkg.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("pkg/README.md", "# not a skill\n")
    with archive.open("rb") as fh:
        temp = http.post(
            "/api/v1/resources/temp_upload", files={"file": ("pkg.zip", fh, "application/zip")}
        ).json()
    resp = http.post("/api/v1/skills", json={"temp_file_id": temp["result"]["temp_file_id"]})
    assert resp.status_code == 400 and "no SKILL.md" in error_of(resp)["message"]
    assert http.get("/api/v1/skills").json()["result"]["skills"] == []


def test_show_and_delete_unknown_or_bad_names(http: httpx.Client) -> None:
    resp = http.get("/api/v1/skills/nope")
    assert resp.status_code == 404 and error_of(resp)["details"]["type"] == "skill"
    assert http.delete("/api/v1/skills/nope").status_code == 404
    http.post("/api/v1/skills", json={"data": TEA})
    resp = http.get("/api/v1/skills/brew-tea", params={"level": 7})
    assert resp.status_code == 400 and "level" in error_of(resp)["message"]
    level0 = http.get("/api/v1/skills/brew-tea", params={"level": 0}).json()["result"]
    assert "abstract" in level0 and "content" not in level0 and "overview" not in level0
    resp = http.get("/api/v1/skills/bad%20name")
    assert resp.status_code == 400 and error_of(resp)["code"] == "INVALID_ARGUMENT"
    resp = http.post("/api/v1/skills/find", json={"query": "tea", "limit": 0})
    assert resp.status_code == 400


def test_skills_of_one_user_are_private_and_agent_skills_are_shared(
    dev_server: SkaldServer, account: str
) -> None:
    alice = SyncHTTPClient(url=dev_server.url, account=account, user="alice", timeout=60)
    bob = SyncHTTPClient(url=dev_server.url, account=account, user="bob", timeout=60)
    for c in (alice, bob):
        c.initialize()
    try:
        alice.add_skill(REVIEW, wait=True)
        alice.add_skill(TEA, wait=True, options={"target_uri": "viking://agent/skills"})
        assert [s["name"] for s in bob.list_skills()["skills"]] == ["brew-tea"]
        assert [s["name"] for s in bob.find_skills("review a pull request")["skills"]] in (
            [],
            ["brew-tea"],
        )
        with pytest.raises(OpenVikingError) as exc:
            bob.get_skill("code-review")
        assert exc.value.code == "NOT_FOUND"
        assert bob.get_skill("brew-tea")["root_uri"] == "viking://agent/skills/brew-tea"
    finally:
        alice.close()
        bob.close()


def test_a_zip_of_several_packages_lists_and_adds_the_chosen_ones(
    http: httpx.Client, tmp_path: Path
) -> None:
    archive = tmp_path / "collection.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("collection/brew-tea/SKILL.md", TEA)
        zf.writestr("collection/brew-tea/kettle.md", "Use a glass kettle.\n")
        zf.writestr("collection/code-review/SKILL.md", REVIEW)
        zf.writestr("collection/README.md", "Two skills.\n")
    with archive.open("rb") as fh:
        temp = http.post(
            "/api/v1/resources/temp_upload",
            files={"file": ("collection.zip", fh, "application/zip")},
        ).json()
    temp_id = temp["result"]["temp_file_id"]
    listed = http.post("/api/v1/skills", json={"temp_file_id": temp_id, "list_only": True})
    assert listed.status_code == 200, listed.text
    assert [s["name"] for s in listed.json()["result"]["skills"]] == ["brew-tea", "code-review"]
    assert http.get("/api/v1/skills").json()["result"]["skills"] == []  # nothing written
    resp = http.post("/api/v1/skills", json={"temp_file_id": temp_id, "skills": ["nope"]})
    assert resp.status_code == 400
    assert error_of(resp)["details"]["available"] == ["brew-tea", "code-review"]
    added = http.post(
        "/api/v1/skills", json={"temp_file_id": temp_id, "skills": ["brew-tea"], "wait": True}
    ).json()["result"]
    assert added["name"] == "brew-tea" and added["auxiliary_files"] == 1
    shown = http.get("/api/v1/skills/brew-tea").json()["result"]
    assert [f["path"] for f in shown["files"]] == ["SKILL.md", "kettle.md"]
    assert [s["name"] for s in http.get("/api/v1/skills").json()["result"]["skills"]] == [
        "brew-tea"
    ]
    # the upload was consumed by the add
    again = http.post("/api/v1/skills", json={"temp_file_id": temp_id})
    assert again.status_code == 404 and error_of(again)["code"] == "NOT_FOUND"
