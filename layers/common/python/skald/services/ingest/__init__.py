"""What goes into the tree and the index, and the processing that follows it.

- content.py: ContentService: every mutation of the tree (write, mkdir, rm, mv, tags, add
  resource, reindex), followed by its semantic processing
- resources.py: ResourceService: temp uploads, a file or a zipped directory under a target
- archives.py: ArchiveReader: a zip's members and their bytes under the archive limits
- imports.py: ArchiveImports: a zipped directory too large for a request, written by the
  fetch worker from a checkpoint
- fetch.py: RemoteSources: URLs and repositories fetched by the fetch worker
- watches.py: WatchService: remote sources fetched again on an interval
- packs.py: PackService: .ovpack export and import, backup and restore
- processing.py: ProcessingScheduler: semantic processing queued as jobs under tasks
- forgetting.py: Forgetting: a removal's index records go before the removal answers
- semantic.py: SemanticService: a job's changes applied, directory summaries refreshed
- semantic_files.py: a file's text described, cut into sections, embedded and indexed
- directory_summaries.py: a directory's L0/L1 rewritten from its children, and indexed
- read_ahead.py: a worker's next inputs read ahead and its output written behind
"""

__all__ = [
    "archives",
    "content",
    "directory_summaries",
    "fetch",
    "forgetting",
    "imports",
    "packs",
    "processing",
    "read_ahead",
    "resources",
    "semantic",
    "semantic_files",
    "watches",
]
