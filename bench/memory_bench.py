"""LoCoMo memory benchmark: what the memory extractor keeps, and whether its memories lead
back to the evidence.

Every LoCoMo session of the dev split is added as one Skald session (speaker A as the user,
speaker B as the assistant, as in `bench/run.py`) and committed; each extraction is awaited
before the next session. Then:

(a) coverage and precision against LoCoMo's per-session `observation` facts. A memory
    *statement* is a fact line of a memory file (its summary and content lines; quotes of the
    conversation are kept too, they are what a reader sees). An observation of session n is
    *covered* when a statement of a memory whose provenance includes session n has cosine
    similarity >= T with it (bundled MiniLM embeddings, the model Skald indexes with). A
    memory file is *precise* when one of its statements reaches T against an observation of
    a session in its provenance. T is calibrated, not chosen: the 95th percentile of each
    observation's best similarity against the memories of the SAME conversation that come
    only from OTHER sessions (same people, same names, so names cannot carry a match; a
    fact repeated in another session makes T stricter, not looser), i.e. a 5% false-match
    rate. Coverage is also shown at fixed thresholds.
(b) memory-path retrieval: for each question, `find` over the user's memories
    (`viking://user/<conversation>/memories`, limit 10); a hit counts when its provenance
    frontmatter (archive + message ids) names a message of an evidence turn. recall@k = the
    share of questions with such a hit in the top k (any-evidence recall); every returned hit
    holds its rank, sidecars included.

    .venv/bin/python bench/memory_bench.py [--conversations N] [--no-write] [--reuse]

Writes bench/out/memory_bench.json and the memory section of bench/RESULTS.md. No LLM is
configured: the numbers are the offline (rule) extractor's.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from bench import locomo  # noqa: E402
from bench.common import OUT_DIR, client, log, merged_hits  # noqa: E402
from bench.sections import write_section  # noqa: E402
from bench.systems import skald_server  # noqa: E402

ACCOUNT = "membench"
FALSE_MATCH_RATE = 0.05
FIXED_THRESHOLDS = (0.5, 0.6, 0.7, 0.8)
_FRONT = re.compile(r"\A---\n(.*?)\n---\n", re.DOTALL)


def observations(path: Path, samples: set[str]) -> dict[str, list[dict[str, str]]]:
    raw = json.loads(path.read_text())
    out: dict[str, list[dict[str, str]]] = defaultdict(list)
    for sample in raw:
        if sample["sample_id"] not in samples:
            continue
        speaker_a = sample["conversation"]["speaker_a"]
        for key, by_speaker in sample.get("observation", {}).items():
            session = int(re.findall(r"\d+", key)[0])
            for speaker, facts in by_speaker.items():
                for fact in facts:
                    text, evidence = fact[0], fact[1] if len(fact) > 1 else ""
                    out[sample["sample_id"]].append(
                        {
                            "text": str(text),
                            "speaker": "user" if speaker == speaker_a else "assistant",
                            "session": str(session),
                            "evidence": str(evidence),
                        }
                    )
    return out


def frontmatter(text: str) -> dict[str, Any]:
    m = _FRONT.match(text)
    if not m:
        return {}
    meta: dict[str, Any] = {}
    for line in m.group(1).splitlines():
        key, _, value = line.partition(": ")
        try:
            meta[key] = json.loads(value)
        except ValueError:
            meta[key] = value
    return meta


def statements(text: str) -> list[str]:
    body = _FRONT.sub("", text, count=1)
    out = []
    for line in body.splitlines():
        line = line.strip().lstrip("-* ").strip()
        if not line or line.startswith("#") or line == "---" or not re.search(r"\w", line):
            continue
        out.append(line)
    return list(dict.fromkeys(out))


def memory_type(uri: str) -> str:
    rest = uri.split("/memories/", 1)[1]
    head = rest.split("/", 1)[0].removesuffix(".md")
    if head == "events" and "/conversation-" in rest:
        return "events (conversation)"
    return head


def collect(c: Any, conv: locomo.Conversation) -> tuple[dict[str, str], dict[str, str]]:
    """(memory uri -> text, message id -> dia id) of one conversation's user."""
    user = conv.sample_id
    files = [
        e["uri"]
        for e in c.ls(f"viking://user/{user}/memories", recursive=True, node_limit=10000)
        if not e["isDir"]
    ]
    texts = {u: c.read(u) for u in files}
    message_turn: dict[str, str] = {}
    for n, turns in conv.sessions.items():
        archive = c.get_session_archive(locomo.session_id(conv.sample_id, n), "archive_001")
        msgs = archive.get("messages") or []
        if len(msgs) != len(turns):
            continue  # the order mapping would be wrong: leave the session unmapped
        for msg, turn in zip(msgs, turns, strict=True):
            message_turn[str(msg.get("id"))] = turn.dia_id
    return texts, message_turn


