"""Packs through openviking-sdk: `.ovpack` export / import / backup / restore round trips,
OpenViking's conflict rule, and hostile packs refused with a 4xx and nothing written."""

from __future__ import annotations

import io
import json
import stat
import zipfile
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from openviking_sdk import SyncHTTPClient
from openviking_sdk.errors import OpenVikingError

from tests.api.conftest import make_client
from tests.api.test_hostile_input_api import refused, settled
from tests.support.server import SkaldServer


def _seed(client: SyncHTTPClient) -> None:
    client.write(
        "viking://resources/notes/intro.md",
        "# Intro\n\nThe lighthouse keeper logs every passing ship.\n",
        wait=True,
    )
    client.write(
        "viking://resources/notes/deep/tides.md",
        "# Tides\n\nSpring tides follow the full moon.\n",
        wait=True,
    )
    client.set_tags("viking://resources/notes/intro.md", ["team=coast", "lang=en"])
    client.wait_processed()


def _members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as zf:
        return {i.filename: zf.read(i) for i in zf.infolist()}


def test_export_writes_an_ovpack_in_openviking_layout(
    client: SyncHTTPClient, tmp_path: Path
) -> None:
    _seed(client)
    out = Path(client.export_ovpack("viking://resources/notes", str(tmp_path)))
    assert out.name == "notes.ovpack"
    members = _members(out)
    assert members["notes/files/intro.md"].startswith(b"# Intro")
    assert "notes/files/deep/tides.md" in members and "notes/files/deep/" in members
    assert "notes/files/.abstract.md" in members and "notes/files/deep/.overview.md" in members
    assert not any(".attrs.json" in n or ".parsed.json" in n for n in members)
    manifest = json.loads(members["notes/_ovpack/manifest.json"])
    assert manifest["kind"] == "openviking.ovpack" and manifest["format_version"] == 3
    assert manifest["root"] == {
        "name": "notes",
        "uri": "viking://resources/notes",
        "scope": "resources",
    }
    records = [
        json.loads(line)
        for line in members["notes/_ovpack/index_records.jsonl"].decode().splitlines()
    ]
    intro = next(r for r in records if r["path"] == "intro.md")
    assert intro["scalars"]["tags"] == ["team=coast", "lang=en"]


def test_round_trip_keeps_content_sidecars_tags_and_is_indexed(
    client: SyncHTTPClient, tmp_path: Path
) -> None:
    _seed(client)
    abstract = client.abstract("viking://resources/notes")
    overview = client.overview("viking://resources/notes/deep")
    pack = client.export_ovpack("viking://resources/notes", str(tmp_path / "n.ovpack"))
    client.mkdir("viking://resources/copy")
    assert client.import_ovpack(pack, "viking://resources/copy") == "viking://resources/copy/notes"
    client.wait_processed()
    base = "viking://resources/copy/notes"
    assert client.read(f"{base}/deep/tides.md").startswith("# Tides")
    assert client.abstract(base) == abstract
    assert client.overview(f"{base}/deep") == overview
    assert client.attrs(f"{base}/intro.md")["attrs"]["tags"] == ["team=coast", "lang=en"]
    hits = client.find("lighthouse keeper passing ship", target_uri=base)
    assert any(h["uri"] == f"{base}/intro.md" for h in hits["resources"]), hits
    # the imported L0 is indexed as it came (asked for alone: a directory's summary gives
    # way to the files below it in a mixed result list)
    hits = client.find(abstract, target_uri=base, limit=20, options={"level": 0})
    assert any(h["uri"] == f"{base}/.abstract.md" for h in hits["resources"]), hits


