"""OpenSearch's own API specification (OpenAPI 3.1, vendored read-only beside the repository)
as a request validator: the operation for a method and path, its query parameters, and its
request body schema, `$ref`s resolved across the YAML files by a `referencing` registry and
checked with `jsonschema` (Draft 2020-12, the dialect of OpenAPI 3.1).

NDJSON bodies are checked line by line against the schema of their position: `_bulk` action
lines against `OperationContainer` (and update sources against `UpdateAction`), `_msearch`
header lines against `MultisearchHeader` and body lines against `MultisearchBody`.

Strict mode closes the objects the spec leaves open (`QueryContainer` and every schema with
`properties`): an unknown key, e.g. a misspelt query type, is an error, as it is for
OpenSearch's parser. Schemas used as members of an `allOf` keep their own openness (their
siblings supply the other keys) and the `allOf` as a whole is closed instead.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import yaml
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from tests.contract.seams import ROOT

SPEC_ENV = "SKALD_OPENSEARCH_API_SPEC"
# Laid out beside the repository in CI (shared/ next to the clone); the env var overrides.
DEFAULT_SPEC = ROOT.parent / "shared" / "vendor" / "opensearch-api-spec"


def spec_root() -> Path | None:
    """The vendored specification's `spec/` folder, or None when it is not there."""
    base = Path(os.environ.get(SPEC_ENV) or DEFAULT_SPEC)
    folder = base / "spec" if (base / "spec").is_dir() else base
    return folder if (folder / "namespaces").is_dir() else None


@dataclass(frozen=True)
class Operation:
    operation_id: str
    file_uri: str
    path: str  # the spec's path template, e.g. /{index}/_search
    verb: str
    body: dict[str, Any]  # the operation object


