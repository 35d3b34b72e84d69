"""The embedded backend of `skald serve`: everything in one data directory.

- blobs/: BlobStore on a directory (blobs/), the RecallLedger beside each session
- sqlite/: the state, session, audit and job queue stores on SQLite (state.db, queue.db)
- index/: the embedded SearchIndex (index.db, numpy / faiss, in-memory BM25)
- factory.py: LocalAdapterFactory: one builder per port, and setup()
- workers.py: JobWorkerPool: threads draining the job queue with the job handlers
- metrics.py: PrometheusMetrics, served at /metrics
- durable.py: fsync of files and directories, for the blob store and the index
"""

__all__ = ["blobs", "durable", "factory", "index", "metrics", "sqlite", "workers"]
