"""The `.ovpack` rules of domain/sources/packs.py: member paths, limits, manifest checks and where a
pack lands."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from skald.domain.errors import InvalidArgument, InvalidURI, PayloadTooLarge
from skald.domain.paths.uri import VikingURI, from_canonical
from skald.domain.sources import packs

LIMITS = packs.PackLimits(max_entries=10, max_total_bytes=1000, max_file_bytes=500)


def _pack(root_uri: str = "viking://resources/notes", **extra: Any) -> dict[str, bytes]:
    name = from_canonical(root_uri).name if root_uri != "viking://" else packs.BACKUP_NAME
    members = packs.build_members(
        name,
        root_uri,
        ["", "sub"],
        {"a.md": b"alpha", "sub/b.md": b"beta", ".abstract.md": b"notes"},
        [{"path": "a.md", "kind": "file", "level": 2, "scalars": {"tags": ["k=v"]}}],
        **extra,
    )
    return dict(members)


def test_build_then_parse_round_trips() -> None:
    members = _pack()
    assert "notes/files/sub/" in members and "notes/_ovpack/manifest.json" in members
    pack = packs.parse_pack("notes", members)
    assert pack.files == {"a.md": b"alpha", "sub/b.md": b"beta", ".abstract.md": b"notes"}
    assert pack.dirs == ["", "sub"] and pack.root_uri == "viking://resources/notes"
    assert pack.tags_of("a.md") == ["k=v"] and pack.tags_of("sub/b.md") is None
    assert not pack.is_backup


@pytest.mark.parametrize(
    "name",
    [
        "notes/files/../x",
        "/notes/files/x",
        "notes/files/a\\b",
        "C:/notes/x",
        "other/files/x",
        "notes/files/./x",
        "notes/elsewhere/x",
        "notes/files/a/../../x",
    ],
)
def test_unsafe_member_paths_are_refused(name: str) -> None:
    with pytest.raises(InvalidArgument):
        packs.classify_member(name, "notes")


def test_member_roles() -> None:
    assert packs.classify_member("notes/", "notes") == ("top", "")
    assert packs.classify_member("notes/files/", "notes") == ("dir", "")
    assert packs.classify_member("notes/files/.overview.md", "notes") == ("file", ".overview.md")
    assert packs.classify_member("notes/files/sub/", "notes") == ("dir", "sub")
    assert packs.classify_member("notes/_ovpack/manifest.json", "notes") == (
        "internal",
        "_ovpack/manifest.json",
    )


def test_header_limits() -> None:
    ok = packs.MemberInfo("n/files/a", 10, 10)
    assert packs.check_members([ok], LIMITS) == "n"
    with pytest.raises(PayloadTooLarge):
        packs.check_members([packs.MemberInfo(f"n/files/{i}", 1, 1) for i in range(11)], LIMITS)
    with pytest.raises(PayloadTooLarge):
        packs.check_members([packs.MemberInfo("n/files/a", 501, 501)], LIMITS)
    with pytest.raises(PayloadTooLarge):
        packs.check_members([packs.MemberInfo(f"n/files/{i}", 400, 400) for i in range(3)], LIMITS)
    big = packs.PackLimits(10, 10**9, 10**9)
    with pytest.raises(PayloadTooLarge, match="inflating"):
        packs.check_members([packs.MemberInfo("n/files/bomb", 50 * 2**20, 1000)], big)
    with pytest.raises(InvalidArgument, match="symbolic"):
        packs.check_members([packs.MemberInfo("n/files/l", 1, 1, is_symlink=True)], LIMITS)
    with pytest.raises(InvalidArgument, match="Encrypted"):
        packs.check_members([packs.MemberInfo("n/files/e", 1, 1, encrypted=True)], LIMITS)
    with pytest.raises(InvalidArgument, match="Duplicate"):
        packs.check_members([ok, ok], LIMITS)
    with pytest.raises(InvalidArgument, match="one top folder"):
        packs.check_members([ok, packs.MemberInfo("m/files/a", 1, 1)], LIMITS)


def _manifest(members: dict[str, bytes]) -> dict[str, Any]:
    manifest: dict[str, Any] = json.loads(members["notes/_ovpack/manifest.json"])
    return manifest


def _with_manifest(members: dict[str, bytes], manifest: dict[str, Any]) -> dict[str, bytes]:
    return {**members, "notes/_ovpack/manifest.json": json.dumps(manifest).encode()}


@pytest.mark.parametrize(
    "tamper, message",
    [
        (lambda m: {**m, "notes/files/a.md": b"ALPHA"}, "does not match its manifest"),
        (lambda m: {**m, "notes/files/c.md": b"c"}, "do not match the manifest"),
        (
            lambda m: {k: v for k, v in m.items() if k != "notes/files/sub/"},
            "do not match the manifest",
        ),
        (lambda m: {k: v for k, v in m.items() if "index_records" not in k}, "internal entries"),
        (lambda m: {**m, "notes/_ovpack/extra": b""}, "internal entries"),
        (lambda m: {**m, "notes/_ovpack/manifest.json": b"[]"}, "Invalid pack manifest"),
        (lambda m: _with_manifest(m, {**_manifest(m), "format_version": 2}), "format_version"),
        (lambda m: _with_manifest(m, {**_manifest(m), "kind": "zip"}), "kind"),
        (
            lambda m: _with_manifest(m, {**_manifest(m), "content_sha256": "0" * 64}),
            "content_sha256",
        ),
        (
            lambda m: _with_manifest(
                m, {**_manifest(m), "root": {"name": "notes", "uri": "viking://agent/notes"}}
            ),
            "scope 'agent'",
        ),
        (
            lambda m: _with_manifest(
                m, {**_manifest(m), "root": {"name": "notes", "uri": "viking://resources/other"}}
            ),
            "does not match its uri",
        ),
    ],
)
def test_manifest_checks(
    tamper: Callable[[dict[str, bytes]], dict[str, bytes]], message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message):
        packs.parse_pack("notes", tamper(_pack()))


def test_bad_tags_are_refused_before_writing() -> None:
    members = dict(
        packs.build_members(
            "notes",
            "viking://resources/notes",
            [""],
            {"a.md": b"a"},
            [{"path": "a.md", "kind": "file", "level": 2, "scalars": {"tags": ["no-equals"]}}],
        )
    )
    with pytest.raises(InvalidArgument, match="tags"):
        packs.parse_pack("notes", members)
    assert packs.parse_tags_scalar("a=1, b=2", "x") == ["a=1", "b=2"]


def test_import_root_follows_openviking_rule() -> None:
    pack = packs.parse_pack("notes", _pack())
    assert packs.import_root(VikingURI("resources", ("x",)), pack) == VikingURI(
        "resources", ("x", "notes")
    )
    with pytest.raises(InvalidArgument, match="scope"):
        packs.import_root(VikingURI("user", ("bob",)), pack)
    with pytest.raises(InvalidArgument, match="viking://"):
        packs.import_root(VikingURI(None), pack)
    scope_pack = packs.parse_pack(
        "resources", dict(packs.build_members("resources", "viking://resources", [""], {}, []))
    )
    assert packs.import_root(VikingURI(None), scope_pack) == VikingURI("resources")
    with pytest.raises(InvalidArgument, match="imported to viking://"):
        packs.import_root(VikingURI("resources", ("x",)), scope_pack)
    mem = packs.parse_pack(
        "prefs",
        dict(packs.build_members("prefs", "viking://user/alice/memories/prefs", [""], {}, [])),
    )
    assert packs.import_root(VikingURI("user", ("bob", "memories")), mem) == VikingURI(
        "user", ("bob", "memories", "prefs")
    )
    with pytest.raises(InvalidArgument, match="user-space path"):
        packs.import_root(VikingURI("user", ("bob",)), mem)


def test_backups() -> None:
    backup = packs.parse_pack(packs.BACKUP_NAME, _pack("viking://", backup=True))
    assert backup.is_backup
    with pytest.raises(InvalidArgument, match="restore"):
        packs.import_root(VikingURI("resources"), backup)
    assert packs.backup_target("resources/a.md") == VikingURI("resources", ("a.md",))
    with pytest.raises(InvalidArgument):
        packs.backup_target("agent/skills/x")
    with pytest.raises(InvalidURI):
        packs.target_of(VikingURI("resources"), "a/../b")


def test_policies() -> None:
    pack = packs.parse_pack("notes", _pack())
    assert packs.check_on_conflict(None) == "fail"
    with pytest.raises(InvalidArgument):
        packs.check_on_conflict("merge")
    assert packs.check_vector_mode(None, pack) == "auto"
    with pytest.raises(InvalidArgument, match="no vector snapshot"):
        packs.check_vector_mode("require", pack)
