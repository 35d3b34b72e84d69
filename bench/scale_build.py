"""Builds the synthetic data dirs of bench/scale_find.py: N records written straight into a
data dir's embedded index (SQLite), in-process, cached under bench/out/scale-find/ so reruns
skip the build.

Embedding 1M texts is out of reach on this machine (the embedder does a few hundred texts a
second), so the vectors are the real embedder's for a sample of SAMPLE texts, each record
taking one sample vector plus Gaussian noise (then re-normalised): real directions, clustered
as real corpora are, and no two records alike. Record i's text is bench/synthetic.py's
`record_text(seed, i)` (the BM25 side of a hybrid find works on real words); its vector comes
from sample text i % SAMPLE, so text and vector of one record need not agree, which changes
neither latency nor recall against the exact scan.

    .venv/bin/python bench/scale_build.py --size 1000000
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import numpy.typing as npt

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import OUT_DIR, load_average, log  # noqa: E402
from bench.synthetic import record_text, record_uri  # noqa: E402
from skald.adapters.local.index import store as index_store  # noqa: E402
from skald.domain.paths.uri import from_canonical  # noqa: E402
from skald.ports import IndexRecord  # noqa: E402

ROOT_DIR = OUT_DIR / "scale-find"
ACCOUNT = "scalebench"
SEED = 7
SAMPLE = 4096
NOISE = 0.025  # per dimension: |noise| ~ 0.49, cosine to the sample vector ~ 0.9
DIM = 384
CHUNK = 10_000
F32 = npt.NDArray[np.float32]


def data_dir(size: int) -> Path:
    return ROOT_DIR / f"n{size}" / "data"


def sample_vectors() -> F32:
    """The real embedder's vectors of SAMPLE record texts (cached)."""
    path = ROOT_DIR / f"sample-{SAMPLE}.npy"
    if path.exists():
        cached: F32 = np.load(path)
        return cached
    from skald.adapters.models.onnx_embedder import OnnxMiniLMEmbedder

    emb = OnnxMiniLMEmbedder()
    texts = [record_text(SEED, i) for i in range(SAMPLE)]
    t0 = time.perf_counter()
    vecs = np.asarray(emb.embed(texts), dtype=np.float32)
    log(f"embedded {SAMPLE} sample texts in {time.perf_counter() - t0:.1f}s")
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, vecs)
    return vecs


def record_vectors(sample: F32, start: int, stop: int) -> F32:
    rng = np.random.default_rng(SEED * 1_000_003 + start)
    base = sample[np.arange(start, stop) % SAMPLE]
    vecs = base + NOISE * rng.standard_normal(base.shape, dtype=np.float32)
    out: F32 = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
    return out


def all_vectors(size: int) -> F32:
    """Every record's vector, as build() wrote them (chunk by chunk: the noise is seeded per
    chunk)."""
    sample = sample_vectors()
    out = np.empty((size, DIM), dtype=np.float32)
    for s in range(0, size, CHUNK):
        e = min(size, s + CHUNK)
        out[s:e] = record_vectors(sample, s, e)
    return out


def record(i: int, vec: F32, now: float) -> IndexRecord:
    uri = record_uri(i)
    parsed = from_canonical(uri)
    text = record_text(SEED, i)
    return IndexRecord(
        account=ACCOUNT,
        uri=uri,
        level=2,
        context_type="resource",
        parent=str(parsed.parent),
        ancestors=parsed.ancestors(),
        text=text,
        abstract=text.splitlines()[0].lstrip("# "),
        vector=vec.tolist(),
        tags=[],
        created_at=now,
        updated_at=now,
    )


def build(size: int) -> dict[str, float]:
    """Writes records [0, size) into data_dir(size)/index.db unless already built."""
    ddir = data_dir(size)
    marker = ddir.parent / "built.json"
    if marker.exists():
        info: dict[str, float] = json.loads(marker.read_text())
        return info
    ddir.mkdir(parents=True, exist_ok=True)
    db = ddir / "index.db"
    for p in ddir.glob("index.db*"):
        p.unlink()
    sample = sample_vectors()
    load0 = load_average()[0]
    t0 = time.perf_counter()
    w = index_store.connect(db, readonly=False)
    index_store.init_schema(w, db, DIM, True)
    now = time.time()
    rid = 1
    for s in range(0, size, CHUNK):
        e = min(size, s + CHUNK)
        vecs = record_vectors(sample, s, e)
        prepared = [
            index_store.prepare(record(i, vecs[i - s], now), DIM, True) for i in range(s, e)
        ]
        w.execute("BEGIN IMMEDIATE")
        index_store.insert(w, rid, prepared)
        w.execute("COMMIT")
        rid += len(prepared)
        if (e // CHUNK) % 10 == 0:
            log(f"n={size}: {e} records written, {time.perf_counter() - t0:.0f}s")
    w.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    w.close()
    info = {
        "records": float(size),
        "build_s": time.perf_counter() - t0,
        "load_before": load0,
        "load_after": load_average()[0],
        "db_mb": db.stat().st_size / 1e6,
    }
    marker.write_text(json.dumps(info))
    return info


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, nargs="+", default=[10_000])
    args = ap.parse_args()
    for size in args.size:
        log(f"n={size}: {build(size)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
