"""The sidecar rule of result lists (skald.domain.retrieval.crowding)."""

from __future__ import annotations

from skald.domain.retrieval.crowding import sidecar_directory, uncrowded

R = "viking://resources/docs"


def run(uris: list[str], limit: int | None) -> list[str]:
    return uncrowded(uris, lambda u: u, limit)


def test_sidecar_directory() -> None:
    assert sidecar_directory(f"{R}/api/.abstract.md") == f"{R}/api"
    assert sidecar_directory(f"{R}/api/.overview.md") == f"{R}/api"
    assert sidecar_directory(f"{R}/api/commit.md") is None
    assert sidecar_directory("viking://.abstract.md") is None


def test_a_file_displaces_the_sidecars_of_every_directory_above_it() -> None:
    hits = [
        f"{R}/api/commit.md",
        f"{R}/api/.overview.md",
        f"{R}/api/.abstract.md",
        f"{R}/.abstract.md",
        f"{R}/guide/intro.md",
    ]
    assert run(hits, 4) == [f"{R}/api/commit.md", f"{R}/guide/intro.md"]


def test_a_sidecar_ranked_first_gives_way_when_a_file_below_it_arrives() -> None:
    hits = [
        f"{R}/api/.overview.md",
        f"{R}/guide/.abstract.md",
        f"{R}/api/commit.md",
        f"{R}/other.md",
    ]
    assert run(hits, 3) == [f"{R}/guide/.abstract.md", f"{R}/api/commit.md", f"{R}/other.md"]


def test_one_sidecar_per_directory_and_sidecars_of_unlisted_directories_stay() -> None:
    hits = [f"{R}/api/.overview.md", f"{R}/api/.abstract.md", f"{R}/guide/.abstract.md"]
    assert run(hits, 10) == [f"{R}/api/.overview.md", f"{R}/guide/.abstract.md"]


def test_limit_counts_kept_hits_and_a_sibling_directory_is_not_covered() -> None:
    hits = [f"{R}/a/x.md", f"{R}/ab/.abstract.md", f"{R}/a/.abstract.md", f"{R}/b.md", f"{R}/c.md"]
    assert run(hits, 3) == [f"{R}/a/x.md", f"{R}/ab/.abstract.md", f"{R}/b.md"]
    assert run(hits, None) == [f"{R}/a/x.md", f"{R}/ab/.abstract.md", f"{R}/b.md", f"{R}/c.md"]
