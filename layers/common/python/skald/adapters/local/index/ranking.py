"""Ranking in the embedded index, read-only over a Columns snapshot: exact dense search
(one matrix-vector product), BM25 over the in-memory postings, and hybrid fusion.

The score rules (cosine, bm25 / (bm25 + 1), normalised RRF over `hybrid_depth` candidates per
side, ties by (uri, level, section)) are the domain's, shared with the OpenSearch adapter.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

import numpy as np
from threadpoolctl import threadpool_limits

from skald.adapters.local.index import bm25
from skald.adapters.local.index.columns import Columns, F32Array, FloatArray, IntArray, Mask
from skald.adapters.local.index.quant import (
    CompactVectors,
    DenseVectors,
    scan_pool,
    scan_workers,
)
from skald.domain.retrieval.fusion import fused_top, hybrid_depth, rrf_fuse
from skald.domain.retrieval.scores import lexical_score
from skald.ports import IndexQuery

Ranked = list[tuple[int, float, float | None, float | None]]  # row, score, dense, lexical

# Level of files (and memories, skills); 0 and 1 are directory summaries (sidecars).
FILE_LEVEL = 2
# A float32 scan is cut into parts of at least this many rows, one per core: with the matrix
# out of cache (as after the query's embedding) a split scan of a few thousand rows or more
# gains, while below this the hand-off to another core costs more than it saves. A find
# through HTTP gains at large indexes and neither gains nor loses where the matrix stays in
# cache (bench/find_ab_http.py measures it).
SPLIT_PART_ROWS = 2_048


def rank(
    cols: Columns,
    mask: Mask,
    base: Mask,
    query: IndexQuery,
    qvec: F32Array | None,
    terms: list[str],
    prefetch: Callable[[list[int]], None],
    await_vector: Callable[[], F32Array],
) -> Ranked:
    """The best `query.limit` rows of `mask` for `query`. In hybrid mode `qvec` may still be
    None (the query is being embedded): `await_vector` gets it once the keyword side is done,
    and `prefetch` reads that side's best rows meanwhile."""
    limit = query.limit
    if query.mode == "recent":
        times = cols.updated if query.filter.time_field == "updated_at" else cols.created
        rows, _ = top(cols, np.flatnonzero(mask), times[: cols.n][mask].astype(np.float64), limit)
        return [(r, 0.0, None, None) for r in rows]
    if query.mode == "dense":
        assert qvec is not None
        rows, scores = dense_top(cols, mask, qvec, limit)
        return [(r, s, s, None) for r, s in zip(rows, scores, strict=True)]
    if query.mode == "lexical":
        rows, scores = lexical_top(cols, mask, base, terms, limit)
        return [(r, s, None, s) for r, s in zip(rows, scores, strict=True)]
    # Hybrid: reciprocal rank fusion of both rankings, each over every record passing
    # the filter, down to the candidate depth. The keyword side first: a query vector
    # still being embedded is awaited only now.
    depth = hybrid_depth(limit)
    l_rows, l_scores = lexical_top(cols, mask, base, terms, depth)
    if qvec is None:
        # The model is still running: read the keyword side's best rows meanwhile, most
        # of which the fused top keeps.
        prefetch(l_rows[:limit])
        qvec = await_vector()
    d_rows, d_scores = dense_top(cols, mask, qvec, depth)
    levels = cols.level
    fused = rrf_fuse(d_rows, l_rows, is_summary=lambda r: bool(levels[r] < FILE_LEVEL))
    if not fused:
        return []
    candidates = list(fused)
    keys = dict(zip(candidates, cols.order_keys(candidates), strict=True))
    best = fused_top(fused, keys.__getitem__, limit)
    dense_known = dict(zip(d_rows, d_scores, strict=True))
    lexical_known = dict(zip(l_rows, l_scores, strict=True))
    # The fused order is by rank alone: only the rows kept need their dense score, and those
    # the dense side did not rank are scored here (each a read of the float32 sidecar when
    # the column is compact).
    missing = [r for r, _ in best if r not in dense_known and bool(cols.has_vec[r])]
    if missing:
        sims = np.clip(matvec(cols.vectors.exact(missing), qvec), -1.0, 1.0)
        dense_known.update(zip(missing, sims.tolist(), strict=True))
    return [(r, score, dense_known.get(r), lexical_known.get(r)) for r, score in best]


