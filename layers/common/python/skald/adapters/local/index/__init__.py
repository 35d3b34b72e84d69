"""The embedded SearchIndex: records in SQLite, filtering and ranking in memory.

- searchindex.py: LocalSearchIndex: the adapter (lifecycle, locking, writes, reads)
- store.py: the SQLite schema and the record <-> row codec (the source of truth)
- columns.py: the in-memory columns every filter and ranking reads
- load.py: the columns loaded at open, from a sidecar generation when there is one
- sidecar.py, snapshot.py: a generation: the vectors' sidecar and the other columns
- quant.py: the vector column: exact float32, or 8-bit codes re-scored exactly (faiss)
- row_file.py: float32 rows read from a file, for that re-scoring
- filters.py: IndexFilter as boolean row masks
- ranking.py: dense, BM25 and hybrid ranking over the columns
- bm25.py: the FTS5-compatible tokenizer and in-memory postings
- rwlock.py: the readers-writer lock of searches and writes
"""

__all__ = [
    "bm25",
    "columns",
    "filters",
    "load",
    "quant",
    "ranking",
    "row_file",
    "rwlock",
    "searchindex",
    "sidecar",
    "snapshot",
    "store",
]
