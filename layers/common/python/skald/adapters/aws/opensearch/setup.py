"""Deploy-time setup of the OpenSearch records index: a versioned index behind an alias.

The app reads and writes through the alias (`skald-records`); the index behind it is named
after its mapping: `<alias>-v<8 hex>`, a hash of the settings and mappings. So the name says
which mapping an index has, and a changed mapping can never be used silently:

- alias -> the index of today's mapping: nothing to do (no write is sent);
- nothing there: the versioned index is created and the alias added;
- alias -> an index of another mapping, or a plain index named like the alias (before
  aliases were used): the new index is created, the records are copied into it (`_reindex`
  on a domain; search + bulk on OpenSearch Serverless, whose documents have server-made ids),
  then one `_aliases` request moves the alias (and drops a plain index of that name), so
  readers see the old index or the new one, never a mix. The previous versioned index is
  kept: delete it once satisfied.
- vectors of another size (the embedding model changed) cannot be copied: the new index
  starts empty, and the report says to rebuild it from the blobs (`content/reindex`).

Records written through the alias while a copy runs stay in the previous index: a mapping
change is a deploy step, run it when writes are quiet (or reindex afterwards).

Needs (IAM on a domain): es:ESHttpHead/Get (alias, mapping), Put (index, pipeline), Post
(_reindex, _aliases, _search, _bulk), Delete (a half-built index left by an interrupted run).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from typing import Any

from opensearchpy.exceptions import (
    AuthorizationException,
    ConnectionError,
    NotFoundError,
    TransportError,
)

from skald.adapters.aws.opensearch.index import hybrid_pipeline_body, index_template_body
from skald.adapters.factory import SetupError

COPY_PAGE = 500
REINDEX_TIMEOUT_S = 840.0  # inside the setup function's 15 minutes


class IndexSetupError(SetupError):
    pass


@dataclass(frozen=True)
class IndexSetup:
    alias: str
    index: str
    action: str  # unchanged | created | migrated
    previous: tuple[str, ...] = ()
    copied: int = 0
    note: str = ""

    def describe(self) -> str:
        text = f"search index {self.alias} -> {self.index}: {self.action}"
        if self.action == "migrated":
            text += f" from {', '.join(self.previous)} ({self.copied} records copied)"
        return f"{text}; {self.note}" if self.note else text


def mapping_version(body: dict[str, Any]) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:8]


def versioned_name(alias: str, body: dict[str, Any]) -> str:
    return f"{alias}-v{mapping_version(body)}"


def ensure_search_index(
    client: Any,
    alias: str,
    *,
    dimension: int,
    serverless: bool = False,
    pipeline: str | None = None,
    technique: str = "rrf",
    ready_timeout_s: float = 0.0,
) -> list[str]:
    """Makes `alias` point at the index of today's mapping (see the module doc); with
    `pipeline`, creates or updates that hybrid search pipeline. Returns the report lines."""
    body = index_template_body(dimension=dimension)
    target = versioned_name(alias, body)
    current = _wait_for(lambda: _alias_targets(client, alias), ready_timeout_s)
    if current == [target]:
        result = IndexSetup(alias, target, "unchanged")
    else:
        result = _build(client, alias, target, body, current, dimension, serverless)
    lines = [result.describe()]
    if pipeline is not None:
        lines.append(_ensure_pipeline(client, pipeline, hybrid_pipeline_body(technique)))
    return lines


def _build(
    client: Any,
    alias: str,
    target: str,
    body: dict[str, Any],
    current: list[str],
    dimension: int,
    serverless: bool,
) -> IndexSetup:
    plain = not current and bool(client.indices.exists(index=alias))
    sources = current or ([alias] if plain else [])
    if client.indices.exists(index=target):
        # Not behind the alias: a previous run stopped half-way. Start it again cleanly.
        client.indices.delete(index=target)
    client.indices.create(index=target, body=body)
    copied, notes = 0, []
    for source in sources:
        found = _dimension(client, source)
        if found is not None and found != dimension:
            notes.append(
                f"{source} holds {found}-d vectors, the new mapping {dimension}-d: "
                "records not copied; rebuild them from the blobs "
                "(POST /api/v1/content/reindex per scope)"
            )
            continue
        copied += (
            _scan_copy(client, source, target) if serverless else _reindex(client, source, target)
        )
    actions: list[dict[str, Any]] = (
        [{"remove_index": {"index": alias}}]
        if plain
        else [{"remove": {"index": name, "alias": alias}} for name in current]
    )
    client.indices.update_aliases(
        body={"actions": [*actions, {"add": {"index": target, "alias": alias}}]}
    )
    if not sources:
        return IndexSetup(alias, target, "created")
    kept = [] if plain else [f"previous index kept: {', '.join(current)}"]
    return IndexSetup(alias, target, "migrated", tuple(sources), copied, "; ".join([*notes, *kept]))


def _alias_targets(client: Any, alias: str) -> list[str]:
    try:
        found = client.indices.get_alias(name=alias)
    except NotFoundError:
        return []
    return sorted(found)


def _dimension(client: Any, index: str) -> int | None:
    for body in client.indices.get_mapping(index=index).values():
        dim = body.get("mappings", {}).get("properties", {}).get("vector", {}).get("dimension")
        if dim is not None:
            return int(dim)
    return None


def _reindex(client: Any, source: str, target: str) -> int:
    try:
        resp = client.reindex(
            body={"source": {"index": source}, "dest": {"index": target}},
            refresh=True,
            wait_for_completion=True,
            params={"request_timeout": REINDEX_TIMEOUT_S},
        )
    except TransportError as exc:  # a document the new mapping refuses fails the request
        resp = exc.info if isinstance(exc.info, dict) else {"failures": [str(exc)]}
    failures = resp.get("failures") or []
    if failures or resp.get("timed_out"):
        first = failures[0] if failures else "timed out"
        raise IndexSetupError(
            f"copying {source} into {target} failed ({len(failures)} "
            f"failures, first: {first}); the alias was not moved"
        )
    return int(resp.get("created", 0)) + int(resp.get("updated", 0))


def _scan_copy(client: Any, source: str, target: str) -> int:
    """Search + bulk in record_id order; no custom _id (serverless makes its own)."""
    search: dict[str, Any] = {
        "size": COPY_PAGE,
        "query": {"match_all": {}},
        "sort": [{"record_id": {"order": "asc"}}, {"written_at": {"order": "asc"}}],
    }
    copied = 0
    while True:
        hits = client.search(index=source, body=search)["hits"]["hits"]
        if not hits:
            return copied
        lines = []
        for hit in hits:
            lines += [json.dumps({"index": {"_index": target}}), json.dumps(hit["_source"])]
        resp = client.bulk(body="\n".join(lines) + "\n")
        errors = [
            item
            for item in resp.get("items", [])
            if next(iter(item.values())).get("error") is not None
        ]
        if errors:
            raise IndexSetupError(
                f"copying {source} into {target} failed ({len(errors)} "
                f"bulk errors, first: {errors[0]}); the alias was not moved"
            )
        copied += len(hits)
        if len(hits) < COPY_PAGE:
            return copied
        search["search_after"] = hits[-1]["sort"]


def _ensure_pipeline(client: Any, name: str, body: dict[str, Any]) -> str:
    try:
        found = client.search_pipeline.get(id=name)
    except NotFoundError:
        found = {}
    if found.get(name) == body:
        return f"search pipeline {name}: unchanged"
    client.search_pipeline.put(id=name, body=body)
    return f"search pipeline {name}: {'updated' if found else 'created'}"


def _wait_for(probe: Any, timeout_s: float) -> Any:
    """The first probe that answers; a fresh domain (or a data access policy still
    propagating) refuses connections or answers 403/5xx for a while after deploy."""
    deadline = time.monotonic() + timeout_s
    delay = 2.0
    while True:
        try:
            return probe()
        except (ConnectionError, AuthorizationException, TransportError) as exc:
            retriable = isinstance(exc, ConnectionError | AuthorizationException) or (
                isinstance(exc.status_code, int) and exc.status_code >= 500
            )
            if not retriable or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 30.0)
