"""The `.ovpack` format (OpenViking 0.5.2, format version 3): layout, manifest and the rules a
pack must satisfy before anything of it is written.

A pack is a zip with one top folder `<name>/`: the tree below `<name>/files/` (dot names kept,
so the L0/L1 sidecars `.abstract.md` / `.overview.md` travel with their directory) and the
package's own files below `<name>/_ovpack/`: `manifest.json` (every entry with its size and
sha256, plus `content_sha256` over all of them) and `index_records.jsonl` (per entry and level:
the L0/L1 text and portable scalars such as tags). A backup is a pack named
`openviking-backup` whose root is `viking://` and whose entries start with their scope.

Nothing here reads a zip: the service hands over member names, sizes and bytes. Every check
raises InvalidArgument (400), PayloadTooLarge (413) or Conflict (409).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from skald.domain.errors import InvalidArgument, PayloadTooLarge
from skald.domain.paths.tags import normalize_tags
from skald.domain.paths.uri import ROOT, SCHEME, VikingURI, from_canonical

FORMAT_VERSION = 3
KIND = "openviking.ovpack"
INTERNAL_DIR = "_ovpack"
FILES_DIR = "files"
MANIFEST_PATH = f"{INTERNAL_DIR}/manifest.json"
INDEX_RECORDS_PATH = f"{INTERNAL_DIR}/index_records.jsonl"
DENSE_PATH = f"{INTERNAL_DIR}/dense.f32"
BACKUP_NAME = "openviking-backup"
BACKUP_TYPE = "backup"
# What a pack may hold, as in OpenViking: shared resources and user spaces (memories included).
PACK_SCOPES = ("resources", "user")
ON_CONFLICT = ("fail", "overwrite", "skip")
VECTOR_MODES = ("auto", "recompute", "require")
SIDECAR_NAMES = frozenset({".abstract.md", ".overview.md"})
# A member this large must not have shrunk more than MAX_RATIO times in the zip: a bomb is
# refused from its header, before it is inflated (inflating is also counted and capped).
RATIO_FLOOR_BYTES = 1024 * 1024
MAX_RATIO = 200

_DRIVE = re.compile(r"^[A-Za-z]:")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class PackLimits:
    max_entries: int
    max_total_bytes: int
    max_file_bytes: int
    max_ratio: int = MAX_RATIO


@dataclass(frozen=True)
class MemberInfo:
    """What a zip says about one member, before it is read."""

    name: str
    file_size: int
    compress_size: int
    is_symlink: bool = False
    encrypted: bool = False


@dataclass
class Pack:
    """A validated pack: every path is safe, every byte matches the manifest."""

    base_name: str
    manifest: dict[str, Any]
    files: dict[str, bytes]  # rel path -> content
    dirs: list[str]  # rel paths of directories, "" (the root) included
    records: list[dict[str, Any]] = field(default_factory=list)

    @property
    def root_uri(self) -> str:
        root = self.manifest.get("root")
        uri = root.get("uri") if isinstance(root, dict) else None
        return str(from_canonical(uri)) if isinstance(uri, str) else SCHEME

    @property
    def is_backup(self) -> bool:
        root = self.manifest.get("root")
        return (
            isinstance(root, dict)
            and root.get("package_type") == BACKUP_TYPE
            and self.root_uri == SCHEME
        )

    def tags_of(self, rel_path: str) -> list[str] | None:
        """The tags the index records carry for an entry (None when they say nothing)."""
        for record in self.records:
            if record.get("path") != rel_path:
                continue
            scalars = record.get("scalars")
            if isinstance(scalars, dict) and "tags" in scalars:
                return parse_tags_scalar(scalars["tags"], rel_path)
        return None


# -- paths ------------------------------------------------------------------------------------


def check_rel_path(rel_path: str) -> str:
    """A path below `files/`: relative, `/`-separated, no empty, `.` or `..` segment."""
    if rel_path == "":
        return rel_path
    if "\\" in rel_path or rel_path.startswith("/") or _DRIVE.match(rel_path) or "\x00" in rel_path:
        raise InvalidArgument("Unsafe path in pack", {"path": rel_path})
    if any(part in {"", ".", ".."} for part in rel_path.split("/")):
        raise InvalidArgument("Unsafe path in pack", {"path": rel_path})
    return rel_path


def zip_path(base_name: str, rel_path: str, *, is_dir: bool = False) -> str:
    check_rel_path(rel_path)
    if not rel_path:
        return f"{base_name}/{FILES_DIR}/"
    return f"{base_name}/{FILES_DIR}/{rel_path}" + ("/" if is_dir else "")


def base_name_of(names: list[str]) -> str:
    """The one top folder every member lives in."""
    if not names:
        raise InvalidArgument("The pack is empty")
    tops = {n.split("/", 1)[0] for n in names}
    if len(tops) != 1:
        raise InvalidArgument("A pack holds exactly one top folder", {"roots": sorted(tops)[:10]})
    base = tops.pop()
    if base in {"", ".", ".."} or _DRIVE.match(base) or "\\" in base:
        raise InvalidArgument("Unsafe pack root", {"root": base})
    return base


def classify_member(name: str, base_name: str) -> tuple[str, str]:
    """("internal" | "file" | "dir" | "top", path): a member's role and its path below its
    area. Anything unsafe or outside `files/` and `_ovpack/` is refused."""
    if not name or "\\" in name or name.startswith("/") or _DRIVE.match(name) or "\x00" in name:
        raise InvalidArgument("Unsafe path in pack", {"path": name[:300]})
    parts = name.split("/")
    if any(part in {".", ".."} for part in parts) or parts[0] != base_name:
        raise InvalidArgument("Unsafe path in pack", {"path": name[:300]})
    is_dir = name.endswith("/")
    rest = name[len(base_name) + 1 :].rstrip("/") if len(name) > len(base_name) else ""
    if rest == "":
        return "top", ""
    if rest == INTERNAL_DIR or rest.startswith(INTERNAL_DIR + "/"):
        return ("top" if rest == INTERNAL_DIR else "internal"), rest
    if rest == FILES_DIR:
        if not is_dir:
            raise InvalidArgument("Unexpected pack member", {"path": name[:300]})
        return "dir", ""
    if not rest.startswith(FILES_DIR + "/"):
        raise InvalidArgument("Unexpected pack member outside files/", {"path": name[:300]})
    rel = check_rel_path(rest[len(FILES_DIR) + 1 :])
    return ("dir" if is_dir else "file"), rel


def check_members(infos: list[MemberInfo], limits: PackLimits) -> str:
    """Checks what the zip declares, before any member is inflated; returns the base name."""
    if len(infos) > limits.max_entries:
        raise PayloadTooLarge("Pack entry count", len(infos), limits.max_entries)
    base = base_name_of([i.name for i in infos])
    seen: set[str] = set()
    total = 0
    for info in infos:
        if info.name in seen:
            raise InvalidArgument("Duplicate pack member", {"path": info.name[:300]})
        seen.add(info.name)
        classify_member(info.name, base)
        if info.is_symlink:
            raise InvalidArgument(
                "Pack members may not be symbolic links", {"path": info.name[:300]}
            )
        if info.encrypted:
            raise InvalidArgument(
                "Encrypted pack members are not supported", {"path": info.name[:300]}
            )
        if info.file_size > limits.max_file_bytes and not info.name.startswith(
            f"{base}/{INTERNAL_DIR}/"
        ):
            raise PayloadTooLarge(
                f"Pack member {info.name[:200]}", info.file_size, limits.max_file_bytes
            )
        if info.file_size > RATIO_FLOOR_BYTES and info.file_size > limits.max_ratio * max(
            info.compress_size, 1
        ):
            raise PayloadTooLarge(
                f"Pack member {info.name[:200]} (inflating more than {limits.max_ratio}:1)",
                info.file_size,
                limits.max_ratio * max(info.compress_size, 1),
            )
        total += info.file_size
        if total > limits.max_total_bytes:
            raise PayloadTooLarge("Pack content", total, limits.max_total_bytes)
    return base


# -- manifest ---------------------------------------------------------------------------------


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def content_sha256(files: dict[str, dict[str, Any]]) -> str:
    """The digest over every file entry (path, size, sha256), as OpenViking computes it."""
    listing = [
        {"path": p, "size": e["size"], "sha256": e["sha256"]} for p, e in sorted(files.items())
    ]
    payload = json.dumps(listing, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return sha256_hex(payload.encode("utf-8"))


def jsonl(records: list[dict[str, Any]]) -> bytes:
    lines = [
        json.dumps(r, ensure_ascii=False, sort_keys=True, separators=(",", ":")) for r in records
    ]
    return ("\n".join(lines) + "\n").encode("utf-8") if lines else b""


def _uri_scope(uri: str) -> str:
    return "root" if uri == SCHEME else from_canonical(uri).scope or "root"


def build_members(
    base_name: str,
    root_uri: str,
    dirs: list[str],
    files: dict[str, bytes],
    records: list[dict[str, Any]],
    *,
    backup: bool = False,
) -> list[tuple[str, bytes]]:
    """Every zip member of a pack, in order: the tree, then the index records and manifest."""
    entries: list[dict[str, Any]] = [{"path": "", "kind": "directory"}]
    members: list[tuple[str, bytes]] = [(f"{base_name}/", b""), (zip_path(base_name, ""), b"")]
    file_entries: dict[str, dict[str, Any]] = {}
    for rel in sorted(set(dirs) - {""}):
        entries.append({"path": rel, "kind": "directory", "size": 0})
        members.append((zip_path(base_name, rel, is_dir=True), b""))
    for rel, data in sorted(files.items()):
        entry = {"path": rel, "kind": "file", "size": len(data), "sha256": sha256_hex(data)}
        entries.append(entry)
        file_entries[rel] = entry
        members.append((zip_path(base_name, rel), data))
    numbered = [{"record_id": f"r{i:06d}", **r} for i, r in enumerate(records, start=1)]
    index_bytes = jsonl(numbered)
    root: dict[str, Any] = {"name": base_name, "uri": root_uri, "scope": _uri_scope(root_uri)}
    manifest: dict[str, Any] = {
        "kind": KIND,
        "format_version": FORMAT_VERSION,
        "root": root,
        "entries": entries,
        "content_sha256": content_sha256(file_entries),
        "index": {
            "records": {
                "path": INDEX_RECORDS_PATH,
                "count": len(numbered),
                "sha256": sha256_hex(index_bytes),
            }
        },
    }
    if backup:
        root["package_type"] = BACKUP_TYPE
        manifest["scopes"] = list(PACK_SCOPES)
    members.append((f"{base_name}/{INTERNAL_DIR}/", b""))
    members.append((f"{base_name}/{INDEX_RECORDS_PATH}", index_bytes))
    members.append(
        (
            f"{base_name}/{MANIFEST_PATH}",
            json.dumps(manifest, ensure_ascii=False, sort_keys=True, indent=2).encode("utf-8"),
        )
    )
    return members


def _json(data: bytes, what: str) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidArgument(f"Invalid JSON in pack {what}", {"reason": str(exc)}) from None


def _entries(manifest: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], set[str]]:
    raw = manifest.get("entries")
    if not isinstance(raw, list):
        raise InvalidArgument("Invalid pack manifest: entries must be a list")
    files: dict[str, dict[str, Any]] = {}
    dirs: set[str] = set()
    for i, entry in enumerate(raw):
        path = entry.get("path") if isinstance(entry, dict) else None
        if not isinstance(path, str):
            raise InvalidArgument("Invalid pack manifest entry", {"index": i})
        check_rel_path(path)
        if path in files or path in dirs:
            raise InvalidArgument("Duplicate pack manifest entry", {"path": path})
        kind = entry.get("kind")
        if kind == "directory":
            dirs.add(path)
        elif kind == "file":
            size, digest = entry.get("size"), entry.get("sha256")
            if (
                not isinstance(size, int)
                or isinstance(size, bool)
                or size < 0
                or not isinstance(digest, str)
                or not _SHA256.match(digest.lower())
            ):
                raise InvalidArgument("Invalid pack manifest file entry", {"path": path})
            files[path] = {"size": size, "sha256": digest.lower()}
        else:
            raise InvalidArgument("Invalid pack manifest entry kind", {"path": path, "kind": kind})
    return files, dirs


def _check_manifest_head(manifest: Any, base_name: str) -> dict[str, Any]:
    if not isinstance(manifest, dict):
        raise InvalidArgument("Invalid pack manifest")
    if manifest.get("kind") != KIND:
        raise InvalidArgument(
            "Invalid pack manifest kind",
            {"expected": KIND, "actual": str(manifest.get("kind"))[:100]},
        )
    if manifest.get("format_version") != FORMAT_VERSION:
        raise InvalidArgument(
            f"Unsupported pack format_version; this server reads {FORMAT_VERSION}",
            {"format_version": str(manifest.get("format_version"))[:20]},
        )
    root = manifest.get("root")
    if not isinstance(root, dict) or root.get("name") != base_name:
        raise InvalidArgument(
            "Pack manifest root name does not match the zip root", {"zip_root": base_name}
        )
    uri = root.get("uri")
    if not isinstance(uri, str):
        raise InvalidArgument("Pack manifest root uri is missing")
    parsed = from_canonical(uri)  # InvalidURI (400) when malformed
    if not parsed.is_root and parsed.name != base_name:
        raise InvalidArgument("Pack manifest root name does not match its uri", {"root_uri": uri})
    if not parsed.is_root and parsed.scope not in PACK_SCOPES:
        raise InvalidArgument(f"Packs of scope '{parsed.scope}' are not supported")
    return manifest


def _index_lines(data: bytes | None, manifest: dict[str, Any]) -> list[str]:
    """The lines of the index records file, checked against the manifest's entry for it."""
    index = manifest.get("index")
    info = index.get("records") if isinstance(index, dict) else None
    if not isinstance(info, dict) or info.get("path") != INDEX_RECORDS_PATH:
        raise InvalidArgument("Missing pack index records", {"field": "index.records"})
    if data is None:
        raise InvalidArgument("Missing pack index records", {"path": INDEX_RECORDS_PATH})
    if sha256_hex(data) != str(info.get("sha256", "")).lower():
        raise InvalidArgument("Pack index records sha256 mismatch")
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise InvalidArgument("Pack index records are not UTF-8") from None
    if len(lines) != info.get("count"):
        raise InvalidArgument("Pack index record count does not match the manifest")
    return lines


