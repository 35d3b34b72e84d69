"""The semantic worker against a remote store's round trips: one job of N small files (the
synthetic corpus's), processed by the worker's own code with the real embedder, while every
blob-store call waits --blob-ms first (an S3 request: ~10-20 ms from a Lambda), every index
write waits --index-ms (an OpenSearch bulk request) and every index read --index-read-ms (a
search request). The delays are simulated on top of the
local adapters; no AWS service ran. Also the same job without delays, and the bare embedder
on the job's texts: the floor. After the job, one more: the last file rewritten (an agent's
edit), timed alone.

    .venv/bin/python bench/experiments/semantic_remote.py [--files 1024] [--blob-ms 15] \
        [--index-ms 30]

To compare code, run it with PYTHONPATH pointing at another checkout's layers/common/python.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import synthetic  # noqa: E402
from bench.common import log  # noqa: E402


class Delayed:
    """A port whose named calls wait `delay_s` before they run; a call of many (`batches`:
    name -> how many the remote store has in flight at once) waits once per that many."""

    def __init__(
        self, inner: Any, delay_s: float, calls: set[str], batches: dict[str, int] | None = None
    ) -> None:
        self._inner, self._delay, self._calls = inner, delay_s, calls
        self._batches = batches or {}
        self.counts: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        if name not in self._calls and name not in self._batches or not callable(target):
            return target

        def call(*a: Any, **kw: Any) -> Any:
            self.counts[name] = self.counts.get(name, 0) + 1
            if name in self._batches:
                items = list(a[0])
                time.sleep(self._delay * -(-len(items) // self._batches[name]))
                return target(items, *a[1:], **kw)
            time.sleep(self._delay)
            return target(*a, **kw)

        return call


BLOB_CALLS = {"get", "head", "put", "delete", "list"}
BLOB_BATCHES = {"get_many": 16, "head_many": 16, "put_many": 16}  # S3BlobStore's bounds
INDEX_CALLS = {"replace_many", "replace_sections", "upsert", "delete_prefix"}
INDEX_READS = {"get", "head", "heads", "get_many", "count", "scroll", "search"}


def run_job(
    files: int, blob_ms: float, index_ms: float, read_ms: float, workers: int, seed: int
) -> dict[str, Any]:
    from skald.adapters.local.factory import LocalAdapterFactory
    from skald.compose.composition import Composition
    from skald.config import Settings
    from skald.domain.access.identity import Identity
    from skald.domain.paths.uri import parse_uri
    from skald.services.ingest.processing import identity_payload

    me = Identity("bench", "bench", "user")
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(backend="local", data_dir=Path(tmp) / "data")
        c = Composition(settings, LocalAdapterFactory(settings))
        try:
            written: list[str] = []
            dirs: list[str] = []
            for j in range(files):
                uri = parse_uri(synthetic.record_uri(j), user_id="bench")
                _, change = c.fs.write(me, uri, synthetic.record_text(seed, j).encode(), "replace")
                written += change.written
                dirs += change.dirs
            job = {
                **identity_payload(me),
                "written": written,
                "removed": [],
                "dirs": sorted(set(dirs)),
                "processing_mode": "semantic_and_vectors",
            }
            sem = c.semantic
            sem.embedder.embed(["warm up"])
            sem.limits.read_workers = workers  # ignored by code without read-ahead
            blobs = Delayed(sem.fs.blobs, blob_ms / 1000, BLOB_CALLS, BLOB_BATCHES)
            reads = Delayed(sem.index, read_ms / 1000, INDEX_READS)
            index = Delayed(reads, index_ms / 1000, INDEX_CALLS)
            sem.fs.blobs = blobs
            sem.index = index
            t0 = time.perf_counter()
            result = sem.process(job)
            took = time.perf_counter() - t0
            calls = {
                "blob_calls": dict(blobs.counts),
                "index_calls": {**index.counts, **reads.counts},
            }
            # Then an agent's edit: the last file rewritten, one job for it.
            for port in (blobs, reads, index):
                port.counts.clear()
            last = parse_uri(synthetic.record_uri(files - 1), user_id="bench")
            _, change = c.fs.write(
                me, last, b"# Rewritten\n\nA new text for this file.\n", "replace"
            )
            edit = {
                **identity_payload(me),
                "written": change.written,
                "removed": [],
                "dirs": [],
                "processing_mode": "semantic_and_vectors",
            }
            t0 = time.perf_counter()
            sem.process(edit)
            edit_took = time.perf_counter() - t0
        finally:
            c.close()
    assert result["indexed_files"] == files, result
    return {
        "blob_ms": blob_ms,
        "index_ms": index_ms,
        "index_read_ms": read_ms,
        "read_workers": workers,
        "seconds": round(took, 3),
        "files_per_s": round(files / took, 1),
        **calls,
        "edit_seconds": round(edit_took, 3),
        "edit_blob_calls": blobs.counts,
        "edit_index_calls": {**index.counts, **reads.counts},
    }


def bare_embedder(files: int, seed: int) -> float:
    from skald.adapters.models.onnx_embedder import OnnxMiniLMEmbedder

    emb = OnnxMiniLMEmbedder()
    emb.embed(["warm up"])
    texts = synthetic.embedder_texts(seed, files)
    t0 = time.perf_counter()
    for i in range(0, len(texts), 256):
        emb.embed(texts[i : i + 256])
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--files", type=int, default=1024)
    p.add_argument("--blob-ms", type=float, default=15.0)
    p.add_argument("--index-ms", type=float, default=30.0)
    p.add_argument(
        "--index-read-ms",
        type=float,
        default=10.0,
        help="added to each index read (an OpenSearch search request)",
    )
    p.add_argument("--workers", type=int, default=8, help="readers for the delayed runs")
    p.add_argument("--seed", type=int, default=20240601)
    p.add_argument("--no-delays", action="store_true", help="only the run without delays")
    args = p.parse_args()
    import skald

    log(
        f"skald from {Path(skald.__file__).parent}; {platform.processor() or platform.machine()}"
        f", {time.strftime('%Y-%m-%d %H:%M')}"
    )
    rows = [run_job(args.files, 0, 0, 0, 1, args.seed)]
    if not args.no_delays:
        rows.append(
            run_job(
                args.files, args.blob_ms, args.index_ms, args.index_read_ms, args.workers, args.seed
            )
        )
    bare = bare_embedder(args.files, args.seed)
    for row in rows:
        log(json.dumps(row))
    log(f"bare embedder: {bare:.3f} s, {args.files / bare:.1f} texts/s")


if __name__ == "__main__":
    main()
