"""Remote sources: a URL given to add_resource is fetched by the fetch worker, never in the
request. The request reserves the root (so its answer names it) and queues a fetch job under
the task it returns; the worker fetches everything first, under the limits, then writes the
files and queues their processing under the same task, which that processing completes. A
failed fetch ends the task failed with the cause and removes what the request reserved.

A re-fetch (a watch) writes only the files whose bytes changed, removes those the source no
longer has, and leaves the rest (and their vectors) alone.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlsplit

from skald import catalog
from skald.domain.access.identity import Identity
from skald.domain.errors import InvalidArgument, SkaldError
from skald.domain.paths.names import is_managed_name
from skald.domain.paths.uri import VikingURI, addressable_name, from_canonical
from skald.domain.sources.crawl import (
    HTML_TYPES,
    MAX_DEPTH,
    MAX_PAGES,
    in_scope,
    page_links,
    relative_path,
)
from skald.domain.sources.netguard import FetchFailed, FetchLimits
from skald.domain.sources.remote import RemoteSource, check_subpath, parse_source
from skald.domain.sources.repofiles import select_files
from skald.ports import FetchedPage, JobQueue, RemoteFetcher
from skald.services.fs.entries import FsChange
from skald.services.fs.filesystem import VikingFS
from skald.services.fs.write_batch import held_writes
from skald.services.ingest.processing import ProcessingScheduler, identity_from_payload
from skald.services.ingest.resources import AddResourceRequest, ResourceService
from skald.services.tasks import TaskService

log = logging.getLogger("skald")

# What a page's media type is stored as (the parsers take it from there); text of other
# kinds is kept as plain text.
PAGE_TYPES = {
    "text/html": ".html",
    "application/xhtml+xml": ".html",
    "text/markdown": ".md",
    "text/x-markdown": ".md",
    "text/plain": ".txt",
    "text/csv": ".csv",
    "application/json": ".json",
    "application/pdf": ".pdf",
    "application/epub+zip": ".epub",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": ".docx",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": ".pptx",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": ".xlsx",
    "image/png": ".png",
    "image/jpeg": ".jpg",
    "image/gif": ".gif",
    "image/webp": ".webp",
}


@dataclass
class FetchJob:
    """The payload of a fetch job (and of a watch's re-fetch)."""

    task_id: str
    account: str
    user: str
    role: str
    source: str  # what the client gave
    root: str  # the reserved root URI
    created: list[str] = field(default_factory=list)  # dirs the request made (undone on failure)
    include: str | None = None
    exclude: str | None = None
    ignore_dirs: str | None = None
    tags: list[str] | None = None
    tag_mode: str = "replace"
    processing_mode: str = "semantic_and_vectors"
    refresh: bool = False  # a watch's re-fetch: keep what is there when it fails

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> FetchJob:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in payload.items() if k in names})


def page_file_name(src: RemoteSource, url: str, content_type: str) -> str:
    ext = PAGE_TYPES.get(content_type)
    if ext is None:
        suffix = PurePosixPath(urlsplit(url).path).suffix.lower()
        if content_type.startswith("text/"):
            ext = suffix if suffix in {".md", ".txt", ".rst", ".py", ".js", ".ts"} else ".txt"
        elif suffix and len(suffix) <= 8 and suffix[1:].isalnum():
            ext = suffix
        else:
            raise FetchFailed(
                "invalid",
                f"{url} answered {content_type or 'no content type'}, "
                "which is not a page or document format",
            )
    return addressable_name(src.name + ext)


def linked_file_name(rel: str, content_type: str) -> str:
    """A linked page's path below the root, its extension from its media type ('' when it
    is no page or document format)."""
    if not rel:
        return ""
    ext = PAGE_TYPES.get(content_type)
    suffix = PurePosixPath(rel).suffix.lower()
    if ext is None:
        if not content_type.startswith("text/"):
            return ""
        ext = suffix if suffix in {".md", ".txt", ".rst"} else ".txt"
    if suffix != ext and not (ext == ".html" and suffix == ".htm"):
        rel += ext
    try:
        parts = [addressable_name(part) for part in rel.split("/")]
    except InvalidArgument:
        return ""
    # Skald's own names (sidecars, hidden state) and names too long to store are left out.
    if any(is_managed_name(p) or len(p.encode()) > 200 for p in parts):
        return ""
    return "/".join(parts)