def _record(line: str, n: int, files: dict[str, dict[str, Any]], dirs: set[str]) -> dict[str, Any]:
    record = _json(line.encode("utf-8"), f"index record {n}")
    if (
        not isinstance(record, dict)
        or not isinstance(record.get("path"), str)
        or not isinstance(record.get("level"), int)
    ):
        raise InvalidArgument("Invalid pack index record", {"line": n})
    path = record["path"]
    kind = "file" if path in files else "directory" if path in dirs else None
    if kind is None or record.get("kind", kind) != kind:
        raise InvalidArgument("Pack index record names no entry", {"line": n, "path": path})
    for key in ("text", "scalars"):
        want = str if key == "text" else dict
        if key in record and not isinstance(record[key], want):
            raise InvalidArgument(f"Invalid pack index record {key}", {"line": n})
    return record


def _records(
    data: bytes | None, manifest: dict[str, Any], files: dict[str, dict[str, Any]], dirs: set[str]
) -> list[dict[str, Any]]:
    return [
        _record(line, n, files, dirs)
        for n, line in enumerate(_index_lines(data, manifest), start=1)
    ]


def _sort_members(
    base_name: str, members: dict[str, bytes]
) -> tuple[dict[str, bytes], set[str], set[str]]:
    """The members as content files, directories (the root included) and internal files."""
    files: dict[str, bytes] = {}
    dirs: set[str] = {""}
    internal: set[str] = set()
    for name, data in members.items():
        role, rel = classify_member(name, base_name)
        if role == "file":
            files[rel] = data
        elif role == "dir":
            dirs.add(rel)
        elif role == "internal" and not name.endswith("/"):
            internal.add(rel)
    return files, dirs, internal