def test_memories_round_trip(dev_server: SkaldServer, account: str, tmp_path: Path) -> None:
    alice = make_client(dev_server.url, account=account, user="alice")
    bob = make_client(dev_server.url, account=account, user="bob")
    try:
        alice.write(
            "viking://user/alice/memories/preferences/tea.md",
            "Alice drinks green tea every morning.",
            wait=True,
        )
        pack = alice.export_ovpack(
            "viking://user/alice/memories/preferences", str(tmp_path / "prefs.ovpack")
        )
        # a user-space pack lands at the same depth in another user's space
        with pytest.raises(OpenVikingError, match="user-space path"):
            bob.import_ovpack(pack, "viking://user/bob")
        uri = bob.import_ovpack(pack, "viking://user/bob/memories", on_conflict="overwrite")
        assert uri == "viking://user/bob/memories/preferences"
        assert bob.read(f"{uri}/tea.md") == "Alice drinks green tea every morning."
        with pytest.raises(OpenVikingError, match="scope"):  # user pack into resources
            bob.import_ovpack(pack, "viking://resources")
    finally:
        alice.close()
        bob.close()


def test_conflict_rule_fail_skip_overwrite(client: SyncHTTPClient, tmp_path: Path) -> None:
    _seed(client)
    pack = client.export_ovpack("viking://resources/notes", str(tmp_path / "n.ovpack"))
    client.write("viking://resources/notes/intro.md", "changed", wait=True)
    client.write("viking://resources/notes/extra.md", "only here", wait=True)
    with pytest.raises(OpenVikingError) as err:  # the default: fail
        client.import_ovpack(pack, "viking://resources")
    assert "already exists" in str(err.value)
    assert (
        client.import_ovpack(pack, "viking://resources", on_conflict="skip")
        == "viking://resources/notes"
    )
    assert client.read("viking://resources/notes/intro.md") == "changed"
    client.import_ovpack(pack, "viking://resources", on_conflict="overwrite")
    assert client.read("viking://resources/notes/intro.md").startswith("# Intro")
    names = [e["uri"] for e in client.ls("viking://resources/notes")]
    assert "viking://resources/notes/extra.md" not in names  # the root was replaced


def test_backup_and_restore(dev_server: SkaldServer, account: str, tmp_path: Path) -> None:
    admin = make_client(dev_server.url, account=account, user="alice")
    try:
        _seed(admin)
        admin.write("viking://user/alice/memories/preferences/tea.md", "Green tea.", wait=True)
        backup = admin.backup_ovpack(str(tmp_path))
        assert Path(backup).name == "openviking-backup.ovpack"
        # a backup is restored, not imported
        with pytest.raises(OpenVikingError, match="restore"):
            admin.import_ovpack(backup, "viking://resources")
        with pytest.raises(OpenVikingError, match="already exist"):
            admin.restore_ovpack(backup)
        admin.rm("viking://resources/notes", recursive=True)
        admin.write("viking://user/alice/memories/preferences/tea.md", "Coffee now.", wait=True)
        assert admin.restore_ovpack(backup, on_conflict="overwrite") == "viking://"
        admin.wait_processed()
        assert admin.read("viking://resources/notes/deep/tides.md").startswith("# Tides")
        assert admin.read("viking://user/alice/memories/preferences/tea.md") == "Green tea."
        assert admin.attrs("viking://resources/notes/intro.md")["attrs"]["tags"] == [
            "team=coast",
            "lang=en",
        ]
    finally:
        admin.close()


def test_export_refusals(client: SyncHTTPClient, tmp_path: Path) -> None:
    _seed(client)
    for uri, needle in (
        ("viking://resources/missing", "not found"),
        ("viking://resources/notes/intro.md", "Only directories"),
        ("viking://agent/skills", "supported below"),
    ):
        with pytest.raises(OpenVikingError, match=needle):
            client.export_ovpack(uri, str(tmp_path / "x.ovpack"))


# -- hostile and corrupt packs -----------------------------------------------------------------


def _valid_pack(client: SyncHTTPClient, tmp_path: Path) -> dict[str, bytes]:
    client.write("viking://resources/src/a.md", "# A\n\nalpha\n", wait=True)
    return _members(
        Path(client.export_ovpack("viking://resources/src", str(tmp_path / "src.ovpack")))
    )


