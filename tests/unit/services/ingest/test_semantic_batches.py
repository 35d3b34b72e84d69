"""Semantic jobs processed together: shared directories are refreshed once, every job keeps
its own outcome, and one bad job does not fail the others."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from skald.compose.composition import Composition
from skald.config import Settings
from skald.domain.access.identity import Identity
from skald.domain.paths.uri import parse_uri
from skald.services.ingest.processing import identity_payload
from tests.support.compose import local_services
from tests.support.semantic_jobs import written_job

ME = Identity("acme", "ann", "user")


class CountingEmbedder:
    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.texts: list[str] = []
        self.calls: list[int] = []

    @property
    def dimension(self) -> int:
        return int(self.inner.dimension)

    @property
    def model_id(self) -> str:
        return str(self.inner.model_id)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.texts += list(texts)
        self.calls.append(len(texts))
        return list(self.inner.embed(texts))


class FixedEmbedder:
    dimension = 384
    model_id = "all-MiniLM-L6-v2-int8"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [[1.0] + [0.0] * 383 for _ in texts]


@pytest.fixture
def container(tmp_path: Path) -> Iterator[Composition]:
    c = local_services(Settings(backend="local", data_dir=tmp_path / "data"))
    yield c
    c.close()


def write_job(c: Composition, leaf: str, n: int) -> dict[str, Any]:
    """Writes n files under viking://resources/lib/<leaf>/ and returns the job payload."""
    return written_job(
        c,
        ME,
        (
            (
                f"viking://resources/lib/{leaf}/note{i}.md",
                f"# Note {i} of {leaf}\n\nAbout {leaf}.\n".encode(),
            )
            for i in range(n)
        ),
    )


def test_a_burst_refreshes_each_shared_directory_once(container: Composition) -> None:
    embedder = CountingEmbedder(container.semantic.embedder)
    container.semantic.embedder = embedder
    jobs = [write_job(container, leaf, 3) for leaf in ("alpha", "beta", "gamma")]
    outcomes = container.semantic.process_many(jobs)
    assert [o["indexed_files"] for o in outcomes if isinstance(o, dict)] == [3, 3, 3]
    files = [t for t in embedder.texts if t.startswith("note")]
    assert len(files) == 9
    # lib, resources' root and the three leaves: L0 + L1 each, embedded once.
    sidecars = len(embedder.texts) - len(files)
    assert sidecars <= 2 * 5
    lib = parse_uri("viking://resources/lib", user_id="ann")
    _, overview = container.fs.sidecar(ME, lib, ".overview.md")
    assert overview is not None
    assert all(f"{leaf}/" in overview for leaf in ("alpha", "beta", "gamma"))

    # Job by job, the shared parents are embedded again after every job.
    one_by_one = CountingEmbedder(embedder.inner)
    container.semantic.embedder = one_by_one
    for leaf in ("delta", "epsilon", "zeta"):
        container.semantic.process(write_job(container, leaf, 3))
    assert len(one_by_one.texts) - 9 > sidecars


def test_unchanged_sidecars_keep_their_vectors(container: Composition) -> None:
    container.semantic.process(write_job(container, "alpha", 2))
    embedder = CountingEmbedder(container.semantic.embedder)
    container.semantic.embedder = embedder
    # Same content again: the leaf's listing and every ancestor's text are unchanged.
    container.semantic.process(write_job(container, "alpha", 2))
    assert [t for t in embedder.texts if not t.startswith("note")] == []


def test_one_bad_job_does_not_fail_the_others(container: Composition) -> None:
    good = write_job(container, "alpha", 2)
    bad = {**good, "written": ["not a uri"]}
    other = write_job(container, "beta", 1)
    outcomes = container.semantic.process_many([good, bad, other])
    assert isinstance(outcomes[1], Exception) and isinstance(outcomes[0], dict)
    assert outcomes[0] == {
        "indexed_files": 2,
        "removed": 0,
        "refreshed_directories": outcomes[0]["refreshed_directories"],
    }
    assert isinstance(outcomes[2], dict) and outcomes[2]["indexed_files"] == 1
    hits = container.index.get("acme", "viking://resources/lib/beta/note0.md")
    assert hits and hits[0].vector is not None


def test_removals_and_writes_of_one_burst_follow_the_file_system(container: Composition) -> None:
    first = write_job(container, "alpha", 2)
    note1 = parse_uri("viking://resources/lib/alpha/note1.md", user_id="ann")
    _, gone = container.fs.rm(ME, note1, False)
    removal = {**identity_payload(ME), **asdict(gone)}
    container.semantic.process_many([first, removal])
    assert container.index.get("acme", "viking://resources/lib/alpha/note1.md") == []
    assert container.index.get("acme", "viking://resources/lib/alpha/note0.md")