def _check_internal(manifest: dict[str, Any], internal: set[str]) -> None:
    expected_internal = {MANIFEST_PATH, INDEX_RECORDS_PATH}
    index = manifest.get("index")
    if isinstance(index, dict) and index.get("dense") is not None:
        expected_internal.add(DENSE_PATH)
    if internal != expected_internal:
        raise InvalidArgument(
            "Pack internal entries do not match the manifest",
            {
                "missing": sorted(expected_internal - internal),
                "unexpected": sorted(internal - expected_internal)[:20],
            },
        )


def _check_entries(
    files: dict[str, bytes], dirs: set[str], m_files: dict[str, dict[str, Any]], m_dirs: set[str]
) -> None:
    """The same files and directories as the manifest, each with its parent directory."""
    if set(files) != set(m_files) or dirs != m_dirs:
        raise InvalidArgument(
            "Pack entries do not match the manifest",
            {
                "missing_files": sorted(set(m_files) - set(files))[:20],
                "unexpected_files": sorted(set(files) - set(m_files))[:20],
                "missing_directories": sorted(m_dirs - dirs)[:20],
                "unexpected_directories": sorted(dirs - m_dirs)[:20],
            },
        )
    for rel in [*files, *(dirs - {""})]:
        if _parent_rel(rel) not in dirs or rel in files and rel in dirs:
            raise InvalidArgument("A pack entry has no parent directory entry", {"path": rel})


