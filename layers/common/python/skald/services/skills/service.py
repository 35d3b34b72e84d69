"""Skills: add, replace, list, show and remove agent skill packages (finding them: search.py).

A skill is a package directory `<namespace>/<name>/` whose `SKILL.md` is its definition; other
files of an uploaded package sit beside it. The namespaces are the caller's own
`viking://user/<uid>/skills` (the default, as in OpenViking) and the account's shared
`viking://agent/skills`. A package is written whole after every part of it was checked, then
processed like any other write: its directory's L0 is the skill's description, and retrieval
folds every record of a package into one hit, `<package>/SKILL.md`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from skald.domain.access.identity import Identity
from skald.domain.access.visibility import check_access
from skald.domain.errors import InvalidArgument, NotFound
from skald.domain.paths.names import ABSTRACT, OVERVIEW
from skald.domain.paths.uri import VikingURI, classify_uri, parse_uri
from skald.domain.sources.skills import (
    SKILL_FILE,
    Skill,
    parse_skill_md,
    render_skill_md,
    skill_from_data,
    skill_header,
    validate_skill_format,
    validate_skill_name,
)
from skald.ports import Task
from skald.services.audit import AuditTrail, audited
from skald.services.fs.entries import FsChange
from skald.services.fs.filesystem import VikingFS
from skald.services.ingest.processing import ProcessingScheduler
from skald.services.ingest.resources import ResourceService
from skald.services.ingest.results import ProcessingStatus
from skald.services.plans.quotas import Quotas
from skald.services.skills.results import (
    NOT_ASKED,
    PackagedSkill,
    SkillAdded,
    SkillDetail,
    SkillFile,
    SkillIssue,
    SkillList,
    SkillRemoved,
    SkillsAdded,
    SkillsInPackage,
    SkillStatus,
    SkillSummary,
    SkillValidation,
)

AGENT_SKILLS = VikingURI("agent", ("skills",))
# Where a package came from, kept beside SKILL.md (hidden, never indexed): `show` reports it.
SOURCE_FILE = ".skill-source.json"
MAX_LISTED = 1000


def user_skills(identity: Identity) -> VikingURI:
    return identity.user_root.child("skills")


def default_namespaces(identity: Identity) -> list[VikingURI]:
    """Where skills are looked up without a target: the caller's own, then the shared ones."""
    return [user_skills(identity), AGENT_SKILLS]


def namespace_of(identity: Identity, raw: str) -> VikingURI:
    """The skill namespace a `target_uri` names (the namespace itself or anything below)."""
    uri = parse_uri(raw, user_id=identity.user_id, privileged=identity.privileged)
    ns = classify_uri(uri).skill_namespace
    if ns is None:
        raise InvalidArgument(
            f"Unsupported skill target URI: {raw}",
            {"field": "target_uri", "allowed": [str(u) for u in default_namespaces(identity)]},
        )
    return ns


def _package_keys(root: VikingURI, name: str, header: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "uri": str(root),
        "root_uri": str(root),
        "skill_md_uri": str(root.child(SKILL_FILE)),
        "description": header.get("description", ""),
        "tags": header.get("tags", []),
        "allowed_tools": header.get("allowed_tools", []),
    }


def summary(root: VikingURI, name: str, header: dict[str, Any]) -> SkillSummary:
    return SkillSummary(**_package_keys(root, name, header))


def _namespaces_head(spaces: list[VikingURI], targeted: bool) -> dict[str, Any]:
    """`root_uri` with a target, `root_uris` without."""
    return {"root_uri": str(spaces[0])} if targeted else {"root_uris": [str(s) for s in spaces]}


@dataclass
class Package:
    """A checked skill package, ready to be written."""

    skill: Skill
    definition: str  # the SKILL.md text to store
    files: list[tuple[str, bytes]] = field(default_factory=list)  # beside SKILL.md
    source: str = "inline_content"
    temp_file_id: str | None = None
    filename: str | None = None