def test_a_large_job_is_embedded_and_indexed_in_bounded_groups(container: Composition) -> None:
    from skald.services.ingest.semantic_files import INDEX_GROUP_RECORDS

    # What is measured is how texts reach the embedder, not the model: a fixed vector keeps
    # this test fast on a busy machine.
    embedder = CountingEmbedder(FixedEmbedder())
    container.semantic.embedder = embedder
    # 12 files of ~40 sections each: one call for all of them would hold ~480 texts at once.
    section = "\n\n".join(f"## Part {j}\n\n" + "lorem ipsum dolor " * 100 for j in range(40))
    job = written_job(
        container,
        ME,
        (
            (f"viking://resources/big/doc{i}.md", f"# Doc {i}\n\n{section}".encode())
            for i in range(12)
        ),
    )
    (outcome,) = container.semantic.process_many([job])
    assert isinstance(outcome, dict) and outcome["indexed_files"] == 12
    per_file = len([t for t in embedder.texts if t.startswith("doc0.md")])
    assert per_file > 20
    file_calls = embedder.calls[:-1]  # the last call embeds the refreshed directories
    assert len(file_calls) > 1
    assert max(file_calls) < INDEX_GROUP_RECORDS + per_file
    for i in range(12):
        uri = f"viking://resources/big/doc{i}.md"
        assert len(container.index.get("acme", uri)) == per_file


def big_document(sections: int, tag: str) -> bytes:
    body = "\n\n".join(
        f"## Part {j} {tag}\n\n" + f"{tag} lorem ipsum dolor " * 80 for j in range(sections)
    )
    return f"# Manual {tag}\n\n{body}".encode()


def index_one(c: Composition, uri: str, data: bytes) -> dict[str, Any]:
    (outcome,) = c.semantic.process_many([written_job(c, ME, [(uri, data)])])
    assert isinstance(outcome, dict)
    return outcome


def test_one_large_file_is_embedded_and_indexed_slice_by_slice(
    container: Composition, monkeypatch: pytest.MonkeyPatch
) -> None:
    from skald.services.ingest import semantic_files as semantic_service

    monkeypatch.setattr(semantic_service, "INDEX_GROUP_RECORDS", 8)
    embedder = CountingEmbedder(FixedEmbedder())
    container.semantic.embedder = embedder
    uri = "viking://resources/manuals/big.md"
    index_one(container, uri, big_document(40, "old"))
    assert len(container.index.get("acme", uri)) > 30
    assert max(embedder.calls[:-1]) <= 8

    # Rewritten shorter: every new section is there, no old one is left.
    embedder.calls.clear()
    index_one(container, uri, big_document(21, "new"))
    records = container.index.get("acme", uri)
    assert len(records) > 2 * 8
    assert all("old" not in r.text for r in records)
    assert all(r.vector is not None for r in records)
    assert max(embedder.calls[:-1]) <= 8
    # The same records as the same text indexed afresh.
    fresh = "viking://resources/manuals/fresh.md"
    index_one(container, fresh, big_document(21, "new"))

    def sections(u: str) -> list[tuple[int, int | None, int | None, str]]:
        return sorted(
            (r.section, r.line_start, r.line_end, r.text.split("\n", 1)[1])
            for r in container.index.get("acme", u)
        )

    assert sections(uri) == sections(fresh)


class WideEmbedder:
    """1,024-dim vectors of distinct floats, as Bedrock's Titan v2 gives the deployed stack
    (a vector of repeated constants would share its float objects)."""

    dimension = 1024
    model_id = "amazon.titan-embed-text-v2:0"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        import numpy as np

        rng = np.random.default_rng(len(texts))
        vectors = rng.standard_normal((len(texts), 1024))
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors.tolist()  # type: ignore[no-any-return]


def test_indexing_memory_does_not_follow_the_document_size(tmp_path: Path) -> None:
    # A job's working memory (peak Python allocations over what stays, by tracemalloc) with
    # a 1.5 MB document against a 0.4 MB one: its text grows with the document, its vectors
    # do not (~1.6 MB per MB of document; 25 when a file's vectors were all held at once and
    # read back whole for its abstract).
    import tracemalloc

    settings = Settings(
        backend="local",
        data_dir=tmp_path / "data",
        embedding_provider="openai",
        embedding_dimension=1024,
    )
    c = local_services(settings)
    try:
        c.semantic.embedder = WideEmbedder()
        peaks: dict[int, float] = {}
        for sections in (250, 1000):
            data = big_document(sections, f"s{sections}")
            tracemalloc.start()
            index_one(c, f"viking://resources/manuals/m{sections}.md", data)
            # What the index keeps (it is in this process) is not the job's working memory.
            kept, peak = tracemalloc.get_traced_memory()
            peaks[sections] = (peak - kept) / 2**20
            tracemalloc.stop()
            assert (
                len(c.index.get("acme", f"viking://resources/manuals/m{sections}.md")) >= sections
            )
        doc_mb = (len(big_document(1000, "s1000")) - len(big_document(250, "s250"))) / 2**20
        growth = (peaks[1000] - peaks[250]) / doc_mb
        assert growth < 5, (peaks, doc_mb, growth)
    finally:
        c.close()