def _check_contents(
    manifest: dict[str, Any], files: dict[str, bytes], m_files: dict[str, dict[str, Any]]
) -> None:
    """The content digest, and every file's size and sha256."""
    digest = str(manifest.get("content_sha256", "")).lower()
    if digest != content_sha256(m_files):
        raise InvalidArgument("Pack manifest content_sha256 mismatch")
    for rel, data in files.items():
        want = m_files[rel]
        if len(data) != want["size"] or sha256_hex(data) != want["sha256"]:
            raise InvalidArgument("Pack file does not match its manifest entry", {"path": rel})


def parse_pack(base_name: str, members: dict[str, bytes]) -> Pack:
    """Checks a pack's members (name -> bytes, directories with a trailing `/`) against its
    manifest: the same files and directories, every size and sha256, the content digest and
    the index records. Returns the pack; nothing is trusted that was not checked."""
    manifest_bytes = members.get(f"{base_name}/{MANIFEST_PATH}")
    if manifest_bytes is None:
        raise InvalidArgument("Missing pack manifest", {"path": MANIFEST_PATH})
    manifest = _check_manifest_head(_json(manifest_bytes, "manifest"), base_name)
    m_files, m_dirs = _entries(manifest)
    if "" not in m_dirs:
        raise InvalidArgument("Pack manifest has no root entry")
    files, dirs, internal = _sort_members(base_name, members)
    _check_internal(manifest, internal)
    _check_entries(files, dirs, m_files, m_dirs)
    _check_contents(manifest, files, m_files)
    records = _records(members.get(f"{base_name}/{INDEX_RECORDS_PATH}"), manifest, m_files, m_dirs)
    pack = Pack(base_name, manifest, files, sorted(dirs, key=lambda d: (d.count("/"), d)), records)
    for rel in [*files, *dirs]:
        pack.tags_of(rel)  # every tag is valid before anything is written
    return pack