def provenance_turns(text: str, message_turn: dict[str, str]) -> set[str]:
    meta = frontmatter(text)
    ids: list[str] = list(meta.get("message_ids") or [])
    for source in meta.get("sources") or []:
        if isinstance(source, dict):
            ids.extend(source.get("message_ids") or [])
    return {message_turn[i] for i in ids if i in message_turn}


def _evidence_rank(
    hits: list[dict[str, Any]],
    evidence: set[str],
    texts: dict[str, str],
    message_turn: dict[str, str],
    cache: dict[str, set[str]],
) -> int | None:
    """The rank of the first hit whose provenance holds an evidence turn, if any."""
    for rank, hit in enumerate(hits, start=1):
        uri = str(hit.get("uri", ""))
        if uri not in cache:
            cache[uri] = provenance_turns(texts[uri], message_turn) if uri in texts else set()
        if cache[uri] & evidence:
            return rank
    return None


def _negatives(
    conv_ids: list[str],
    obs: dict[str, list[dict[str, str]]],
    obs_vec: dict[str, Any],
    st_vec: dict[str, Any],
    per_conv: dict[str, dict[str, Any]],
) -> list[float]:
    """Per observation, its best similarity to a statement from another session: the
    similarities of false matches, which set the threshold."""
    negatives: list[float] = []
    for cid in conv_ids:
        sims = _sims(obs_vec[cid], st_vec[cid])
        masks = _session_mask(obs[cid], per_conv[cid])
        for i in range(sims.shape[0]):
            other = sims[i][~masks[i]]
            if other.size:
                negatives.append(float(other.max()))
    return negatives


