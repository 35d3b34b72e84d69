"""A minimal OpenAI-compatible `/v1/embeddings` endpoint serving Skald's bundled MiniLM.

The benchmark points OpenViking at it so both systems embed with the SAME model, weights and
onnxruntime settings: any difference in retrieval quality then comes from the systems, not from
the model. It implements only what OpenAI-style clients send for embeddings:

- `POST /v1/embeddings` `{"input": str | [str], "model": str, "encoding_format"?: "float" |
  "base64", "dimensions"?: int}` -> `{"object": "list", "data": [{"object": "embedding",
  "index": i, "embedding": [...] | "<base64 float32 LE>"}], "model", "usage"}`.
  The official `openai` client asks for base64 by default and decodes it itself.
- `GET /v1/models` (some clients probe it), `GET /health`, and `GET /stats` (texts, characters,
  requests and seconds spent embedding so far, so the benchmark can count a system's embedding
  work).

    .venv/bin/python bench/embed_server.py --port 8765 [--threads N]
"""

from __future__ import annotations

import argparse
import base64
import logging
import threading
import time
from typing import Any

import numpy as np
import uvicorn
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from skald.adapters.models.onnx_embedder import DIMENSION, MODEL_ID, OnnxMiniLMEmbedder

log = logging.getLogger("bench.embed_server")


class EmbeddingsBody(BaseModel):
    # extra fields (user, ...) are accepted and ignored, as OpenAI-compatible servers do
    input: str | list[str] | list[int] | list[list[int]]
    model: str = MODEL_ID
    encoding_format: str = "float"
    dimensions: int | None = None


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse(
        {"error": {"message": message, "type": "invalid_request_error"}}, status_code=status
    )


def tile(vec: list[float], dimension: int) -> list[float]:
    """`vec` repeated up to `dimension` values, unit length again: a stand-in of the deployed
    model's width for footprint measurements (it carries no more meaning than `vec`)."""
    out = np.resize(np.asarray(vec, dtype=np.float32), dimension)
    norm = float(np.linalg.norm(out)) or 1.0
    return [float(x) for x in out / norm]


def _refusal(body: EmbeddingsBody, texts: Any, width: int) -> str | None:
    """Why the request cannot be answered, or None."""
    if not texts or not all(isinstance(t, str) for t in texts):
        # Pre-tokenised input would need OpenAI's tokenizer, not MiniLM's: refuse clearly.
        return "input must be a non-empty string or list of strings"
    if body.dimensions is not None and body.dimensions != width:
        return f"this model has {width} dimensions, not {body.dimensions}"
    if body.encoding_format not in {"float", "base64"}:
        return "encoding_format must be float or base64"
    return None


def _encoded(vec: list[float], encoding_format: str) -> list[float] | str:
    if encoding_format == "base64":
        return base64.b64encode(np.asarray(vec, dtype="<f4").tobytes()).decode("ascii")
    return vec


def build_app(embedder: OnnxMiniLMEmbedder, tile_to: int | None = None) -> FastAPI:
    app = FastAPI(title="bench-embeddings")
    width = tile_to or DIMENSION
    stats = {"texts": 0, "chars": 0, "requests": 0, "seconds": 0.0}
    lock = threading.Lock()
    model_lock = threading.Lock()

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "model": MODEL_ID, "dimension": width}

    @app.get("/stats")
    def get_stats() -> dict[str, Any]:
        with lock:
            return dict(stats)

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": MODEL_ID, "object": "model", "owned_by": "bench"}],
        }

    @app.post("/v1/embeddings", response_model=None)
    def embeddings(body: EmbeddingsBody) -> dict[str, Any] | JSONResponse:
        texts = [body.input] if isinstance(body.input, str) else body.input
        refused = _refusal(body, texts, width)
        if refused is not None:
            return _error(400, refused)
        start = time.perf_counter()
        # One model run at a time, like a single-model inference server: concurrent requests
        # (OpenViking sends up to 10) would otherwise oversubscribe the cores with onnxruntime
        # threads and all get slower.
        with model_lock:
            vectors = embedder.embed([str(t) for t in texts])
        if tile_to:
            vectors = [tile(v, tile_to) for v in vectors]
        elapsed = time.perf_counter() - start
        with lock:
            stats["texts"] += len(texts)
            stats["chars"] += sum(len(str(t)) for t in texts)
            stats["requests"] += 1
            stats["seconds"] += elapsed
        data = [
            {"object": "embedding", "index": i, "embedding": _encoded(vec, body.encoding_format)}
            for i, vec in enumerate(vectors)
        ]
        # A whitespace count is a fair enough stand-in: clients only log usage.
        tokens = sum(len(str(t).split()) for t in texts)
        return {
            "object": "list",
            "data": data,
            "model": body.model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="onnxruntime intra-op threads (default: onnxruntime's choice, as in skald serve)",
    )
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--tile-to",
        type=int,
        default=None,
        help="answer vectors of this width (the 384 values repeated): for "
        "memory measurements at a deployed model's width",
    )
    args = parser.parse_args(argv)
    embedder = OnnxMiniLMEmbedder(batch_size=args.batch_size, threads=args.threads)
    embedder.warm_up()
    app = build_app(embedder, args.tile_to)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
