"""The results of the content verbs (write, batch write, mkdir, mv, cp, rm, tags, reindex,
add_resource, temp uploads, pack import and restore), as the HTTP edge serialises them
(docs/api.md). A None marked OMIT_NONE is a key the wire leaves out."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any

from skald.domain.wire import BY_WIRE_NAME, OMIT_NONE, WireUri, wire_name
from skald.ports import TaskStatus
from skald.services.ingest.processing import QueueStatus


class ProcessingStatus(StrEnum):
    """Where a change's semantic processing is when the answer leaves: queued (not waited
    for), complete, a task status (waited for, not completed), or not run at all."""

    QUEUED = "queued"
    COMPLETE = "complete"
    PENDING = "pending"
    RUNNING = "running"
    CANCELLING = "cancelling"
    FAILED = "failed"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"  # vectors only: no summaries
    DEFERRED = "deferred"  # batch write with defer_processing
    NONE = "none"  # nothing was written

    @classmethod
    def of_task(cls, status: TaskStatus) -> ProcessingStatus:
        return cls.COMPLETE if status == TaskStatus.COMPLETED else cls(status)


class ItemStatus(StrEnum):
    WRITTEN = "written"
    SKIPPED = "skipped"


class AddStatus(StrEnum):
    SUCCESS = "success"
    ERROR = "error"  # a remote source whose fetch failed (waited for)


@dataclass(frozen=True, slots=True)
class UriResult:
    uri: WireUri


@dataclass(frozen=True, slots=True)
class TempUpload:
    temp_file_id: str


@dataclass(frozen=True, slots=True)
class Moved:
    __pydantic_config__ = BY_WIRE_NAME

    from_: Annotated[WireUri, wire_name("from")]
    to: WireUri
    task_id: str


@dataclass(frozen=True, slots=True)
class Copied:
    __pydantic_config__ = BY_WIRE_NAME

    from_: Annotated[WireUri, wire_name("from")]
    to: WireUri
    recursive: bool
    copied: int
    task_id: str


@dataclass(frozen=True, slots=True)
class MemoryCleanup:
    """The index records removed before the answer, or the processing status when the job
    removes them."""

    removed_records: int | ProcessingStatus


@dataclass(frozen=True, slots=True)
class Removed:
    uri: WireUri
    estimated_deleted_count: int
    memory_cleanup: MemoryCleanup
    semantic_root_uri: WireUri
    semantic_status: ProcessingStatus
    task_id: str


@dataclass(frozen=True, slots=True)
class Tagged:
    uri: WireUri
    tags: list[str]
    updated: int


@dataclass(frozen=True, slots=True)
class Written:
    uri: WireUri
    root_uri: WireUri
    context_type: str
    mode: str
    written_bytes: int
    created: bool
    content_updated: bool
    sha256: str
    semantic_status: ProcessingStatus
    vector_status: ProcessingStatus
    task_id: str


@dataclass(slots=True)
class BatchItem:
    """A written operation has its size and hash, a skipped one the reason."""

    uri: WireUri
    status: ItemStatus
    written_bytes: Annotated[int | None, OMIT_NONE] = None
    sha256: Annotated[str | None, OMIT_NONE] = None
    reason: Annotated[str | None, OMIT_NONE] = None


@dataclass(frozen=True, slots=True)
class BatchWritten:
    root_uri: WireUri
    results: list[BatchItem]
    written: int
    skipped: int
    task_id: str | None
    semantic_status: ProcessingStatus


@dataclass(frozen=True, slots=True)
class Reindexed:
    uri: WireUri
    files: int
    directories: int
    mode: str
    task_id: str
    status: ProcessingStatus


@dataclass(slots=True)
class Added:
    """add_resource's answer; with `wait`, the outcome too (`meta.not_indexed`: the files
    stored without text, with the reason; `queue_status`: the queues' counters)."""

    status: AddStatus
    task_id: str
    source_path: str
    root_uri: WireUri
    watch_task_id: Annotated[str | None, OMIT_NONE] = None
    errors: Annotated[list[str] | None, OMIT_NONE] = None
    meta: Annotated[dict[str, Any] | None, OMIT_NONE] = None
    context_count: Annotated[int | None, OMIT_NONE] = None
    semantic_status: Annotated[ProcessingStatus | None, OMIT_NONE] = None
    queue_status: Annotated[QueueStatus | None, OMIT_NONE] = None