def evaluate(
    k_values: tuple[int, ...], data: locomo.LoCoMo, obs: dict[str, list[dict[str, str]]], url: str
) -> dict[str, Any]:
    from skald.adapters.models.onnx_embedder import OnnxMiniLMEmbedder

    embedder = OnnxMiniLMEmbedder(threads=1)
    per_conv: dict[str, dict[str, Any]] = {}
    retrieval_rows: list[dict[str, Any]] = []
    for conv in data.conversations:
        c = client(url, ACCOUNT, conv.sample_id)
        texts, message_turn = collect(c, conv)
        stmts = [(uri, s) for uri, text in texts.items() for s in statements(text)]
        per_conv[conv.sample_id] = {
            "texts": texts,
            "stmts": stmts,
            "message_turn": message_turn,
            "mapped_messages": len(message_turn),
        }
        cache: dict[str, set[str]] = {}
        for q in (q for q in data.questions if q.sample_id == conv.sample_id):
            res = c.find(
                q.text, target_uri=f"viking://user/{conv.sample_id}/memories", limit=max(k_values)
            )
            row: dict[str, Any] = {"category": q.category}
            found_at = _evidence_rank(
                merged_hits(res)[: max(k_values)], set(q.evidence), texts, message_turn, cache
            )
            for k in k_values:
                row[f"recall@{k}"] = float(found_at is not None and found_at <= k)
            retrieval_rows.append(row)
        c.close()
    # (a) coverage and precision by embedding similarity
    log("embedding observations and memory statements")
    conv_ids = [conv.sample_id for conv in data.conversations]
    for cid in conv_ids:
        turn_session = {
            t.dia_id: n
            for n, turns in next(
                c for c in data.conversations if c.sample_id == cid
            ).sessions.items()
            for t in turns
        }
        message_turn = per_conv[cid]["message_turn"]
        per_conv[cid]["file_sessions"] = {
            uri: {
                turn_session[t] for t in provenance_turns(text, message_turn) if t in turn_session
            }
            for uri, text in per_conv[cid]["texts"].items()
        }
    obs_vec = {cid: _embed(embedder, [o["text"] for o in obs[cid]]) for cid in conv_ids}
    st_vec = {cid: _embed(embedder, [s for _, s in per_conv[cid]["stmts"]]) for cid in conv_ids}
    negatives = _negatives(conv_ids, obs, obs_vec, st_vec, per_conv)
    threshold = float(np.quantile(negatives, 1 - FALSE_MATCH_RATE)) if negatives else 0.7
    coverage = _coverage(conv_ids, obs, obs_vec, st_vec, per_conv, threshold)
    coverage["threshold"] = threshold
    coverage["negatives"] = len(negatives)
    coverage["at_fixed"] = {
        str(t): _coverage(conv_ids, obs, obs_vec, st_vec, per_conv, t)["overall"]
        for t in FIXED_THRESHOLDS
    }
    retrieval = locomo.aggregate(retrieval_rows, [f"recall@{k}" for k in k_values])
    files_by_type: dict[str, int] = defaultdict(int)
    for cid in conv_ids:
        for uri in per_conv[cid]["texts"]:
            files_by_type[memory_type(uri)] += 1
    return {
        "coverage": coverage,
        "retrieval": retrieval,
        "files_by_type": dict(files_by_type),
        "statements": sum(len(per_conv[c]["stmts"]) for c in conv_ids),
        "mapped_messages": sum(per_conv[c]["mapped_messages"] for c in conv_ids),
    }


def _embed(embedder: Any, texts: list[str]) -> np.ndarray:
    if not texts:
        return np.zeros((0, embedder.dimension), dtype=np.float32)
    vecs = np.asarray(embedder.embed(texts), dtype=np.float32)
    norms = np.linalg.norm(vecs, axis=1, keepdims=True)
    unit: np.ndarray = vecs / np.maximum(norms, 1e-9)
    return unit


