"""The bundled model's weight matrices multiplied as int8 (skald.adapters.models.onnx_matmul):
packed exactly, vectors close to float32's and independent of the batch a text shares, and
the embedder falls back to float32 matrices when the rewrite does not load."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pytest

from skald.adapters.local.factory import build_embedder
from skald.adapters.models import onnx_embedder, onnx_matmul, onnx_rewrite
from skald.adapters.models.onnx_embedder import (
    OnnxMiniLMEmbedder,
    aligned_width,
    cpu_has_int8_dot,
)
from skald.config import Settings

TEXTS = [
    "hello world",
    "The quick brown fox jumps over the lazy dog.",
    "a b c",
    "naïve café déjà vu",
    "token " * 300,
    "",
    "42",
]


@pytest.fixture(scope="module")
def lookups_rewritten() -> bytes:
    model = onnx_rewrite.gather_before_dequantize(onnx_embedder._default_model_path().read_bytes())
    assert model is not None
    return model


def _graph(model: bytes) -> Any:
    proto = onnx_rewrite.messages()["ModelProto"]()
    proto.ParseFromString(model)
    return proto


def _vectors(embedder: OnnxMiniLMEmbedder, texts: list[str] = TEXTS) -> np.ndarray:
    return np.asarray(embedder.embed(texts), dtype=np.float32)


def test_every_weight_matrix_becomes_one_int8_product(lookups_rewritten: bytes) -> None:
    rewritten = onnx_matmul.int8_matmuls(lookups_rewritten)
    assert rewritten is not None
    before, after = _graph(lookups_rewritten), _graph(rewritten)
    products = [n for n in after.graph.node if n.op_type == "MatMulNBits"]
    assert len(products) == 36  # 6 layers x (query, key, value, output, 2 feed-forward)
    assert all(n.domain == "com.microsoft" for n in products)
    attrs = {a.name: a.i for a in products[0].attribute}
    assert attrs["bits"] == 8 and attrs["block_size"] == 128 and attrs["accuracy_level"] == 4
    assert (
        sum(n.op_type == "MatMul" for n in after.graph.node)
        == sum(n.op_type == "MatMul" for n in before.graph.node) - 36
    )  # attention's stay
    # The int8 matrices and their scales are gone, replaced by the packed ones.
    names = {t.name for t in after.graph.initializer}
    assert not any(n.endswith("_q") and "embeddings" not in n for n in names)
    assert any(o.domain == "com.microsoft" for o in after.opset_import)
    # No shape is recorded for a value no node computes any more.
    produced = {out for n in after.graph.node for out in n.output}
    dropped = {out for n in before.graph.node for out in n.output} - produced
    assert dropped and not dropped & {v.name for v in after.graph.value_info}
    assert onnx_matmul.int8_matmuls(rewritten) is None  # nothing left to rewrite


def test_the_packed_weights_are_the_models_own(lookups_rewritten: bytes) -> None:
    """Unpacked, every MatMulNBits weight and scale gives back the float32 matrix the model
    computed with `Mul(Cast(w_q), scale)`: every code, column and scale is in place."""
    rewritten = onnx_matmul.int8_matmuls(lookups_rewritten)
    assert rewritten is not None
    before, after = _graph(lookups_rewritten).graph, _graph(rewritten).graph
    tensors = {t.name: t for t in [*before.initializer, *after.initializer]}
    made = {out: n for n in before.node for out in n.output}

    def data(name: str, dtype: type[np.generic]) -> np.ndarray:
        t = tensors[name]
        return np.frombuffer(t.raw_data, dtype=dtype).reshape(tuple(t.dims))

    matmuls = {n.name: n for n in before.node if n.op_type == "MatMul"}
    checked = 0
    for node in after.node:
        if node.op_type != "MatMulNBits":
            continue
        attrs = {a.name: a.i for a in node.attribute}
        original = matmuls[node.name.removesuffix("__int8")]
        mul = made[original.input[1]]
        cast = made[mul.input[0]]
        expected = data(cast.input[0], np.int8).astype(np.float32) * data(mul.input[1], np.float32)
        codes = data(node.input[1], np.uint8).reshape(attrs["N"], attrs["K"])
        scales = data(node.input[2], np.float32).reshape(attrs["N"], -1)
        assert (scales == scales[:, :1]).all()  # one scale per column, in every block
        unpacked = (codes.astype(np.float32) - 128).T * scales[:, 0]
        np.testing.assert_array_equal(unpacked, expected)
        checked += 1
    assert checked == 36


def test_int8_vectors_stay_close_to_float32s() -> None:
    int8 = OnnxMiniLMEmbedder(int8_matmuls=True)
    f32 = OnnxMiniLMEmbedder(int8_matmuls=False)
    a, b = _vectors(int8), _vectors(f32)
    cosines = (a * b).sum(axis=1)
    assert cosines.min() > 0.99
    assert not np.array_equal(a, b)  # the int8 products did run
    assert int8._row_multiple == onnx_embedder.INT8_ROW_TILE and f32._row_multiple == 1


def test_a_texts_vector_does_not_depend_on_its_batch() -> None:
    """Texts of odd token counts, alone and in batches of every size up to 5."""
    embedder = OnnxMiniLMEmbedder(batch_size=8, int8_matmuls=True)
    texts = ["a", "a b c", "the index applies filters before ranking", "x " * 7, "one two"]
    alone = [_vectors(embedder, [t])[0] for t in texts]
    for size in range(2, len(texts) + 1):
        together = _vectors(embedder, texts[:size])
        for i in range(size):
            np.testing.assert_allclose(together[i], alone[i], atol=1e-5)


@pytest.mark.parametrize(
    ("rows", "width", "multiple", "expected"),
    [
        (1, 9, 2, 10),
        (1, 8, 2, 8),
        (3, 9, 2, 10),
        (2, 9, 2, 9),
        (1, 9, 16, 16),
        (4, 9, 16, 12),
        (16, 5, 16, 5),
        (7, 1, 1, 1),
    ],
)
def test_aligned_width(rows: int, width: int, multiple: int, expected: int) -> None:
    assert aligned_width(rows, width, multiple) == expected
    assert (rows * expected) % multiple == 0


def test_the_embedder_falls_back_to_float32_products_when_int8_does_not_load(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(onnx_matmul, "int8_matmuls", lambda model: b"not a model")
    with caplog.at_level(logging.WARNING, logger=onnx_embedder.__name__):
        embedder = OnnxMiniLMEmbedder(int8_matmuls=True)
        vectors = _vectors(embedder)
    assert "does not load" in caplog.text and "trying embedding lookups" in caplog.text
    assert embedder._row_multiple == 1
    np.testing.assert_array_equal(vectors, _vectors(OnnxMiniLMEmbedder(int8_matmuls=False)))


def test_the_setting_forces_int8_products_on_or_off(monkeypatch: pytest.MonkeyPatch) -> None:
    for value, expected in (("false", False), ("true", True)):
        monkeypatch.setenv("SKALD_ONNX_INT8_MATMULS", value)
        embedder = build_embedder(Settings())
        assert isinstance(embedder, OnnxMiniLMEmbedder) and embedder._int8_matmuls is expected
    monkeypatch.delenv("SKALD_ONNX_INT8_MATMULS")
    embedder = build_embedder(Settings())
    assert isinstance(embedder, OnnxMiniLMEmbedder)
    assert embedder._int8_matmuls is onnx_embedder.cpu_has_int8_dot()


def test_unset_it_follows_the_cpus_int8_instructions(monkeypatch: pytest.MonkeyPatch) -> None:
    zen4 = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_vnni avx512_bf16\n"
    alder_lake = "flags\t\t: fpu sse2 avx2 avx_vnni\n"
    zen3 = "processor\t: 0\nflags\t\t: fpu sse2 avx2 fma\n"
    assert cpu_has_int8_dot(zen4) and cpu_has_int8_dot(alder_lake)
    assert not cpu_has_int8_dot(zen3) and not cpu_has_int8_dot("no flags line\n")
    monkeypatch.setattr(onnx_embedder, "cpu_has_int8_dot", lambda cpuinfo=None: False)
    assert OnnxMiniLMEmbedder()._int8_matmuls is False
    monkeypatch.setattr(onnx_embedder, "cpu_has_int8_dot", lambda cpuinfo=None: True)
    assert OnnxMiniLMEmbedder()._int8_matmuls is True


def test_a_model_that_loads_but_does_not_run_is_not_kept(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An onnxruntime whose int8 kernel loads and then refuses to run (as float32 products on
    packed 8-bit weights do in onnxruntime 1.22): the embedder probes the session at load and
    falls back, instead of failing every embedding."""
    import onnxruntime as ort

    real = ort.InferenceSession

    class RefusesToRun:
        def __init__(self, session: Any) -> None:
            self._session = session

        def get_inputs(self) -> Any:
            return self._session.get_inputs()

        def run(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("Only 4b quantization is supported for unpacked compute.")

    def loading(model: Any, *args: Any, **kwargs: Any) -> Any:
        session = real(model, *args, **kwargs)
        with open(model, "rb") as f:
            return RefusesToRun(session) if b"MatMulNBits" in f.read() else session

    monkeypatch.setattr(ort, "InferenceSession", loading)
    with caplog.at_level(logging.WARNING, logger=onnx_embedder.__name__):
        embedder = OnnxMiniLMEmbedder(int8_matmuls=True)
        vectors = _vectors(embedder)
    assert "Only 4b" in caplog.text and "trying embedding lookups" in caplog.text
    assert embedder._row_multiple == 1
    monkeypatch.setattr(ort, "InferenceSession", real)
    np.testing.assert_array_equal(vectors, _vectors(OnnxMiniLMEmbedder(int8_matmuls=False)))


def test_when_the_lookup_rewrite_breaks_the_model_the_int8_one_still_applies(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The fallback drops the rewrite that applied last and broke the load, here the lookups'
    (the int8 rewrite cannot read its output and is skipped), and keeps the other."""
    monkeypatch.setattr(onnx_rewrite, "gather_before_dequantize", lambda model: b"not a model")
    with caplog.at_level(logging.WARNING, logger=onnx_embedder.__name__):
        embedder = OnnxMiniLMEmbedder(int8_matmuls=True)
        vectors = _vectors(embedder)
    assert "trying int8 weight matrices" in caplog.text
    assert embedder._row_multiple == onnx_embedder.INT8_ROW_TILE
    reference = _vectors(OnnxMiniLMEmbedder(int8_matmuls=False))
    assert (vectors * reference).sum(axis=1).min() > 0.99 and not np.array_equal(vectors, reference)
