"""Where does ingest time go? Runs a system with its embeddings served by bench/embed_server.py
and counts what it embeds while ingesting the synthetic corpus: texts per file, characters per
text, and the share of the wall-clock time spent inside the model.

    .venv/bin/python bench/experiments/diagnose_ingest.py [--records 1000] [--peer]

Skald is pointed at the embedding server through its own `openai` embedding provider
(SKALD_EMBEDDING_PROVIDER=openai), so the server does exactly the work it does in-process,
plus one loopback HTTP hop per batch. A diagnostic only: bench/run.py measures the real thing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import httpx  # noqa: E402

from bench import synthetic  # noqa: E402
from bench.common import OUT_DIR, ServerProcess, client, free_port, log, write_json  # noqa: E402
from bench.systems import EMBED_MODEL, embed_server, openviking_server  # noqa: E402


def skald_via(embed_url: str, workdir: Path) -> ServerProcess:
    import shutil

    data = workdir / "skald-diag-data"
    if data.exists():
        shutil.rmtree(data)
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "skald.cli",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--data-dir",
        str(data),
    ]
    env = {
        "SKALD_EMBEDDING_PROVIDER": "openai",
        "SKALD_EMBEDDING_BASE_URL": f"{embed_url}/v1",
        "SKALD_EMBEDDING_MODEL": EMBED_MODEL,
        "SKALD_EMBEDDING_DIMENSION": "384",
    }
    return ServerProcess("skald-diag", cmd, port, workdir / "skald-diag.log", env=env)


def measure(
    name: str, srv: ServerProcess, emb: ServerProcess, records: int, seed: int
) -> dict[str, Any]:
    srv.start(timeout_s=300)
    try:
        c = client(srv.url, "bench", "bench")
        before = httpx.get(f"{emb.url}/stats").json()
        t0 = time.perf_counter()
        ing = synthetic.ingest(c, seed, 0, records)
        wall = time.perf_counter() - t0
        after = httpx.get(f"{emb.url}/stats").json()
        c.close()
    finally:
        srv.stop()
    texts = after["texts"] - before["texts"]
    chars = after["chars"] - before["chars"]
    model_s = after["seconds"] - before["seconds"]
    out = {
        "system": name,
        "records": records,
        "wall_s": wall,
        "files_per_s": ing["files_per_s"],
        "texts_embedded": texts,
        "texts_per_file": texts / records,
        "chars_per_text": chars / max(texts, 1),
        "chars_embedded_per_file": chars / records,
        "requests": after["requests"] - before["requests"],
        "model_s": model_s,
        "model_share_of_wall": model_s / wall,
    }
    shown = {k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}
    log(f"{name}: {json.dumps(shown)}")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=1000)
    p.add_argument("--seed", type=int, default=20240601)
    p.add_argument("--peer", action="store_true", help="also OpenViking")
    args = p.parse_args()
    work = OUT_DIR / "diag"
    emb = embed_server(work)
    emb.start()
    results = []
    try:
        results.append(measure("skald", skald_via(emb.url, work), emb, args.records, args.seed))
        if args.peer:
            ov = openviking_server(work, emb.url).server
            results.append(measure("openviking", ov, emb, args.records, args.seed))
    finally:
        emb.stop()
    write_json(
        work / "diagnose_ingest.json",
        {"results": results, "at": time.strftime("%Y-%m-%dT%H:%M:%S")},
    )


if __name__ == "__main__":
    main()
