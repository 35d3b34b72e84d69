"""Peak memory of `skald serve` while it ingests documents, read from the kernel.

Each corpus goes into a fresh server (empty data directory, the defaults of `make serve`) with
one `add_resource(dir)` and `wait_processed()` through openviking-sdk, as a user adds a folder.
The peak is `VmHWM` of the server process (/proc/<pid>/status): the kernel's own high-water
mark of resident memory, so a short spike between two samples is not missed. Corpora:

- `docs`: Markdown documentation, 90 files, ~1.5 MB. `--docs DIR` reads a real folder (e.g.
  OpenViking's `docs/en`); without it a deterministic generator writes prose of the same shape
  (headings, paragraphs, lists, code blocks, tables; file sizes spread like real docs).
- `large`: 50 Markdown files of 200 KB each (10 MB), the same generator.

With `--mcp`, an agent's client first talks to the server's `/mcp` endpoint (the official MCP
client: initialize, list the tools, call `health`), as an agent connected over MCP would
before the folder is added: the MCP SDK the server then loads counts in the peak.

    .venv/bin/python bench/memory.py                 # both corpora, generated docs
    .venv/bin/python bench/memory.py --docs /tmp/ovdocs --corpora docs

Results: printed, in bench/out/memory-latest.json, and (unless `--no-write`) as the memory
section of bench/RESULTS.md, replacing the run it showed (earlier runs: `git log -p
bench/RESULTS.md`).
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


from bench.common import (  # noqa: E402
    BENCH_DIR,
    OUT_DIR,
    client,
    load_average,
    log,
    machine_info,
    source_state,
    wait_drained,
    write_json,
)
from bench.sections import write_section  # noqa: E402
from bench.systems import skald_server  # noqa: E402

LIMIT_MB = 400.0

_VOCABULARY = (
    "the a an of to in for on with by from as at into over after before between under "
    "agent context memory resource session index search query vector embedding model server "
    "client request response token file directory namespace account user tenant scope level "
    "abstract overview summary retrieval ranking score recall latency throughput queue worker "
    "job task batch commit archive message tool skill prompt chunk section document record "
    "database storage cache buffer stream event schedule policy permission role key secret "
    "configure deploy install upgrade migrate validate parse render compile measure observe "
    "returns accepts stores reads writes deletes updates lists moves copies links extracts "
    "semantic lexical hybrid dense sparse exact approximate nearest neighbour cosine distance "
    "large small fast slow local remote durable eventual consistent isolated shared private "
    "each every some many few most all none other same different new old first last next "
    "when where which while because although unless until since then also only just still "
    "can must should may will would could does is are was were be been has have had not "
    "developer operator administrator team project workspace product release version feature "
    "example default option parameter field value type format header body status error code"
)
WORDS = _VOCABULARY.split()
LANGS = ("python", "bash", "json", "yaml")


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(8, 24))]
    if rng.random() < 0.3:
        words.insert(rng.randrange(len(words)), f"`{rng.choice(WORDS)}_{rng.choice(WORDS)}`")
    text = " ".join(words)
    return text[0].upper() + text[1:] + rng.choice((".", ".", ".", ":", "?"))


def _block(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.55:
        return " ".join(_sentence(rng) for _ in range(rng.randint(2, 7)))
    if kind < 0.75:
        return "\n".join(f"- {_sentence(rng)}" for _ in range(rng.randint(3, 8)))
    if kind < 0.9:
        lines = [
            f"{rng.choice(WORDS)}_{rng.choice(WORDS)} = {rng.choice(WORDS)}"
            f"({rng.choice(WORDS)}, {rng.randint(0, 999)})"
            for _ in range(rng.randint(3, 15))
        ]
        return f"```{rng.choice(LANGS)}\n" + "\n".join(lines) + "\n```"
    rows = [
        f"| {rng.choice(WORDS)} | {rng.choice(WORDS)} {rng.choice(WORDS)} | {_sentence(rng)} |"
        for _ in range(rng.randint(3, 10))
    ]
    return "| name | type | description |\n|---|---|---|\n" + "\n".join(rows)


def markdown(rng: random.Random, size: int) -> str:
    """A Markdown document of about `size` characters."""
    parts = [f"# {' '.join(rng.choice(WORDS) for _ in range(4)).title()}\n"]
    total = len(parts[0])
    while total < size:
        if rng.random() < 0.25:
            depth = rng.choice(("##", "##", "###"))
            block = f"{depth} {' '.join(rng.choice(WORDS) for _ in range(3)).title()}\n"
        else:
            block = _block(rng) + "\n"
        parts.append(block)
        total += len(block) + 1
    return "\n".join(parts)[:size]


def generate(dest: Path, sizes: list[int], seed: int) -> Path:
    if dest.exists():
        shutil.rmtree(dest)
    rng = random.Random(seed)
    for i, size in enumerate(sizes):
        folder = dest / f"part{i % 9:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"doc{i:03d}.md").write_text(markdown(rng, size))
    return dest


def docs_sizes(seed: int) -> list[int]:
    """90 sizes totalling ~1.5 MB, spread like a documentation tree (a few long pages)."""
    rng = random.Random(seed)
    raw = [rng.lognormvariate(0, 0.8) for _ in range(90)]
    scale = 1_500_000 / sum(raw)
    return [max(800, int(x * scale)) for x in raw]


def proc_status(pid: int) -> dict[str, float]:
    """VmRSS/VmHWM (MB) of one process, from the kernel."""
    out: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) / 1024
    return out


@dataclass
class MemoryRow:
    corpus: str
    files: int
    bytes: int
    idle_rss_mb: float
    peak_mb: float  # VmHWM over the whole life of the server
    after_rss_mb: float
    ingest_s: float
    records_hint: str


def _tree_stats(folder: Path) -> tuple[int, int]:
    files = [p for p in folder.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def use_mcp(url: str) -> None:
    """An MCP session against the server: initialize, tools/list, tools/call health."""
    import anyio
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async def session() -> None:
        headers = {"X-OpenViking-Account": "bench", "X-OpenViking-User": "bench"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=120) as http,
            Client(streamable_http_client(url + "/mcp", http_client=http)) as c,
        ):
            tools = await c.list_tools()
            assert any(t.name == "health" for t in tools.tools), tools
            result = await c.call_tool("health", {})
            assert not result.is_error, result

    anyio.run(session)


def measure(name: str, folder: Path, work: Path, mcp: bool = False) -> MemoryRow:
    server = skald_server(work / name)
    server.start()
    assert server.proc is not None
    pid = server.proc.pid
    try:
        time.sleep(1.0)
        idle = proc_status(pid)["VmRSS"]
        if mcp:
            use_mcp(server.url)
            log(f"  {name}: rss {proc_status(pid)['VmRSS']:.0f} MB after an MCP session")
        c = client(server.url, "bench", "bench", timeout=1800)
        stop = threading.Event()

        def ticker() -> None:  # progress only: the peak comes from VmHWM
            while not stop.wait(5):
                st = proc_status(pid)
                log(f"  {name}: rss {st['VmRSS']:.0f} MB, hwm {st['VmHWM']:.0f} MB")

        t = threading.Thread(target=ticker, daemon=True)
        t.start()
        t0 = time.perf_counter()
        c.add_resource(str(folder), to=f"viking://resources/{name}", wait=False)
        wait_drained(c, deadline=time.monotonic() + 3600)
        elapsed = time.perf_counter() - t0
        stop.set()
        t.join()
        st = proc_status(pid)
        files, size = _tree_stats(folder)
        found = c.find("how are sessions committed", limit=3)
        hits = len(found.get("resources") or []) if isinstance(found, dict) else 0
        label = f"{name}, MCP used" if mcp else name
        return MemoryRow(
            label,
            files,
            size,
            round(idle, 1),
            round(st["VmHWM"], 1),
            round(st["VmRSS"], 1),
            round(elapsed, 1),
            f"find answered {hits} hits",
        )
    finally:
        server.stop()


def _section(
    rows: list[MemoryRow], command: str, loads: tuple[list[float], list[float]], docs_source: str
) -> str:
    m = machine_info()
    src = source_state()
    lines = [
        "## Memory while ingesting (bench/memory.py)",
        "",
        f"- Date: {time.strftime('%Y-%m-%dT%H:%M:%S+00:00', time.gmtime())} (UTC); command: "
        f"`{command}`",
        f"- Skald source: commit `{src.get('commit', '?')}`"
        f"{', uncommitted product changes' if src.get('uncommitted_product_files') else ''}",
        f"- Machine: {m['cpu_model']}, {m['logical_cores']} cores, {m['ram_gb']} GB RAM, "
        f"{m['python']}, onnxruntime {m['packages']['onnxruntime']}; "
        f"load average at start {loads[0]}, at end {loads[1]} (shared with other work)",
        f"- `docs` corpus: {docs_source}",
        "- Peak = VmHWM of the `skald serve` process (the kernel's high-water mark of resident "
        f"memory), target < {LIMIT_MB:.0f} MB; one `add_resource(folder)` then `wait_processed()` "
        "on an empty data directory.",
        "",
        "| corpus | files | MB | idle RSS (MB) | peak VmHWM (MB) | RSS after (MB) | ingest (s) "
        "| result |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ok = "**met**" if r.peak_mb < LIMIT_MB else "**missed**"
        lines.append(
            f"| {r.corpus} | {r.files} | {r.bytes / 1e6:.2f} | {r.idle_rss_mb} | "
            f"{r.peak_mb} | {r.after_rss_mb} | {r.ingest_s} | {ok} |"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--docs", type=Path, help="a real Markdown folder for the docs corpus")
    p.add_argument("--corpora", nargs="+", default=["docs", "large"], choices=["docs", "large"])
    p.add_argument("--seed", type=int, default=16)
    p.add_argument("--results", type=Path, default=BENCH_DIR / "RESULTS.md")
    p.add_argument("--no-write", action="store_true", help="print only")
    p.add_argument(
        "--mcp",
        action="store_true",
        help="also measure each corpus after an MCP session (see above)",
    )
    args = p.parse_args()
    work = OUT_DIR / "memory"
    work.mkdir(parents=True, exist_ok=True)
    load_start = load_average()
    rows: list[MemoryRow] = []
    docs_source = "generated (90 files, ~1.5 MB)"
    for name in args.corpora:
        if name == "docs" and args.docs is not None:
            folder = args.docs
            docs_source = f"`{args.docs}` (a real documentation folder)"
        elif name == "docs":
            folder = generate(work / "corpus-docs", docs_sizes(args.seed), args.seed)
        else:
            folder = generate(work / "corpus-large", [200_000] * 50, args.seed + 1)
        for mcp in (False, True) if args.mcp else (False,):
            log(f"ingesting {name} from {folder}{' after an MCP session' if mcp else ''}")
            row = measure(name, folder, work, mcp)
            log(f"{name}: {row}")
            rows.append(row)
    loads = (load_start, load_average())
    write_json(OUT_DIR / "memory-latest.json", {"rows": [asdict(r) for r in rows], "load": loads})
    section = _section(rows, "python bench/memory.py " + " ".join(sys.argv[1:]), loads, docs_source)
    print(section)
    if not args.no_write:
        write_section(args.results, "memory", section)


if __name__ == "__main__":
    main()