def _sims(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a @ b.T if len(a) and len(b) else np.zeros((len(a), len(b)), dtype=np.float32)


def _session_mask(observations: list[dict[str, str]], conv: dict[str, Any]) -> np.ndarray:
    """[observation, statement]: True when the statement's memory comes from the
    observation's session."""
    sessions = [conv["file_sessions"].get(uri, set()) for uri, _ in conv["stmts"]]
    mask = np.zeros((len(observations), len(sessions)), dtype=bool)
    for i, o in enumerate(observations):
        n = int(o["session"])
        mask[i] = [n in s for s in sessions]
    return mask


def _coverage(
    conv_ids: list[str],
    obs: dict[str, list[dict[str, str]]],
    obs_vec: dict[str, np.ndarray],
    st_vec: dict[str, np.ndarray],
    per_conv: dict[str, dict[str, Any]],
    threshold: float,
) -> dict[str, Any]:
    covered: dict[str, list[float]] = defaultdict(list)
    precise_by_type: dict[str, list[float]] = defaultdict(list)
    for cid in conv_ids:
        sims = _sims(obs_vec[cid], st_vec[cid])
        mask = _session_mask(obs[cid], per_conv[cid])
        own = np.where(mask, sims, -1.0)
        for i, o in enumerate(obs[cid]):
            hit = float(own.shape[1] > 0 and own[i].max() >= threshold)
            covered["overall"].append(hit)
            covered[o["speaker"]].append(hit)
        if not own.shape[1]:
            continue
        best = own.max(axis=0) if own.shape[0] else np.full(own.shape[1], -1.0)
        by_file: dict[str, float] = defaultdict(lambda: -1.0)
        for j, (uri, _) in enumerate(per_conv[cid]["stmts"]):
            by_file[uri] = max(by_file[uri], float(best[j]))
        for uri, score in by_file.items():
            ok = float(score >= threshold)
            precise_by_type["overall"].append(ok)
            precise_by_type[memory_type(uri)].append(ok)
            if memory_type(uri) != "events (conversation)":
                precise_by_type["without conversation events"].append(ok)
    return {
        "overall": {
            "coverage": _mean(covered["overall"]),
            "coverage_user": _mean(covered["user"]),
            "coverage_assistant": _mean(covered["assistant"]),
            "observations": len(covered["overall"]),
            "precision": _mean(precise_by_type["overall"]),
            "precision_without_conversation_events": _mean(
                precise_by_type["without conversation events"]
            ),
            "files": len(precise_by_type["overall"]),
        },
        "precision_by_type": {
            k: {"precision": _mean(v), "files": len(v)} for k, v in sorted(precise_by_type.items())
        },
    }


def _mean(values: list[float]) -> float:
    return float(sum(values) / len(values)) if values else 0.0


def render(result: dict[str, Any]) -> str:
    cov = result["coverage"]
    o = cov["overall"]
    lines = [
        "## 1d. LoCoMo memory benchmark (`bench/memory_bench.py`)",
        "",
        f"Run {result['run_at']} on {result['conversations']} dev conversations "
        f"({result['sessions']} sessions, {result['messages']} messages) with the "
        "**offline rule extractor: no LLM endpoint was configured**, so there are no "
        "LLM-extractor numbers. Feed + extraction took "
        f"{result['feed_s']:.0f}s; commit tasks {result['task_status']}.",
        "",
        f"Memory files: {sum(result['files_by_type'].values())} "
        f"({', '.join(f'{k} {v}' for k, v in sorted(result['files_by_type'].items()))}); "
        f"{result['statements']} statements.",
        "",
        "**(a) Observations stated by a memory.** An observation of session n is covered "
        "when a memory whose provenance includes session n has a statement with cosine "
        "similarity (bundled MiniLM) >= "
        f"**T = {cov['threshold']:.3f}**: the 95th percentile of each observation's best "
        "similarity against the same conversation's memories from other sessions only "
        f"({cov['negatives']} observations; a 5% false-match rate, with the speakers' names "
        "shared by both sides). Speaker B is fed in the assistant role, whose messages the "
        "extractor never turns into memories: its coverage is the floor of chance and "
        "conversation-level quotes. (A first calibration against *other conversations'* "
        "memories gave T = 0.41 and coverage 0.73, with speaker B above speaker A: "
        "impossible for an extractor that reads only A, so names and topics were "
        "carrying the match; that calibration was dropped.)",
        "",
        "| observations | coverage | coverage, speaker A (user) | coverage, speaker B "
        "(assistant role) | memory files | precision | precision without per-archive "
        "conversation events |",
        "|---|---|---|---|---|---|---|",
        f"| {o['observations']} | {o['coverage']:.3f} | {o['coverage_user']:.3f} | "
        f"{o['coverage_assistant']:.3f} | {o['files']} | {o['precision']:.3f} | "
        f"{o['precision_without_conversation_events']:.3f} |",
        "",
        "Coverage and precision at fixed thresholds (for comparison):",
        "",
        "| threshold | coverage | coverage (user) | precision |",
        "|---|---|---|---|",
    ]
    for t, row in cov["at_fixed"].items():
        lines.append(
            f"| {t} | {row['coverage']:.3f} | {row['coverage_user']:.3f} | {row['precision']:.3f} |"
        )
    lines += [
        "",
        "Precision by memory type (at T):",
        "",
        "| type | files | precision |",
        "|---|---|---|",
    ]
    for name, row in cov["precision_by_type"].items():
        if name in {"overall", "without conversation events"}:
            continue
        lines.append(f"| {name} | {row['files']} | {row['precision']:.3f} |")
    ret = result["retrieval"]
    lines += [
        "",
        "**(b) Memory-path retrieval.** `find` over `viking://user/<conversation>/"
        "memories`, limit 10; a hit counts when its provenance frontmatter names a "
        "message of an evidence turn (every returned hit holds its rank). Resource-path "
        "numbers for comparison are the `find` rows of section 1 (one file per turn; "
        "there recall@k is the share of evidence turns in the top k). The offline "
        "extractor keeps few of LoCoMo's chatty facts (speaker A coverage above), so "
        "most questions have no memory to find: the memory path complements the "
        "archived sessions, it does not replace them.",
        "",
        "| category | questions | memory recall@5 | memory recall@10 |",
        "|---|---|---|---|",
    ]
    for name, row in ret.items():
        lines.append(
            f"| {name} | {int(row.get('n', row.get('questions', 0)))} | "
            f"{row['recall@5']:.3f} | {row['recall@10']:.3f} |"
        )
    return "\n".join(lines) + "\n"


def reused_server(workdir: Path) -> Any:
    """`skald serve` on the data a previous run fed (the same command as `skald_server`)."""
    from bench.common import REPO_ROOT, ServerProcess, free_port

    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "skald.cli",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--data-dir",
        str(workdir / "skald-data"),
    ]
    return ServerProcess(
        "skald",
        cmd,
        port,
        workdir / "skald-server.log",
        env={"SKALD_BACKEND": "local"},
        cwd=REPO_ROOT,
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--conversations", type=int, default=None, help="first N conversations")
    p.add_argument("--no-write", action="store_true", help="do not touch bench/RESULTS.md")
    p.add_argument(
        "--reuse",
        action="store_true",
        help="evaluate the data fed by the previous run (bench/out/memwork)",
    )
    args = p.parse_args()
    path = locomo.default_locomo_path(Path(__file__).resolve().parent.parent)
    data = locomo.load_locomo(path, limit_conversations=args.conversations)
    obs = observations(path, {c.sample_id for c in data.conversations})
    previous: dict[str, Any] = {}
    if args.reuse:
        previous = json.loads((OUT_DIR / "memory_bench.json").read_text())
        srv = reused_server(OUT_DIR / "memwork")
    else:
        srv = skald_server(OUT_DIR / "memwork")
    srv.start()
    try:
        t0 = time.perf_counter()
        status: dict[str, int] = defaultdict(int)
        for conv in data.conversations if not args.reuse else []:
            c = client(srv.url, ACCOUNT, conv.sample_id)
            for task in locomo.feed_conversation(c, conv).values():
                status[str(task.get("status"))] += 1
            c.close()
            log(f"  {conv.sample_id}: fed")
        feed_s = previous.get("feed_s", time.perf_counter() - t0)
        status = previous.get("task_status", status)
        result = evaluate((5, 10), data, obs, srv.url)
    finally:
        srv.stop()
    result.update(
        run_at=previous.get("run_at") or time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        evaluated_at=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        feed_s=feed_s,
        task_status=dict(status),
        conversations=len(data.conversations),
        sessions=sum(len(c.sessions) for c in data.conversations),
        messages=sum(len(t) for c in data.conversations for t in c.sessions.values()),
    )
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    (OUT_DIR / "memory_bench.json").write_text(json.dumps(result, indent=2))
    section = render(result)
    print(section)
    if not args.no_write:
        write_section(Path(__file__).resolve().parent / "RESULTS.md", "memory-bench", section)


if __name__ == "__main__":
    main()
