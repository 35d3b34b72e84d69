"""What checking a typed result costs on the hot path: a 10-hit find answer rendered as the
route renders it (skald.api.envelope.ok: serialised by its declared types, a value of another
type refused) against the same answer as the plain dict the route rendered before.

    PYTHONPATH=layers/common/python python bench/experiments/typed_results_cost.py
"""

from __future__ import annotations

import timeit
from functools import partial

from skald.api.envelope import ok, to_wire
from skald.services.retrieval.results import Found, Hit


def found(n: int = 10) -> Found:
    hits = [
        Hit(
            "resource",
            f"viking://resources/docs/file-{i}.md",
            2,
            0.5 + i / 100,
            "An abstract of a few dozen words. " * 4,
            ["topic=docs", "lang=en"],
            "semantic 0.512; keywords 0.400",
        )
        for i in range(n)
    ]
    return Found(resources=hits, total=n)


def main() -> None:
    typed = found()
    plain = to_wire(typed)
    assert ok(typed).body == ok(plain).body
    runs = 20000
    for name, value in (("typed (checked)", typed), ("dict (unchecked)", plain)):
        best = min(timeit.repeat(partial(ok, value), number=runs, repeat=5)) / runs
        print(f"{name:18s} {best * 1e6:6.1f} us per 10-hit find envelope")


if __name__ == "__main__":
    main()
