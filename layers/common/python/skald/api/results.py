"""The `result` of the routes whose services still answer dicts, as the OpenAPI document
describes it (docs/api.md, "What Skald serves"). Typed results (dataclasses next to their
use case, e.g. skald.services.retrieval.results) are their own documentation and are checked
as they are serialised (skald.api.envelope); a route moves off this module when its service
returns one."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from skald.api.openapi import Ok, VikingUri, Wire

# ------------------------------------------------------------------------ filesystem


class Entry(Wire):
    """An ls / tree entry; `output=original` adds name and mode, options add the others."""

    uri: VikingUri
    size: int
    isDir: bool  # noqa: N815 - wire name
    modTime: str  # noqa: N815
    name: str | None = None
    mode: int | None = None
    abstract: str | None = None
    overview: str | None = None
    rel_path: str | None = None
    tags: list[str] | None = None
    locked: bool | None = None
    count: int | None = None
    id: str | None = None


class Listing(Ok[list[Entry] | list[VikingUri]]):
    """ls and tree: entries (URIs only with `simple=true`) and whether more remain."""

    has_more: bool


class Stat(Wire):
    name: str
    size: int
    mode: int
    modTime: str  # noqa: N815
    isDir: bool  # noqa: N815
    uri: VikingUri
    isLocked: bool  # noqa: N815
    id: str | None = None
    count: int | None = None


class Attrs(Wire):
    uri: VikingUri
    context_type: str
    attrs: dict[str, Any]


class UriResult(Wire):
    uri: VikingUri


class Moved(Wire):
    from_: VikingUri = Field(alias="from")
    to: VikingUri
    task_id: str | None = None


class Copied(Moved):
    recursive: bool
    copied: int


class Removed(Wire):
    uri: VikingUri
    estimated_deleted_count: int
    memory_cleanup: dict[str, Any]
    semantic_root_uri: VikingUri
    semantic_status: str
    task_id: str | None = None


class Tagged(Wire):
    uri: VikingUri
    tags: list[str]
    updated: int


# ------------------------------------------------------------------------ content


class Written(Wire):
    uri: VikingUri
    root_uri: VikingUri
    context_type: str
    mode: str
    written_bytes: int
    created: bool
    content_updated: bool
    sha256: str
    semantic_status: str
    vector_status: str
    task_id: str | None = None


class BatchItem(Wire):
    uri: VikingUri
    status: str
    written_bytes: int | None = None
    sha256: str | None = None
    reason: str | None = None


class BatchWritten(Wire):
    root_uri: VikingUri
    results: list[BatchItem]
    written: int
    skipped: int
    task_id: str | None
    semantic_status: str


class Reindexed(Wire):
    uri: VikingUri
    mode: str
    task_id: str | None = None
    status: str


# ------------------------------------------------------------------------ resources, tasks


class TempUpload(Wire):
    temp_file_id: str


class Added(Wire):
    status: str
    task_id: str | None = None
    source_path: str
    root_uri: VikingUri




# ------------------------------------------------------------------------ system, admin


class Health(Wire):
    status: str
    healthy: bool
    version: str
    # absent behind the API gateway: the public probe says nothing about auth there
    auth_mode: str | None = None


class Ready(Wire):
    status: str
    checks: dict[str, str]


class Deleted(Wire):
    account_id: str
    deleted: bool