class SkillService:
    def __init__(
        self,
        fs: VikingFS,
        resources: ResourceService,
        scheduler: ProcessingScheduler,
        *,
        wait_timeout_s: float,
        audit: AuditTrail | None = None,
        quotas: Quotas | None = None,
    ) -> None:
        self.audit = audit
        self.quotas = quotas
        self.fs = fs
        self.resources = resources
        self.scheduler = scheduler
        self.wait_timeout_s = wait_timeout_s

    # ---------------------------------------------------------------- reading a package

    def packages(self, identity: Identity, data: Any, temp_file_id: str | None) -> list[Package]:
        """The skills of a request: exactly one of `data` (SKILL.md text, a skill object, an
        MCP tool definition) and `temp_file_id` (an uploaded SKILL.md, a zipped package, or a
        zip of several packages, one folder each)."""
        if temp_file_id and data is not None:
            raise InvalidArgument(
                "Send either 'data' or 'temp_file_id', not both",
                {"fields": ["data", "temp_file_id"]},
            )
        if not temp_file_id:
            if data is None:
                raise InvalidArgument(
                    "Either 'data' or 'temp_file_id' must be provided",
                    {"fields": ["data", "temp_file_id"]},
                )
            skill = skill_from_data(data)
            text = data if isinstance(data, str) else render_skill_md(skill)
            return [Package(skill, text)]
        filename, blob, is_zip = self.resources.open_upload(identity, temp_file_id)
        if not is_zip:
            text = _text(blob, filename)
            return [
                Package(
                    parse_skill_md(text),
                    text,
                    source="temp_upload",
                    temp_file_id=temp_file_id,
                    filename=filename,
                )
            ]
        members = self.resources.unpack(blob)
        folders = (
            [""]
            if any(rel == SKILL_FILE for rel, _ in members)
            else sorted(
                rel[: -len(SKILL_FILE)]
                for rel, _ in members
                if rel.count("/") == 1 and rel.endswith("/" + SKILL_FILE)
            )
        )
        if not folders:
            raise InvalidArgument(
                f"The package {filename} has no {SKILL_FILE} at its top level "
                "nor in any of its folders",
                {"field": "temp_file_id"},
            )
        out: list[Package] = []
        for folder in folders:
            mine = [(rel[len(folder) :], c) for rel, c in members if rel.startswith(folder)]
            text = _text(next(c for rel, c in mine if rel == SKILL_FILE), folder + SKILL_FILE)
            out.append(
                Package(
                    parse_skill_md(text),
                    text,
                    [(rel, c) for rel, c in mine if rel != SKILL_FILE],
                    "temp_upload",
                    temp_file_id,
                    filename,
                )
            )
        return out

    def package(self, identity: Identity, data: Any, temp_file_id: str | None) -> Package:
        """The one skill of a request."""
        found = self.packages(identity, data, temp_file_id)
        if len(found) != 1:
            raise InvalidArgument(
                f"The package holds {len(found)} skills; send one",
                {"skills": [p.skill.name for p in found]},
            )
        return found[0]

    # ---------------------------------------------------------------- writing

    def add(
        self,
        identity: Identity,
        data: Any,
        *,
        temp_file_id: str | None,
        target_uri: str | None,
        wait: bool,
        source_metadata: dict[str, Any] | None = None,
        names: list[str] | None = None,
        list_only: bool = False,
        timeout_s: float | None = None,
    ) -> SkillAdded | SkillsAdded | SkillsInPackage:
        """Adds the request's skills (those in `names` only, `*` for all); `list_only` tells
        which skills the request holds and writes nothing."""
        ns = namespace_of(identity, target_uri) if target_uri else user_skills(identity)
        found = self.packages(identity, data, temp_file_id)
        if names and "*" not in names:
            known = {p.skill.name for p in found}
            unknown = sorted(set(names) - known)
            if unknown:
                raise InvalidArgument(
                    f"No skill named {', '.join(unknown)} in the package",
                    {"unknown": unknown, "available": sorted(known)},
                )
            found = [p for p in found if p.skill.name in names]
        if list_only:
            listed = [
                PackagedSkill(p.skill.name, p.skill.description, str(ns.child(p.skill.name)))
                for p in found
            ]
            return SkillsInPackage(listed, len(listed))
        for pkg in found:  # every package can be stored before any is
            self._check(identity, ns.child(pkg.skill.name), pkg)
        files = sum(1 + len(p.files) for p in found)  # the plan's index records, one per file
        added = self.quotas.check_index_records(identity.account_id, files) if self.quotas else 0
        results = [
            self._store(
                identity, ns.child(p.skill.name), p, _waits(wait, timeout_s), "add", source_metadata
            )
            for p in found
        ]
        if added and self.quotas is not None:
            self.quotas.index_records_added(identity.account_id, added)
        if temp_file_id:
            self.resources.discard_upload(identity, temp_file_id)
        if len(results) == 1:
            return results[0]
        return SkillsAdded(SkillStatus.SUCCESS, results, len(results))

    def update(
        self,
        identity: Identity,
        name: str,
        data: Any,
        *,
        temp_file_id: str | None,
        target_uri: str | None,
        wait: bool,
        source_metadata: dict[str, Any] | None = None,
        timeout_s: float | None = None,
    ) -> SkillAdded:
        root = self.require(identity, name, target_uri)
        pkg = self.package(identity, data, temp_file_id)
        if pkg.skill.name != root.name:
            raise InvalidArgument(
                f"Skill name mismatch: the path names '{root.name}', the "
                f"content names '{pkg.skill.name}'",
                {"expected": root.name, "actual": pkg.skill.name},
            )
        self._check(identity, root, pkg)
        result = self._store(
            identity, root, pkg, _waits(wait, timeout_s), "update", source_metadata
        )
        if temp_file_id:
            self.resources.discard_upload(identity, temp_file_id)
        result.action = "update"
        return result

    @staticmethod
    def _targets(root: VikingURI, pkg: Package) -> list[tuple[VikingURI, bytes]]:
        targets = [(root.child(SKILL_FILE), pkg.definition.encode("utf-8"))]
        return targets + [(root.child(*rel.split("/")), c) for rel, c in pkg.files]

    def _check(self, identity: Identity, root: VikingURI, pkg: Package) -> None:
        """Nothing is written unless everything can be."""
        check_access(identity, root, write=True)
        for uri, content in self._targets(root, pkg):
            self.fs.check_writable_name(uri)
            self.fs.check_size(len(content))

    def _store(
        self,
        identity: Identity,
        root: VikingURI,
        pkg: Package,
        wait: float | None,
        operation: str,
        source_metadata: dict[str, Any] | None,
    ) -> SkillAdded:
        targets = self._targets(root, pkg)
        change = FsChange(identity.account_id, identity.user_id)
        if self.fs.is_dir(identity, root):
            # a new version replaces the package whole: no file of the old one lingers
            _, gone = self.fs.rm(identity, root, recursive=True)
            change.removed.extend(gone.removed)
        change.dirs.extend(self.fs.mkdir(identity, root, pkg.skill.description or None).dirs)
        for uri, content in targets:
            _, written = self.fs.write(identity, uri, content, "replace")
            change.dirs.extend(written.dirs)
            change.written.extend(written.written)
        source = (
            source_metadata
            if source_metadata is not None
            else {
                "type": "api",
                "source": pkg.source,
                "operation": operation,
                **({"original_filename": pkg.filename} if pkg.filename else {}),
            }
        )
        # not in the change: the record is for `show`, not for retrieval
        self.fs.write(
            identity,
            root.child(SOURCE_FILE),
            json.dumps(source, sort_keys=True).encode("utf-8"),
            "replace",
        )
        task, status = self._process(identity, change, f"{operation}_skill", wait, root)
        return SkillAdded(
            status=SkillStatus.SUCCESS,
            name=pkg.skill.name,
            uri=str(root),
            root_uri=str(root),
            skill_md_uri=str(root.child(SKILL_FILE)),
            auxiliary_files=len(pkg.files),
            source=pkg.source,
            task_id=task.task_id,
            semantic_status=status,
        )

    def _process(
        self,
        identity: Identity,
        change: FsChange,
        task_type: str,
        wait: float | None,
        root: VikingURI,
    ) -> tuple[Task, ProcessingStatus]:
        """Schedules the change's processing; waits `wait` seconds at most (None: no wait,
        never longer than the configured wait)."""
        task = self.scheduler.submit(identity, change, task_type=task_type, resource_id=str(root))
        if wait is None:
            return task, ProcessingStatus.QUEUED
        task = self.scheduler.wait_task(
            identity,
            task.task_id,
            min(wait, self.wait_timeout_s) if wait > 0 else self.wait_timeout_s,
        )
        return task, ProcessingStatus.of_task(task.status)

    def delete(self, identity: Identity, name: str, target_uri: str | None) -> SkillRemoved:
        """Recorded in the audit trail once the skill is found (its package's URI)."""
        root = self.require(identity, name, target_uri)
        with audited(self.audit, identity, "skill.delete", str(root)) as note:
            count, change = self.fs.rm(identity, root, recursive=True)
            note.detail["deleted"] = count
        task, _ = self._process(identity, change, "rm", None, root)
        return SkillRemoved(root.name, str(root), str(root), count, task.task_id)

    # ---------------------------------------------------------------- reading

    def require(self, identity: Identity, name: str, target_uri: str | None) -> VikingURI:
        """The package directory of skill `name`: in the target's namespace, else the
        caller's own skills, then the shared ones."""
        name = validate_skill_name(name)
        spaces = (
            [namespace_of(identity, target_uri)] if target_uri else default_namespaces(identity)
        )
        for ns in spaces:
            root = ns.child(name)
            check_access(identity, root, write=False)
            if self.fs.is_dir(identity, root):
                return root
        missing = spaces[0].child(name)
        raise NotFound(f"Skill not found: {name}", str(missing), "skill")

    def header(self, identity: Identity, root: VikingURI) -> dict[str, Any] | None:
        try:
            text = self.fs.read_bytes(identity, root.child(SKILL_FILE))
        except NotFound:
            return None
        return skill_header(text.decode("utf-8", errors="replace"))

    def listing(self, identity: Identity, node_limit: int, target_uri: str | None) -> SkillList:
        if node_limit < 1:
            raise InvalidArgument("node_limit must be >= 1", {"field": "node_limit"})
        spaces = (
            [namespace_of(identity, target_uri)] if target_uri else default_namespaces(identity)
        )
        skills: list[SkillSummary] = []
        for ns in spaces:
            skills.extend(self._listed(identity, ns, min(node_limit, MAX_LISTED) - len(skills)))
        return SkillList(
            **_namespaces_head(spaces, bool(target_uri)), skills=skills, total=len(skills)
        )

    def _listed(self, identity: Identity, ns: VikingURI, limit: int) -> list[SkillSummary]:
        if limit <= 0 or not self.fs.is_dir(identity, ns):
            return []
        out: list[SkillSummary] = []
        for entry in self.fs.children(identity, ns, show_hidden=False):
            if not entry.is_dir:
                continue
            header = self.header(identity, entry.uri)
            if header is None:
                continue  # a directory without a readable SKILL.md is not a skill
            out.append(summary(entry.uri, entry.uri.name, header))
            if len(out) >= limit:
                break
        return out

    def show(
        self,
        identity: Identity,
        name: str,
        *,
        target_uri: str | None,
        include_content: bool | None,
        include_files: bool,
        include_integrity: bool,
        include_source: bool,
        level: int | None,
    ) -> SkillDetail:
        if level is not None and level not in (0, 1, 2):
            raise InvalidArgument(
                "Skill show level must be 0, 1, or 2", {"field": "level", "allowed": [0, 1, 2]}
            )
        root = self.require(identity, name, target_uri)
        text = (
            self.fs.read_bytes(identity, root.child(SKILL_FILE)).decode("utf-8", errors="replace")
            if self.fs.file_info(identity, root.child(SKILL_FILE)) is not None
            else ""
        )
        out = SkillDetail(**_package_keys(root, root.name, skill_header(text) or {}))
        if level in (None, 0):
            out.abstract = self.fs.sidecar(identity, root, ABSTRACT)[1] or ""
        if level in (None, 1):
            out.overview = _without_ledger(self.fs.sidecar(identity, root, OVERVIEW)[1] or "")
        if level == 2 or include_content is True or (level is None and include_content is None):
            out.content = text
            out.content_sha256 = hashlib.sha256(text.encode("utf-8")).hexdigest()
        if include_files or include_integrity:
            files = self._files(identity, root, include_integrity)
            out.files = files
            if include_integrity:
                out.revision = _revision(files)
        out.source = self._source(identity, root) if include_source else NOT_ASKED
        return out

    def _source(self, identity: Identity, root: VikingURI) -> dict[str, Any] | None:
        try:
            record = json.loads(self.fs.read_bytes(identity, root.child(SOURCE_FILE)))
        except (NotFound, ValueError):
            return None  # added before sources were recorded, or edited by hand
        return record if isinstance(record, dict) else None

    def _files(self, identity: Identity, root: VikingURI, integrity: bool) -> list[SkillFile]:
        out: list[SkillFile] = []
        for entry in self.fs.walk(identity, root):
            path = entry.rel_path
            size = digest = None
            if integrity and not entry.is_dir:
                data = self.fs.read_bytes(identity, entry.uri)
                size, digest = len(data), hashlib.sha256(data).hexdigest()
            out.append(
                SkillFile(
                    name=entry.uri.name,
                    uri=str(entry.uri),
                    path=path,
                    is_dir=entry.is_dir,
                    kind="directory"
                    if entry.is_dir
                    else "definition"
                    if path == SKILL_FILE
                    else "auxiliary",
                    size=size,
                    sha256=digest,
                )
            )
        out.sort(key=lambda f: f.path)
        return out

    @staticmethod
    def validate(
        data: Any, *, strict: bool, skill_dir_name: str | None, source_path: str | None
    ) -> SkillValidation:
        report = validate_skill_format(
            data, strict=strict, skill_dir_name=skill_dir_name, source_path=source_path
        )
        issues = {k: [SkillIssue(**i) for i in report[k]] for k in ("errors", "warnings")}
        return SkillValidation(**{**report, **issues})


def _waits(wait: bool, timeout_s: float | None) -> float | None:
    """How long a request waits for processing: None without `wait`, 0 for the default."""
    if not wait:
        return None
    if timeout_s is not None and timeout_s <= 0:
        raise InvalidArgument("timeout must be a positive number of seconds", {"field": "timeout"})
    return timeout_s or 0.0


def _text(data: bytes, name: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidArgument(f"{name} is not UTF-8 text", {"field": "temp_file_id"}) from None


def _without_ledger(overview: str) -> str:
    """An overview without the freshness ledger the pipeline keeps at its top."""
    if overview.startswith("---\n"):
        end = overview.find("\n---\n", 4)
        if end >= 0:
            return overview[end + 5 :].lstrip("\n")
    return overview


def _revision(files: list[SkillFile]) -> str:
    payload = [
        {"path": f.path, "is_dir": f.is_dir, "size": f.size, "sha256": f.sha256} for f in files
    ]
    return hashlib.sha256(
        json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()