def _zip(members: dict[str, bytes], *, symlink: str | None = None, stored: bool = False) -> bytes:
    out = io.BytesIO()
    method = zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED
    with zipfile.ZipFile(out, "w", method) as zf:
        for name, data in members.items():
            info = zipfile.ZipInfo(name)
            info.compress_type = method
            if name == symlink:
                info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, data)
    return out.getvalue()


def _with_file(members: dict[str, bytes], name: str, data: bytes) -> dict[str, bytes]:
    """`members` plus one file, the manifest updated so that only the path is wrong."""
    import hashlib

    out = dict(members)
    out[name] = data
    manifest = json.loads(out["src/_ovpack/manifest.json"])
    rel = name.split("/files/", 1)[-1]
    manifest["entries"].append(
        {"path": rel, "kind": "file", "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    )
    listing = sorted(
        (
            {"path": e["path"], "size": e["size"], "sha256": e["sha256"]}
            for e in manifest["entries"]
            if e["kind"] == "file"
        ),
        key=lambda e: e["path"],
    )
    manifest["content_sha256"] = hashlib.sha256(
        json.dumps(listing, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()
    out["src/_ovpack/manifest.json"] = json.dumps(manifest).encode()
    return out


def _bomb(members: dict[str, bytes]) -> bytes:
    out = dict(members)
    out["src/files/bomb.md"] = b"0" * (8 * 1024 * 1024)
    return _zip(out)


HOSTILE: dict[str, Callable[[dict[str, bytes]], bytes]] = {
    "zip slip": lambda m: _zip(_with_file(m, "src/files/../../evil.md", b"x")),
    "absolute path": lambda m: _zip({**m, "/etc/evil.md": b"x"}),
    "backslash path": lambda m: _zip({**m, "src/files/..\\evil.md": b"x"}),
    "second root": lambda m: _zip({**m, "other/files/evil.md": b"x"}),
    "outside files/": lambda m: _zip(_with_file(m, "src/evil.md", b"x")),
    "symlink": lambda m: _zip(
        _with_file(m, "src/files/link.md", b"/etc/passwd"), symlink="src/files/link.md"
    ),
    "zip bomb": _bomb,
    "reserved name": lambda m: _zip(_with_file(m, "src/files/.attrs.json", b"{}")),
    "tampered content": lambda m: _zip({**m, "src/files/a.md": b"# A\n\nomega\n"}),
    "unlisted file": lambda m: _zip({**m, "src/files/b.md": b"b"}),
    "no manifest": lambda m: _zip({k: v for k, v in m.items() if "manifest" not in k}),
    "bad manifest json": lambda m: _zip({**m, "src/_ovpack/manifest.json": b"{nope"}),
    "not a zip": lambda m: b"this is not a zip archive",
    "truncated": lambda m: _zip(m)[:200],
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_pack_is_refused_and_nothing_written(
    case: str, client: SyncHTTPClient, http: httpx.Client, dev_server: SkaldServer, tmp_path: Path
) -> None:
    members = _valid_pack(client, tmp_path)
    client.mkdir("viking://resources/target")
    client.wait_processed()
    up = http.post(
        "/api/v1/resources/temp_upload", files={"file": ("x.ovpack", HOSTILE[case](members))}
    )
    assert up.status_code == 200, up.text
    temp_id = up.json()["result"]["temp_file_id"]
    before = settled(http, dev_server)  # the upload included: a refused import keeps it
    resp = http.post(
        "/api/v1/pack/import", json={"temp_file_id": temp_id, "parent": "viking://resources/target"}
    )
    assert 400 <= resp.status_code < 500, (case, resp.status_code, resp.text)
    assert resp.json()["status"] == "error"
    after = settled(http, dev_server)
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    assert not changed, (case, sorted(changed))


def test_a_refused_import_keeps_the_upload_for_a_corrected_retry(
    client: SyncHTTPClient, http: httpx.Client, tmp_path: Path
) -> None:
    members = _valid_pack(client, tmp_path)
    client.mkdir("viking://resources/dest")
    client.write("viking://resources/dest/src/a.md", "# Mine\n", wait=True)
    up = http.post("/api/v1/resources/temp_upload", files={"file": ("x.ovpack", _zip(members))})
    temp_id = up.json()["result"]["temp_file_id"]
    attempt = {"temp_file_id": temp_id, "parent": "viking://resources/dest"}
    refused(http.post("/api/v1/pack/import", json=attempt), 409, "CONFLICT")
    refused(
        http.post("/api/v1/pack/import", json={**attempt, "parent": "viking://nowhere"}),
        400,
        "INVALID_URI",
    )
    # Corrected, with the same upload: imported, and the upload is then consumed.
    done = http.post("/api/v1/pack/import", json={**attempt, "on_conflict": "overwrite"})
    assert done.status_code == 200, done.text
    assert done.json()["result"]["uri"] == "viking://resources/dest/src"
    assert "alpha" in client.read("viking://resources/dest/src/a.md")
    refused(http.post("/api/v1/pack/import", json=attempt), 404, "NOT_FOUND")


def test_bad_requests_are_4xx(http: httpx.Client) -> None:
    refused(
        http.post(
            "/api/v1/pack/import",
            json={"temp_file_id": "upload_nope.ovpack", "parent": "viking://resources"},
        ),
        404,
        "NOT_FOUND",
    )
    refused(
        http.post(
            "/api/v1/pack/import", json={"temp_file_id": "../x", "parent": "viking://resources"}
        ),
        400,
        "INVALID_ARGUMENT",
    )
    assert (
        http.post(
            "/api/v1/pack/import",
            json={"temp_file_id": "x", "parent": "viking://", "on_conflict": "maybe"},
        ).status_code
        == 400
    )
    refused(
        http.post(
            "/api/v1/pack/export", json={"uri": "viking://resources", "include_vectors": True}
        ),
        400,
        "INVALID_ARGUMENT",
    )


def test_only_admins_back_up_and_restore_and_users_import_where_they_write(
    key_server: SkaldServer, tmp_path: Path
) -> None:
    import uuid

    from openviking_sdk.errors import PermissionDeniedError

    from tests.api.conftest import ROOT_KEY

    root = make_client(key_server.url, api_key=ROOT_KEY)
    account = "acct-" + uuid.uuid4().hex[:8]
    boss = make_client(
        key_server.url, api_key=root.admin_create_account(account, "boss")["user_key"]
    )
    carol = make_client(
        key_server.url, api_key=boss.admin_register_user(account, "carol", "user")["user_key"]
    )
    try:
        carol.write("viking://~/memories/notes/n.md", "carol's note", wait=True)
        pack = carol.export_ovpack("viking://user/carol/memories/notes", str(tmp_path / "n.ovpack"))
        with pytest.raises(PermissionDeniedError):
            carol.backup_ovpack(str(tmp_path))
        backup = boss.backup_ovpack(str(tmp_path))
        with pytest.raises(PermissionDeniedError):
            carol.restore_ovpack(backup, on_conflict="overwrite")
        with pytest.raises(PermissionDeniedError):  # another user's space
            carol.import_ovpack(pack, "viking://user/boss/memories")
        assert [
            e["name"] for e in boss.ls("viking://user/boss/memories") if e["name"] == "notes"
        ] == []
        # the admin restores the backup over the account: carol's note comes back
        carol.write("viking://~/memories/notes/n.md", "changed", wait=True)
        assert boss.restore_ovpack(backup, on_conflict="overwrite") == "viking://"
        assert carol.read("viking://~/memories/notes/n.md") == "carol's note"
    finally:
        for c in (carol, boss, root):
            c.close()
