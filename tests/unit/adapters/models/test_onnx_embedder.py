"""The packaged offline embedder (all-MiniLM-L6-v2 int8 on onnxruntime), for real."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from skald.adapters.models.onnx_embedder import OnnxMiniLMEmbedder
from skald.ports import Embedder


@pytest.fixture(scope="module")
def embedder() -> OnnxMiniLMEmbedder:
    e = OnnxMiniLMEmbedder(batch_size=4)
    e.warm_up()
    return e


def cos(a: list[float], b: list[float]) -> float:
    return float(np.dot(a, b))


def test_it_is_an_embedder(embedder: OnnxMiniLMEmbedder) -> None:
    assert isinstance(embedder, Embedder)
    assert embedder.dimension == 384
    assert embedder.model_id == "all-MiniLM-L6-v2-int8"


def test_vectors_are_unit_length_and_384_d(embedder: OnnxMiniLMEmbedder) -> None:
    vectors = embedder.embed(["hello world", "", "x" * 5000, "Crème brûlée à Paris 東京"])
    assert [len(v) for v in vectors] == [384] * 4
    assert np.linalg.norm(np.asarray(vectors), axis=1) == pytest.approx([1.0] * 4, abs=1e-5)
    assert embedder.embed([]) == []


def test_related_sentences_are_closer(embedder: OnnxMiniLMEmbedder) -> None:
    q, hit, other = embedder.embed(
        [
            "how do I authenticate",
            "use the X-API-Key header to authenticate",
            "the recipe needs two eggs and some flour",
        ]
    )
    assert cos(q, hit) > 0.35
    assert cos(q, hit) > cos(q, other) + 0.25


def test_batching_and_padding_do_not_change_vectors(embedder: OnnxMiniLMEmbedder) -> None:
    text = "the index applies filters before ranking"
    alone = embedder.embed([text])[0]
    others = ["short", "a much longer sentence " * 20, "medium length sentence here", "x"]
    # batch_size=4: the text shares batches of different lengths depending on its position.
    for pos in range(len(others) + 1):
        batch = others[:pos] + [text] + others[pos:]
        np.testing.assert_allclose(embedder.embed(batch)[pos], alone, atol=1e-4)


def test_order_is_kept_across_length_sorting(embedder: OnnxMiniLMEmbedder) -> None:
    texts = [f"sentence {'word ' * (i % 7)}{i}" for i in range(11)]
    together = embedder.embed(texts)
    one_by_one = [embedder.embed([t])[0] for t in texts]
    np.testing.assert_allclose(together, one_by_one, atol=1e-4)


def test_long_texts_are_truncated_not_rejected() -> None:
    e = OnnxMiniLMEmbedder(max_tokens=16)
    head = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen"
    a, b = e.embed([head + " and a tail", head + " with an entirely different tail " * 30])
    c = OnnxMiniLMEmbedder().embed([head + " and a tail"])[0]
    assert cos(a, b) == pytest.approx(1.0, abs=1e-5)  # only the first 16 word pieces count
    assert cos(a, c) < 0.999
    with pytest.raises(ValueError):
        OnnxMiniLMEmbedder(max_tokens=1000)


def test_concurrent_use_is_safe() -> None:
    e = OnnxMiniLMEmbedder(threads=1)  # not warmed up: the threads race to load the model
    expected = OnnxMiniLMEmbedder().embed(["concurrency check"])[0]
    results: list[list[float]] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            results.append(e.embed(["concurrency check"])[0])
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for v in results:
        np.testing.assert_allclose(v, expected, atol=1e-4)


def test_a_string_is_not_a_sequence_of_texts(embedder: OnnxMiniLMEmbedder) -> None:
    with pytest.raises(TypeError):
        embedder.embed("oops")


def test_plan_batches_covers_every_text_once_and_cuts_at_length_jumps() -> None:
    from skald.adapters.models.onnx_embedder import plan_batches

    lengths = [10] * 20 + [50] * 20
    plan = plan_batches(lengths, 32)
    assert [i for a, b in plan for i in range(a, b)] == list(range(40))
    assert all(0 < b - a <= 32 for a, b in plan)
    # Fixed batches of 32 would pad 12 short texts to 50; the plan keeps them apart.
    assert (0, 20) in plan
    assert plan_batches([], 32) == []
    # Equal lengths pad nothing: as few runs as the batch size allows.
    assert len(plan_batches([7] * 70, 32)) == 3


def test_plan_batches_bounds_each_run_by_attention_cells() -> None:
    from skald.adapters.models.onnx_embedder import plan_batches, run_cells

    lengths = [8] * 40 + [120] * 10 + [256] * 9
    budget = 2 * 256 * 256
    plan = plan_batches(lengths, 32, max_cells=budget)
    assert [i for a, b in plan for i in range(a, b)] == list(range(len(lengths)))
    # A run's working memory grows with batch x width^2: long texts go two at a time,
    # short ones still fill the batch size.
    assert all(run_cells(b - a, lengths[b - 1]) <= budget for a, b in plan)
    assert max(b - a for a, b in plan) == 32
    assert sum(b - a for a, b in plan if lengths[b - 1] == 256) == 9
    # A single text wider than the budget still gets its own run.
    assert plan_batches([256, 256], 32, max_cells=100) == [(0, 1), (1, 2)]


def test_long_texts_embed_the_same_whatever_the_cell_budget() -> None:
    long_texts = [" ".join(f"word{i}x{j}" for j in range(300)) for i in range(5)]
    mixed = ["short one", *long_texts, "another short text"]
    bounded = OnnxMiniLMEmbedder(max_batch_cells=2 * 256 * 256).embed(mixed)
    one_by_one = OnnxMiniLMEmbedder(batch_size=1).embed(mixed)
    np.testing.assert_allclose(bounded, one_by_one, atol=1e-4)


def test_building_the_session_hands_the_optimisers_leftovers_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The session's build frees 14-60 MB that glibc would keep (bench/RESULTS.md, memory
    section): the freed pages are released once the session is built, not per call."""
    from skald.adapters.models import onnx_embedder

    calls: list[bool] = []
    fresh: OnnxMiniLMEmbedder
    monkeypatch.setattr(
        onnx_embedder, "release_freed_memory", lambda: calls.append(fresh._session is not None)
    )
    fresh = OnnxMiniLMEmbedder()
    fresh.embed(["first"])
    fresh.embed(["second", "third"])
    assert calls == [True]


def test_releasing_freed_memory_is_safe_to_call() -> None:
    from skald.adapters.heap import release_freed_memory

    release_freed_memory()
    release_freed_memory()
