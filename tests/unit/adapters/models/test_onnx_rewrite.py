"""The bundled model's word-embedding lookup, rewritten to dequantise only the rows a text uses
(skald.adapters.models.onnx_rewrite): the same vectors, bit for bit, and the embedder falls
back to the model as it is when a rewrite cannot be loaded."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from skald.adapters.models import onnx_embedder, onnx_rewrite
from skald.adapters.models.onnx_embedder import OnnxMiniLMEmbedder

TEXTS = [
    "hello world",
    "The quick brown fox jumps over the lazy dog.",
    "naïve café déjà vu",
    "token " * 300,
    "",
    "42",
]
TABLE = "inner.embeddings.word_embeddings.weight"


@pytest.fixture(scope="module")
def original() -> bytes:
    return onnx_embedder._default_model_path().read_bytes()


def _graph(model: bytes) -> Any:
    proto = onnx_rewrite.messages()["ModelProto"]()
    proto.ParseFromString(model)
    return proto.graph


def _vectors(model: bytes) -> np.ndarray:
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    embedder = OnnxMiniLMEmbedder()
    embedder._ensure_loaded()
    embedder._session = session
    return np.asarray(embedder.embed(TEXTS), dtype=np.float32)


def test_the_lookup_reads_the_int8_table_and_gives_the_same_vectors(original: bytes) -> None:
    rewritten = onnx_rewrite.gather_before_dequantize(original)
    assert rewritten is not None
    before, after = _graph(original), _graph(rewritten)
    # The whole table is no longer computed: a Gather reads the int8 rows and their scales.
    assert any(TABLE in n.output for n in before.node)
    assert not any(TABLE in n.output for n in after.node)
    gathers = {tuple(n.input) for n in after.node if n.op_type == "Gather"}
    assert (f"{TABLE}_q", "input_ids") in gathers and (f"{TABLE}_scale", "input_ids") in gathers
    assert TABLE not in {v.name for v in after.value_info}
    # Everything else is carried through: the weights, as many of them.
    assert len(after.initializer) == len(before.initializer)
    # Two lookups (words, positions): Cast, Mul and Gather -> two Gathers, Cast and Mul each.
    assert len(after.node) == len(before.node) + 2
    np.testing.assert_array_equal(_vectors(rewritten), _vectors(original))


def test_a_model_without_the_lookup_is_left_as_it_is(original: bytes) -> None:
    rewritten = onnx_rewrite.gather_before_dequantize(original)
    assert rewritten is not None
    assert onnx_rewrite.gather_before_dequantize(rewritten) is None  # nothing left to rewrite


def _edited(original: bytes, edit: Any) -> bytes:
    proto = onnx_rewrite.messages()["ModelProto"]()
    proto.ParseFromString(original)
    edit(proto.graph)
    return bytes(proto.SerializeToString())


def _word_lookup(graph: Any) -> Any:
    return next(n for n in graph.node if n.op_type == "Gather" and n.input[0] == TABLE)


def test_a_lookup_the_rewrite_cannot_keep_exact_is_left_alone(original: bytes) -> None:
    def by_columns(graph: Any) -> None:
        _word_lookup(graph).attribute[0].i = 1  # axis 1: the scales no longer match

    def also_an_output(graph: Any) -> None:
        graph.output.add(name=TABLE)  # the whole table is wanted as it is

    for edit in (by_columns, also_an_output):
        rewritten = onnx_rewrite.gather_before_dequantize(_edited(original, edit))
        assert rewritten is not None  # the position lookup still is
        assert any(TABLE in n.output for n in _graph(rewritten).node), edit.__name__

    def control_flow(graph: Any) -> None:
        graph.node[-1].op_type = "If"  # a subgraph could read the table unseen

    assert onnx_rewrite.gather_before_dequantize(_edited(original, control_flow)) is None


@pytest.mark.parametrize("failure", ["unloadable", "raises"])
def test_the_embedder_loads_the_model_as_it_is_when_the_rewrite_fails(
    failure: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, original: bytes
) -> None:
    def broken(model: bytes) -> bytes:
        if failure == "raises":
            raise ValueError("not an ONNX model this rewrite reads")
        return b"not a model"

    monkeypatch.setattr(onnx_rewrite, "gather_before_dequantize", broken)
    with caplog.at_level(logging.WARNING, logger=onnx_embedder.__name__):
        vectors = np.asarray(OnnxMiniLMEmbedder(int8_matmuls=False).embed(TEXTS), dtype=np.float32)
    assert "rewritten" in caplog.text
    np.testing.assert_array_equal(vectors, _vectors(original))


def test_the_embedder_runs_the_rewritten_model_from_a_file(monkeypatch: pytest.MonkeyPatch) -> None:
    models: list[Any] = []
    real = ort.InferenceSession

    def recording(model: Any, *args: Any, **kwargs: Any) -> Any:
        # A session made from bytes would keep them for its life: a path, read here.
        assert not isinstance(model, bytes)
        models.append(Path(model).read_bytes())
        return real(model, *args, **kwargs)

    monkeypatch.setattr(ort, "InferenceSession", recording)
    OnnxMiniLMEmbedder().embed(["one"])
    assert len(models) == 1
    assert not any(TABLE in n.output for n in _graph(models[0]).node)