def top(cols: Columns, rows: IntArray, scores: FloatArray, k: int) -> tuple[list[int], list[float]]:
    """Best k of (rows, scores), ties broken by (uri, level, section)."""
    if k <= 0 or rows.size == 0:
        return [], []
    if rows.size > k:
        part = np.argpartition(-scores, k - 1)[:k]
        kth = scores[part].min()
        # Rows tied with the k-th compete on (uri, level, section), so the cut is
        # deterministic; nsmallest keeps that cheap even when thousands tie.
        above = np.flatnonzero(scores > kth)
        tied = np.flatnonzero(scores == kth)
        need = k - above.size
        if tied.size > need:
            keys = cols.order_keys(rows[tied])
            best = heapq.nsmallest(need, range(tied.size), key=keys.__getitem__)
            tied = tied[best]
        sel = np.concatenate([above, tied])
        rows, scores = rows[sel], scores[sel]
    row_list, score_list = rows.tolist(), scores.tolist()
    keys = cols.order_keys(row_list)
    order = sorted(range(len(row_list)), key=lambda i: (-score_list[i], keys[i]))[:k]
    return [row_list[i] for i in order], [score_list[i] for i in order]


def dense_top(cols: Columns, mask: Mask, qvec: F32Array, k: int) -> tuple[list[int], list[float]]:
    n = cols.n
    vectors = cols.vectors
    if vectors.compact:
        assert isinstance(vectors, CompactVectors)
        # The exact top k among re-scored candidates (quant.py): ranked as below.
        rows, exact = vectors.top(mask & cols.has_vec[:n], qvec, k)
        return top(cols, rows, np.clip(exact.astype(np.float64), -1.0, 1.0), k)
    assert isinstance(vectors, DenseVectors)
    idx = np.flatnonzero(mask & cols.has_vec[:n])
    if idx.size == 0:
        return [], []
    # Gathering rows copies them: only worth it when the filter keeps few of them.
    mat = vectors.mat
    sims = matvec(mat[idx], qvec) if idx.size * 3 < n else matvec(mat[:n], qvec)[idx]
    return top(cols, idx, np.clip(sims.astype(np.float64), -1.0, 1.0), k)


def lexical_top(
    cols: Columns, mask: Mask, base: Mask, terms: list[str], k: int
) -> tuple[list[int], list[float]]:
    if not terms:
        return [], []
    raw = bm25.bm25_scores(
        cols.lex, terms, cols.doclen[: cols.n], bm25_stats_mask(cols, base), mask
    )
    idx = np.flatnonzero(raw > 0.0)
    return top(cols, idx, lexical_score(raw[idx]), k)


def bm25_stats_mask(cols: Columns, base: Mask) -> Mask:
    """The rows BM25's statistics (document count, document frequency, average length) are
    taken over: the account's files, not its directory summaries. A summary restates its
    files' words: counted as documents, summaries would raise the frequency of a directory's
    common words and change every file's scores with the summarisation setting. Every live
    row when the account has no file at all."""
    files = base & (cols.level[: cols.n] == FILE_LEVEL)
    return files if files.any() else base


_blas_limited = False


def single_threaded_blas() -> None:
    """Caps numpy's BLAS at one thread for the whole process, once. A query's similarities
    are a matrix-vector product: memory-bound, so extra BLAS threads gain little, and when
    the cores are busy (other requests, the embedder) waking them costs a scheduler
    timeslice, several times the product itself. A large scan is cut across
    the cores by `matvec` instead, which scans on the calling thread whatever no idle core
    takes.
    """
    global _blas_limited
    if not _blas_limited:
        threadpool_limits(limits=1, user_api="blas")
        _blas_limited = True


def matvec(matrix: F32Array, vector: F32Array) -> F32Array:
    """matrix @ vector. BLAS sgemv on one thread is faster than einsum, and bound by memory
    bandwidth: from 2 x SPLIT_PART_ROWS rows the rows are cut into
    one part per core, scanned in parallel (numpy releases the GIL). The calling thread scans
    the first part, then any part no pool thread has started (the cores are busy with other
    requests): a busy pool costs this scan nothing but the hand-off."""
    n = len(matrix)
    parts = min(scan_workers(), n // SPLIT_PART_ROWS)
    if parts < 2:
        whole: F32Array = matrix @ vector
        return whole
    out: F32Array = np.empty(n, dtype=np.float32)
    cuts = [n * i // parts for i in range(parts + 1)]

    def scan(i: int) -> None:
        np.matmul(matrix[cuts[i] : cuts[i + 1]], vector, out=out[cuts[i] : cuts[i + 1]])

    pool = scan_pool()
    started = [pool.submit(scan, i) for i in range(1, parts)]
    scan(0)
    for i, job in enumerate(started, start=1):
        if job.cancel():
            scan(i)
        else:
            job.result()
    return out