class OpenSearchSpec:
    def __init__(self, root: Path, *, strict: bool = True) -> None:
        self.root = root
        self.strict = strict
        raw = {
            path.as_uri(): yaml.load(
                path.read_text(encoding="utf-8"),
                Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader),
            )
            for path in sorted(root.rglob("*.yaml"))
        }
        members = {member for uri, doc in raw.items() for member in _all_of_members(uri, doc)}
        self._contents: dict[str, Any] = {
            uri: _closed(uri, doc, members, raw) if strict else doc for uri, doc in raw.items()
        }
        # Every file registered (and crawled) up front: validators share the resolved refs.
        self.registry: Registry[Any] = (
            Registry()
            .with_resources(
                (uri, Resource.from_contents(doc, default_specification=DRAFT202012))
                for uri, doc in self._contents.items()
            )
            .crawl()
        )
        self._validators: dict[str, Draft202012Validator] = {}
        self.operations: list[Operation] = []
        for path in sorted((root / "namespaces").glob("*.yaml")):
            uri = path.as_uri()
            for template, item in (self._load(uri).get("paths") or {}).items():
                for verb, op in item.items():
                    if isinstance(op, dict) and "operationId" in op:
                        self.operations.append(
                            Operation(op["operationId"], uri, template, verb.upper(), op)
                        )
        globals_uri = (root / "_global_parameters.yaml").as_uri()
        self.global_parameters = set(
            (self._load(globals_uri).get("components") or {}).get("parameters") or {}
        )

    # -- loading ---------------------------------------------------------------------------

    def _load(self, uri: str) -> Any:
        if uri not in self._contents:
            raise KeyError(f"{unquote(urlparse(uri).path)} is not part of the specification")
        return self._contents[uri]

    def lookup(self, ref: str, base: str) -> tuple[Any, str]:
        """The contents a `$ref` points at, and the URI it resolved to."""
        resolved = self.registry.resolver(base_uri=base).lookup(ref)
        return resolved.contents, _join(base, ref)

    # -- operations ------------------------------------------------------------------------

    def operation(self, verb: str, path: str) -> tuple[Operation, dict[str, str]] | None:
        """The operation serving `verb path` (the most literal template wins) and its path
        parameters."""
        segments = [s for s in path.split("/") if s]
        best: tuple[int, Operation, dict[str, str]] | None = None
        for op in self.operations:
            if op.verb != verb.upper():
                continue
            parts = [s for s in op.path.split("/") if s]
            if len(parts) != len(segments):
                continue
            params: dict[str, str] = {}
            literal = 0
            for part, seg in zip(parts, segments, strict=True):
                if part.startswith("{") and part.endswith("}"):
                    params[part[1:-1]] = unquote(seg)
                elif part == seg:
                    literal += 1
                else:
                    break
            else:
                if best is None or literal > best[0]:
                    best = (literal, op, params)
        return None if best is None else (best[1], best[2])

    def _parameters(self, op: Operation) -> dict[tuple[str, str], tuple[dict[str, Any], str]]:
        out: dict[tuple[str, str], tuple[dict[str, Any], str]] = {}
        for param in op.body.get("parameters") or []:
            if "$ref" not in param:
                raise ValueError(f"{op.operation_id}: inline parameters are not supported")
            contents, uri = self.lookup(param["$ref"], op.file_uri)
            out[(contents["in"], contents["name"])] = (contents, uri)
        return out

    def _validator(self, schema_ref: str) -> Draft202012Validator:
        if schema_ref not in self._validators:
            self._validators[schema_ref] = Draft202012Validator(
                {"$ref": schema_ref}, registry=self.registry
            )
        return self._validators[schema_ref]

    def validate(
        self, verb: str, path: str, params: Mapping[str, Any] | None, body: Any
    ) -> list[str]:
        """Every way `verb path?params` with `body` departs from the specification."""
        found = self.operation(verb, path)
        if found is None:
            return [f"{verb} {path}: no operation in the OpenSearch API specification"]
        op, path_params = found
        where = f"{verb} {path} ({op.operation_id})"
        declared = self._parameters(op)
        errors: list[str] = []
        for name, value in path_params.items():
            errors += self._check_param(where, declared, "path", name, value)
        for name, value in (params or {}).items():
            if name in self.global_parameters:
                continue
            errors += self._check_param(where, declared, "query", name, value)
        errors += self._check_body(where, op, body)
        return errors

    def _check_param(
        self, where: str, declared: Mapping[tuple[str, str], Any], kind: str, name: str, value: Any
    ) -> list[str]:
        if (kind, name) not in declared:
            return [f"{where}: {kind} parameter {name!r} is not defined by the operation"]
        _, uri = declared[(kind, name)]
        validator = self._validator(f"{uri}/schema")
        # Query strings are text: "true" is the boolean true, "10" the number 10.
        candidates = [value] if not isinstance(value, str) else [value, _json_or(value)]
        if any(validator.is_valid(c) for c in candidates):
            return []
        return [f"{where}: {kind} parameter {name}={value!r} does not match its schema"]

    def _check_body(self, where: str, op: Operation, body: Any) -> list[str]:
        ref = (op.body.get("requestBody") or {}).get("$ref")
        if body is None:
            required = False
            if ref is not None:
                request_body, _ = self.lookup(ref, op.file_uri)
                required = bool(request_body.get("required"))
            return [f"{where}: the request body is required"] if required else []
        if ref is None:
            return [f"{where}: the operation takes no request body"]
        request_body, body_uri = self.lookup(ref, op.file_uri)
        content = request_body.get("content") or {}
        if "application/x-ndjson" in content:
            return self._check_ndjson(where, op, _lines(body))
        pointer = f"{body_uri}/content/application~1json/schema"
        return _errors(where, self._validator(pointer), body)

    def _check_ndjson(self, where: str, op: Operation, lines: list[Any]) -> list[str]:
        schemas = self.root / "schemas"
        group = op.body.get("x-operation-group")
        if group == "bulk":
            action_ref = (
                schemas / "_core.bulk.yaml"
            ).as_uri() + "#/components/schemas/OperationContainer"
            update_ref = (
                schemas / "_core.bulk.yaml"
            ).as_uri() + "#/components/schemas/UpdateAction"
            return self._check_bulk(where, lines, action_ref, update_ref)
        if group == "msearch":
            base = (schemas / "_core.msearch.yaml").as_uri() + "#/components/schemas/"
            header = self._validator(base + "MultisearchHeader")
            search = self._validator(base + "MultisearchBody")
            errors: list[str] = []
            if len(lines) % 2:
                errors.append(f"{where}: an odd number of lines (header/body pairs expected)")
            for i, line in enumerate(lines):
                errors += _errors(f"{where} line {i + 1}", header if i % 2 == 0 else search, line)
            return errors
        return [f"{where}: no line schema known for this NDJSON operation"]

    def _check_bulk(
        self, where: str, lines: list[Any], action_ref: str, update_ref: str
    ) -> list[str]:
        action = self._validator(action_ref)
        update = self._validator(update_ref)
        errors: list[str] = []
        i = 0
        while i < len(lines):
            line = lines[i]
            errors += _errors(f"{where} line {i + 1}", action, line)
            kind = next(iter(line), None) if isinstance(line, dict) else None
            if kind in ("index", "create", "update"):
                if i + 1 >= len(lines):
                    errors.append(f"{where} line {i + 1}: {kind} without a source line")
                    break
                source = lines[i + 1]
                if kind == "update":
                    errors += _errors(f"{where} line {i + 2}", update, source)
                elif not isinstance(source, dict):
                    errors.append(f"{where} line {i + 2}: a document must be an object")
                i += 2
            else:
                i += 1
        return errors