def _parent_rel(rel: str) -> str:
    return rel.rsplit("/", 1)[0] if "/" in rel else ""


def parse_tags_scalar(value: Any, rel_path: str) -> list[str]:
    """Tags as OpenViking's index scalars hold them: a list or a comma-separated string."""
    if isinstance(value, str):
        value = [t.strip() for t in value.split(",") if t.strip()]
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise InvalidArgument("Invalid tags in pack index record", {"path": rel_path})
    try:
        return normalize_tags(value)
    except InvalidArgument as exc:
        raise InvalidArgument(f"Invalid tags in pack: {exc.message}", {"path": rel_path}) from None


# -- where a pack goes ------------------------------------------------------------------------


def check_pack_scope(uri: VikingURI, operation: str) -> None:
    if uri.is_root or uri.scope not in PACK_SCOPES:
        raise InvalidArgument(
            f"Pack {operation} is supported below viking://resources and viking://user only",
            {"uri": str(uri)},
        )


def import_root(parent: VikingURI, pack: Pack) -> VikingURI:
    """Where a pack lands, by OpenViking's rule: a scope's own pack (`viking://resources`)
    goes back to `viking://`; any other goes below `parent` under its own name, in the same
    scope, and a user-space pack at the same depth it came from."""
    if pack.is_backup:
        raise InvalidArgument("Backup packs are restored with the restore API (ov restore)")
    source = from_canonical(pack.root_uri)
    top_level = not source.parts
    if parent.is_root:
        if not top_level:
            raise InvalidArgument(
                "Only a scope's own pack can be imported to viking://", {"root": pack.base_name}
            )
        return source
    if top_level:
        raise InvalidArgument(
            "A scope's own pack must be imported to viking://",
            {"root": pack.base_name, "parent": str(parent)},
        )
    check_pack_scope(parent, "import")
    target = parent.child(pack.base_name)
    if source.scope != target.scope:
        raise InvalidArgument(
            "The pack's scope does not match the target's",
            {"source_scope": source.scope, "target_scope": target.scope},
        )
    if source.scope == "user" and len(source.parts) != len(target.parts):
        raise InvalidArgument(
            "The pack's user-space path does not fit the target",
            {"source": str(source), "target": str(target)},
        )
    return target


