"""A deterministic synthetic corpus, its ingestion and the per-operation latency runs.

Record i is `viking://resources/synth/aAA/gGGG/lLLLL/fIIIIII.md` (100 files per leaf
directory, 10 leaves per group, 10 groups per area): nested directories like a real tree, and
the corpus of size N is exactly the first N records, so sizes grow by appending. Each file is a
title and 1-3 sentences drawn from a fixed English vocabulary with `random.Random(seed, i)`,
so every run, machine and system sees byte-identical files and queries.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from openviking_sdk import SyncHTTPClient

from bench.common import log, percentiles, wait_drained

ROOT = "viking://resources/synth"
LEAF = 100

NAMES = (
    "Alice",
    "Bruno",
    "Chen",
    "Dana",
    "Emeka",
    "Farah",
    "Goran",
    "Hana",
    "Ivan",
    "Julia",
    "Kofi",
    "Lena",
    "Mateo",
    "Nadia",
    "Oskar",
    "Priya",
    "Quinn",
    "Rosa",
    "Sven",
    "Tariq",
)
ADJECTIVES = (
    "quiet",
    "broken",
    "ancient",
    "bright",
    "heavy",
    "fragile",
    "hidden",
    "rusty",
    "golden",
    "narrow",
    "frozen",
    "crowded",
    "wooden",
    "electric",
    "secret",
    "empty",
    "noisy",
    "tiny",
    "massive",
    "careful",
    "sudden",
    "remote",
    "famous",
    "damp",
    "polished",
    "crooked",
    "gentle",
    "bitter",
    "curious",
    "silver",
)
NOUNS = (
    "lighthouse",
    "engine",
    "garden",
    "ledger",
    "violin",
    "bridge",
    "compass",
    "harbor",
    "satellite",
    "library",
    "kettle",
    "glacier",
    "orchard",
    "telescope",
    "carriage",
    "furnace",
    "lantern",
    "market",
    "vineyard",
    "printer",
    "tunnel",
    "cathedral",
    "drone",
    "bakery",
    "reactor",
    "fountain",
    "archive",
    "canyon",
    "workshop",
    "observatory",
    "sailboat",
    "mill",
    "bicycle",
    "museum",
    "volcano",
    "station",
    "laboratory",
    "cabin",
    "river",
    "factory",
    "server",
    "manuscript",
    "piano",
    "tractor",
    "castle",
    "forest",
    "notebook",
    "greenhouse",
    "clocktower",
    "warehouse",
)
VERBS = (
    "repaired",
    "painted",
    "measured",
    "visited",
    "described",
    "photographed",
    "cleaned",
    "inspected",
    "designed",
    "sold",
    "rebuilt",
    "studied",
    "mapped",
    "guarded",
    "moved",
    "borrowed",
    "tested",
    "restored",
    "sketched",
    "explored",
    "catalogued",
    "abandoned",
    "discovered",
    "assembled",
    "insured",
)
PLACES = (
    "Lisbon",
    "the northern coast",
    "Kyoto",
    "the old quarter",
    "Nairobi",
    "the valley",
    "Reykjavik",
    "the mountain pass",
    "Montreal",
    "the river delta",
    "Santiago",
    "the desert road",
    "Oslo",
    "the island",
    "Hanoi",
    "the harbor district",
    "Cusco",
    "the plateau",
    "Tbilisi",
    "the suburbs",
)
TIMES = (
    "last spring",
    "in 1998",
    "every winter",
    "before dawn",
    "after the storm",
    "during the festival",
    "on a Tuesday",
    "in the late evening",
    "twice a year",
    "after the merger",
)


def record_uri(i: int) -> str:
    return f"{ROOT}/a{i // 10_000:02d}/g{i // 1_000:03d}/l{i // LEAF:04d}/f{i:06d}.md"


def leaf_dir(i: int) -> str:
    return record_uri(i).rsplit("/", 1)[0]


def _sentence(rng: random.Random) -> str:
    return (
        f"{rng.choice(NAMES)} {rng.choice(VERBS)} the {rng.choice(ADJECTIVES)} "
        f"{rng.choice(NOUNS)} near {rng.choice(PLACES)} {rng.choice(TIMES)}."
    )


def record_text(seed: int, i: int) -> str:
    rng = random.Random(seed * 1_000_003 + i)
    title = f"# The {rng.choice(ADJECTIVES)} {rng.choice(NOUNS)}"
    # 1-3 sentences (~40 word pieces with the file name): note-sized records. Longer ones
    # would only slow the quick run down: embedding cost grows linearly with length and
    # dominates ingest on 2 cores, for every system alike.
    body = " ".join(_sentence(rng) for _ in range(rng.randint(1, 3)))
    return f"{title}\n\n{body}\n"


@dataclass
class Workload:
    """Queries for one corpus size, all drawn from the records that exist at that size."""

    find: list[str]
    grep: list[str]
    ls: list[str]
    glob: list[str] = field(default_factory=list)

    def of(self, kind: str) -> list[str]:
        """The queries of one kind: find, grep, ls or glob."""
        lists: dict[str, list[str]] = {
            "find": self.find,
            "grep": self.grep,
            "ls": self.ls,
            "glob": self.glob,
        }
        return lists[kind]


def workload(seed: int, size: int, n_find: int, n_grep: int, n_ls: int) -> Workload:
    rng = random.Random(seed * 7919 + size)
    finds: list[str] = []
    for j in range(n_find):
        if j % 2 == 0:
            # Half paraphrase an existing sentence (a lookup with a right answer) ...
            words = (
                rng.choice(record_text(seed, rng.randrange(size)).splitlines()[2].split(". "))
                .rstrip(".")
                .split()
            )
            keep = [w for w in words if w not in {"the", "near"} and rng.random() < 0.8]
            finds.append(" ".join(keep) or " ".join(words))
        else:
            # ... half are short topical questions.
            finds.append(
                f"who {rng.choice(VERBS)} a {rng.choice(ADJECTIVES)} "
                f"{rng.choice(NOUNS)} in {rng.choice(PLACES)}"
            )
    greps = [rng.choice(NOUNS) + " near " + rng.choice(PLACES) for _ in range(n_grep)]
    leaves = max(1, size // LEAF)
    lss = [leaf_dir(rng.randrange(leaves) * LEAF) for _ in range(n_ls)]
    # One leaf's file names, found by a walk of the whole corpus (its own generator: the
    # lists above stay as they were before glob was measured).
    glob_rng = random.Random(seed * 7919 + size + 1)
    globs = [f"**/f{glob_rng.randrange(leaves):04d}??.md" for _ in range(n_grep)]
    return Workload(finds, greps, lss, globs)


def ingest(c: SyncHTTPClient, seed: int, start: int, stop: int) -> dict[str, Any]:
    """Writes records [start, stop) one leaf directory per batch-write (no waiting), then waits
    for the server's processing queues to drain. The clock covers both."""
    if start == 0:
        c.mkdir(ROOT)
    t0 = time.perf_counter()
    i = start
    while i < stop:
        end = min(stop, (i // LEAF + 1) * LEAF)
        ops = [{"uri": record_uri(j), "content": record_text(seed, j)} for j in range(i, end)]
        c.batch_write(ROOT, ops, wait=False)
        i = end
    written = time.perf_counter() - t0
    wait_drained(c)
    total = time.perf_counter() - t0
    n = stop - start
    return {"files": n, "write_s": written, "total_s": total, "files_per_s": n / total}


Op = Callable[[SyncHTTPClient, str], Any]


def operations() -> dict[str, tuple[str, Op]]:
    """name -> (which workload list, call). Every call goes through the SDK over HTTP."""
    return {
        "find": ("find", lambda c, q: c.find(q, target_uri=ROOT, limit=10)),
        "search keywords": (
            "find",
            lambda c, q: c.search(
                q, target_uri=ROOT, limit=10, options={"search_type": "keywords"}
            ),
        ),
        # grep over the whole corpus: the scan grows with it (node_limit caps the matches)
        "grep": ("grep", lambda c, p: c.grep(ROOT, p, case_insensitive=True)),
        "ls": ("ls", lambda c, u: c.ls(u)),
        # a match on the names of the whole corpus (one leaf's 100 files)
        "glob": ("glob", lambda c, p: c.glob(p, uri=ROOT)),
        # GET /health: the floor every call pays (SDK, HTTP, server framework), no work
        "health": ("ls", lambda c, _: c.health()),
    }


def measure_latency(c: SyncHTTPClient, wl: Workload, *, warmup: int = 5) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, (kind, call) in operations().items():
        items = wl.of(kind)
        try:
            for q in items[:warmup]:
                call(c, q)
        except Exception as exc:  # an operation the system does not offer
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
            log(f"    {name}: not available ({type(exc).__name__}: {str(exc)[:120]})")
            continue
        times: list[float] = []
        for q in items:
            t0 = time.perf_counter()
            call(c, q)
            times.append((time.perf_counter() - t0) * 1000)
        out[name] = percentiles(times)
        s = out[name]
        log(f"    {name}: p50={s['p50']:.1f} p95={s['p95']:.1f} p99={s['p99']:.1f} ms (n={s['n']})")
    return out


def embedder_texts(seed: int, n: int) -> list[str]:
    """The texts Skald embeds for the first n records (file name, newline, content)."""
    return [f"{record_uri(i).rsplit('/', 1)[1]}\n{record_text(seed, i)}" for i in range(n)]