def _errors(where: str, validator: Draft202012Validator, instance: Any) -> list[str]:
    out = []
    for error in sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path)):
        at = "/".join(str(p) for p in error.absolute_path) or "(body)"
        out.append(f"{where}: at {at}: {_brief(error)}")
    return out


def _brief(error: Any) -> str:
    # oneOf/anyOf failures nest: the deepest, most specific reason reads best.
    best = error
    while best.context:
        best = max(best.context, key=lambda e: len(list(e.absolute_path)))
    message: str = best.message
    return message if len(message) < 300 else message[:297] + "..."


def _lines(body: Any) -> list[Any]:
    if isinstance(body, bytes):
        body = body.decode("utf-8")
    if isinstance(body, str):
        return [json.loads(line) for line in body.splitlines() if line.strip()]
    if isinstance(body, list):
        return list(body)
    return [body]


def _json_or(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _join(base: str, ref: str) -> str:
    if ref.startswith("#"):
        return base.split("#", 1)[0] + ref
    head = base.split("#", 1)[0].rsplit("/", 1)[0]
    target, _, fragment = ref.partition("#")
    parts: list[str] = head.split("/")
    for piece in target.split("/"):
        if piece == "..":
            parts.pop()
        elif piece not in ("", "."):
            parts.append(piece)
    return "/".join(parts) + (f"#{fragment}" if fragment else "")


# -- strict mode ---------------------------------------------------------------------------


def _closed(uri: str, doc: Any, members: set[tuple[str, str]], raw: Mapping[str, Any]) -> Any:
    """A copy of a spec document whose object schemas reject keys they do not describe.
    `members`: (file URI, schema name) of the named schemas used as allOf members anywhere;
    they stay open (their siblings supply the keys they do not describe) and the allOf that
    uses them is closed instead."""
    closed = _close(doc, uri, raw)
    _reopen_members(uri, closed, doc, members)
    return closed


# Keywords with which a schema already admits keys it does not list (or leaves that to
# another schema): such a schema is left as it is.
_OPEN_KEYWORDS = (
    "additionalProperties",
    "unevaluatedProperties",
    "patternProperties",
    "propertyNames",
    "anyOf",
    "oneOf",
    "$ref",
)


def _close(node: Any, uri: str, raw: Mapping[str, Any], in_all_of: bool = False) -> Any:
    """`node` and every schema under it closed (see `_closed`)."""
    if isinstance(node, list):
        return [_close(n, uri, raw) for n in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "allOf" and isinstance(value, list):
            out[key] = [_close(v, uri, raw, in_all_of=True) for v in value]
        elif key == "oneOf":
            # The spec's alternatives overlap in places (`{"_score": ...}` is both a
            # SortOptions and a field sort): any matching alternative will do.
            out["anyOf"] = _close(value, uri, raw)
        else:
            out[key] = _close(value, uri, raw)
    describes = "properties" in node or "allOf" in node
    open_already = any(k in node for k in _OPEN_KEYWORDS)
    if describes and not open_already and not in_all_of:
        out.update(_closing(node, uri, raw))
    return out


def _closing(node: Mapping[str, Any], uri: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword that makes a schema describing keys reject every other key."""
    if "allOf" not in node:
        return {"additionalProperties": False}  # sees this node's own properties
    # The keys the members describe, when they can be listed (much cheaper to check than
    # unevaluatedProperties, which re-validates to find them).
    keys = _keys(node, uri, raw)
    if keys is not None:
        return {"propertyNames": {"enum": sorted(keys)}}
    return {"unevaluatedProperties": False}


def _reopen_members(uri: str, closed: Any, doc: Any, members: set[tuple[str, str]]) -> None:
    """Give the named schemas used as allOf members back the openness they had in `doc`."""
    original = _component_schemas(doc)
    for name, schema in _component_schemas(closed).items():
        if (uri, name) in members and isinstance(schema, dict):
            for key in ("unevaluatedProperties", "additionalProperties", "propertyNames"):
                if key not in original.get(name, {}):
                    schema.pop(key, None)


def _component_schemas(doc: Any) -> dict[str, Any]:
    schemas: dict[str, Any] = (
        ((doc.get("components") or {}).get("schemas") or {}) if isinstance(doc, dict) else {}
    )
    return schemas


def _keys(node: Any, uri: str, raw: Mapping[str, Any], depth: int = 0) -> set[str] | None:
    """The property names a schema describes, through $ref and allOf; None when it admits
    others (an open object, alternatives, patterns) or describes nothing."""
    if not isinstance(node, dict) or depth > 32:
        return None
    if (
        any(
            k in node
            for k in (
                "anyOf",
                "oneOf",
                "patternProperties",
                "propertyNames",
                "unevaluatedProperties",
            )
        )
        or node.get("additionalProperties", False) is not False
    ):
        return None
    keys = set(node.get("properties") or {})
    described = "properties" in node
    if isinstance(node.get("$ref"), str):
        target = _join(uri, node["$ref"])
        file_part, _, pointer = target.partition("#")
        resolved: Any = raw.get(file_part)
        for piece in [p for p in pointer.split("/") if p]:
            resolved = (
                resolved.get(piece.replace("~1", "/").replace("~0", "~"))
                if isinstance(resolved, dict)
                else None
            )
        sub = _keys(resolved, file_part, raw, depth + 1)
        if sub is None:
            return None
        keys |= sub
        described = True
    for member in node.get("allOf") or []:
        sub = _keys(member, uri, raw, depth + 1)
        if sub is None:
            return None
        keys |= sub
        described = True
    return keys if described else None


def _all_of_members(uri: str, doc: Any) -> Iterator[tuple[str, str]]:
    """(file URI, name) of each component schema a `$ref` in some allOf of two or more
    members points at."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            # A one-member allOf is an alias: its member has no siblings to supply keys.
            if key == "allOf" and isinstance(value, list) and len(value) > 1:
                for member in value:
                    ref = member.get("$ref") if isinstance(member, dict) else None
                    if isinstance(ref, str) and "#/components/schemas/" in ref:
                        target = _join(uri, ref)
                        file_part, _, fragment = target.partition("#")
                        yield file_part, fragment.rsplit("/", 1)[-1]
            yield from _all_of_members(uri, value)
    elif isinstance(doc, list):
        for value in doc:
            yield from _all_of_members(uri, value)