def target_of(root: VikingURI, rel_path: str) -> VikingURI:
    return root.child(rel_path) if rel_path else root


def backup_target(rel_path: str) -> VikingURI:
    """Where a backup entry goes: its first segment is its scope."""
    if rel_path == "":
        return ROOT
    scope = rel_path.split("/", 1)[0]
    if scope not in PACK_SCOPES:
        raise InvalidArgument(
            "Backup entry outside viking://resources and viking://user", {"path": rel_path}
        )
    return ROOT.child(rel_path)


def check_on_conflict(value: str | None) -> str:
    value = value or "fail"
    if value not in ON_CONFLICT:
        raise InvalidArgument(f"Invalid on_conflict '{value}': fail, overwrite or skip")
    return value


def check_vector_mode(value: str | None, pack: Pack) -> str:
    """Vectors are always recomputed by this server's embedder; `require` asks for a dense
    snapshot, which a pack without one cannot give."""
    value = value or "auto"
    if value not in VECTOR_MODES:
        raise InvalidArgument(f"Invalid vector_mode '{value}': auto, recompute or require")
    index = pack.manifest.get("index")
    if value == "require" and not (isinstance(index, dict) and index.get("dense")):
        raise InvalidArgument("vector_mode 'require': the pack holds no vector snapshot")
    return value