class RemoteSources:
    def __init__(
        self,
        fs: VikingFS,
        resources: ResourceService,
        tasks: TaskService,
        queue: JobQueue,
        scheduler: ProcessingScheduler,
        fetcher: Callable[[], RemoteFetcher],
        limits: FetchLimits,
    ) -> None:
        self.fs = fs
        self.resources = resources
        self.tasks = tasks
        self.queue = queue
        self.scheduler = scheduler
        self._fetcher = fetcher
        self.limits = limits

    # ---------------------------------------------------------------- the request

    def submit(
        self,
        identity: Identity,
        req: AddResourceRequest,
        *,
        processing_mode: str,
        task_type: str = "add_resource",
    ) -> tuple[str, VikingURI, str]:
        """Reserves the root and queues the fetch: (task id, root, source)."""
        assert req.path is not None
        src = parse_source(req.path)
        check_subpath(src.subpath)
        base = (src.owner,) if src.owner and not req.parent else ()
        root, change = self.resources.reserve_root(identity, req, src.name, base)
        task = self.tasks.create(
            identity,
            task_type,
            resource_id=str(root),
            meta={"source": req.path, "processing_mode": processing_mode},
        )
        job = FetchJob(
            task.task_id,
            identity.account_id,
            identity.user_id,
            identity.role,
            req.path,
            str(root),
            created=list(change.dirs),
            include=req.include,
            exclude=req.exclude,
            ignore_dirs=req.ignore_dirs,
            tags=req.tags,
            tag_mode=req.tag_mode,
            processing_mode=processing_mode,
        )
        try:
            self.queue.enqueue(catalog.QUEUE_FETCH, catalog.JOB_FETCH, job.__dict__)
        except Exception:
            self._undo(identity, job)
            self.tasks.abandon(task.task_id, "The fetch could not be queued")
            raise
        return task.task_id, root, req.path

    def refetch(
        self,
        identity: Identity,
        source: str,
        root: VikingURI,
        options: dict[str, Any],
        task_type: str = "watch_refresh",
    ) -> str:
        """Queues a re-fetch of `source` into its existing root (a watch)."""
        task = self.tasks.create(
            identity, task_type, resource_id=str(root), meta={"source": source}, internal=True
        )
        job = FetchJob(
            task.task_id,
            identity.account_id,
            identity.user_id,
            identity.role,
            source,
            str(root),
            refresh=True,
            **{
                k: v
                for k, v in options.items()
                if k in ("include", "exclude", "ignore_dirs", "processing_mode")
            },
        )
        self.queue.enqueue(catalog.QUEUE_FETCH, catalog.JOB_FETCH, job.__dict__)
        return task.task_id

    # ---------------------------------------------------------------- the worker

    def run(self, payload: dict[str, Any]) -> None:
        job = FetchJob.from_payload(payload)
        identity = identity_from_payload(payload)
        if not self.tasks.start(job.task_id, "fetching"):
            self._undo(identity, job)  # cancelled before it started
            return
        try:
            files = self._fetch(job)
            self.tasks.stage(job.task_id, "storing")
            change = self._store(identity, job, files)
        except SkaldError as exc:
            # A fetch that failed for a stated cause fails the same way again: no retry.
            self._undo(identity, job)
            self.tasks.fail(job.task_id, exc.message)
            return
        except Exception:
            self._undo(identity, job)
            raise  # retried; the dead handler fails the task
        self.scheduler.follow(identity, job.task_id, change)

    def on_dead(self, payload: dict[str, Any], error: str) -> None:
        job = FetchJob.from_payload(payload)
        self._undo(identity_from_payload(payload), job)
        self.tasks.abandon(job.task_id, error)

    def _fetch(self, job: FetchJob) -> list[tuple[str, bytes]]:
        src = parse_source(job.source)
        fetcher = self._fetcher()
        if src.kind == "page":
            return self._site(fetcher, src)
        files = fetcher.clone(src.url, src.ref, self.limits)
        chosen = select_files(
            files,
            subpath=check_subpath(src.subpath),
            include=job.include,
            exclude=job.exclude,
            ignore_dirs=job.ignore_dirs,
        )
        kept = [
            (p, d)
            for p, d in chosen.files
            if not any(is_managed_name(part) for part in p.split("/"))
        ]
        if not kept:
            where = f" below '{src.subpath}'" if src.subpath else ""
            raise InvalidArgument(f"The repository has no files to add{where}")
        return kept

    def _site(self, fetcher: RemoteFetcher, src: RemoteSource) -> list[tuple[str, bytes]]:
        """The page, then (an HTML page) the pages it links to below its folder, breadth
        first (skald.domain.sources.crawl). A linked page that fails is left out; the caps on files,
        bytes and time end the crawl with what it has."""
        start = fetcher.get(src.url, self.limits)
        files = [(page_file_name(src, start.url, start.content_type), start.data)]
        names, seen = {files[0][0]}, {src.url, start.url}
        size, deadline = len(start.data), time.monotonic() + self.limits.timeout_s
        frontier: deque[tuple[FetchedPage, int]] = deque([(start, 0)])
        cap = min(MAX_PAGES, self.limits.max_files)
        while frontier:
            page, depth = frontier.popleft()
            if depth >= MAX_DEPTH or page.content_type not in HTML_TYPES:
                continue
            for url in page_links(page.data.decode("utf-8", "replace"), page.url):
                if len(files) >= cap or time.monotonic() > deadline:
                    return files
                if url in seen or not in_scope(url, start.url):
                    continue
                seen.add(url)
                try:
                    linked = fetcher.get(url, self.limits)
                except FetchFailed as exc:
                    log.info("left out %s: %s", url, exc.message)
                    continue
                name = linked_file_name(relative_path(linked.url, start.url), linked.content_type)
                if not in_scope(linked.url, start.url) or not name or name in names:
                    continue
                if size + len(linked.data) > self.limits.max_bytes:
                    return files
                size += len(linked.data)
                names.add(name)
                files.append((name, linked.data))
                frontier.append((linked, depth + 1))
        return files

    def _store(self, identity: Identity, job: FetchJob, files: list[tuple[str, bytes]]) -> FsChange:
        root = from_canonical(job.root)
        for rel, data in files:
            self.fs.check_writable_name(root.child(rel))
            self.fs.check_size(len(data))
        change = FsChange(
            identity.account_id,
            identity.user_id,
            processing_mode=job.processing_mode,
            dirs=list(job.created),
        )
        wanted = {str(root.child(rel)) for rel, _ in files}
        with held_writes(self.fs.blobs) as held:  # written in groups, durable at the end
            for rel, data in files:
                uri = root.child(rel)
                if job.refresh and self._same(identity, uri, data):
                    continue  # unchanged: its records and vectors stay
                _, written = self.fs.write(
                    identity, uri, data, "replace", tags=job.tags, tag_mode=job.tag_mode, held=held
                )
                change.dirs.extend(written.dirs)
                change.written.extend(written.written)
        if job.refresh:
            for entry in list(self.fs.iter_files(identity, root)):
                if str(entry.uri) not in wanted:
                    _, gone = self.fs.rm(identity, entry.uri, False)
                    change.removed.extend(gone.removed)
        return change

    def _same(self, identity: Identity, uri: VikingURI, data: bytes) -> bool:
        if self.fs.file_info(identity, uri) is None:
            return False
        old = self.fs.read_bytes(identity, uri)
        return hashlib.sha256(old).digest() == hashlib.sha256(data).digest()

    def _undo(self, identity: Identity, job: FetchJob) -> None:
        """Removes what the request reserved (deepest first), nothing a re-fetch found."""
        if job.refresh:
            return
        for uri_text in sorted(set(job.created), key=len, reverse=True):
            uri = from_canonical(uri_text)
            try:
                if self.fs.is_dir(identity, uri):
                    self.fs.rm(identity, uri, True)
            except SkaldError:
                log.warning("could not remove %s after a failed fetch", uri_text)
