"""Retrieval quality on LoCoMo through the public HTTP API (any OpenViking-compatible server).

Two paths:

1. Resources: every turn is one file `viking://resources/locomo/<sample>/session_NN/<D3_5>.md`
   holding the speaker, the session date and the text, so the turn's `dia_id` is recoverable
   from the URI. Each question of categories 1-4 is asked through find (semantic, hybrid) and
   search (keywords), scoped to its conversation and to level 2 (files only). Metrics over the
   top 20 distinct files: recall@5/10/20 (fraction of evidence turns found), nDCG@10 (binary
   gains) and MRR (first evidence turn in the top 20; 0 when none).

2. Memories: each conversation is one user; each LoCoMo session is one server session whose
   messages carry role user (speaker_a) / assistant (speaker_b), the session date as
   created_at and the dia_id as turn_id; it is committed and its extraction task waited for.
   Questions go through find with context_type=memory scoped to the user's space
   (`viking://user/<user>`: the memories and the session archives). See `MemoryProvenance`
   for how hits are mapped back to LoCoMo sessions.
"""

from __future__ import annotations

import math
import re
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from openviking_sdk import SyncHTTPClient

from bench.common import log, merged_hits, percentiles, wait_drained

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
ROOT = "viking://resources/locomo"
DEPTH = 20  # retrieved list length; recall@20 and MRR use all of it
KS = (5, 10, 20)
_EVIDENCE = re.compile(r"D:?(\d+):(\d+)")
_TURN_FILE = re.compile(r"/session_(\d+)/D(\d+)_(\d+)\.md$")


@dataclass(frozen=True)
class Turn:
    sample_id: str
    session: int
    dia_id: str
    speaker: str
    text: str
    date: str  # as LoCoMo writes it: "1:56 pm on 8 May, 2023"
    created_at: str  # ISO 8601, UTC

    @property
    def uri(self) -> str:
        return (
            f"{ROOT}/{self.sample_id}/session_{self.session:02d}/{self.dia_id.replace(':', '_')}.md"
        )

    def file_text(self) -> str:
        return f"Speaker: {self.speaker}\nDate: {self.date}\n\n{self.speaker}: {self.text}\n"


@dataclass(frozen=True)
class Question:
    sample_id: str
    text: str
    category: int
    evidence: tuple[str, ...]

    @property
    def evidence_sessions(self) -> frozenset[int]:
        return frozenset(int(e[1:].split(":")[0]) for e in self.evidence)


@dataclass
class Conversation:
    sample_id: str
    speaker_a: str
    speaker_b: str
    sessions: dict[int, list[Turn]] = field(default_factory=dict)


@dataclass
class LoCoMo:
    conversations: list[Conversation]
    questions: list[Question]
    dropped_evidence: list[str]  # ids that name no turn of the conversation
    dropped_questions: int  # categories 1-4 left without any valid evidence

    @property
    def turns(self) -> list[Turn]:
        return [t for c in self.conversations for s in c.sessions.values() for t in s]


def default_locomo_path(repo_root: Path) -> Path:
    # The data set is shared read-only beside the repository and never copied into it.
    return (repo_root / ".." / "shared" / "data" / "locomo" / "locomo10-dev.json").resolve()


def _parse_date(raw: str) -> datetime:
    return datetime.strptime(raw.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def _turn_text(raw: dict[str, Any]) -> str:
    text = str(raw.get("text") or "").strip()
    caption = raw.get("blip_caption")
    # Shared photos are part of the turn: LoCoMo questions ask about them.
    if caption:
        text = f"{text} [shares a photo: {caption}]".strip()
    return text


def _normalise_evidence(values: Iterable[str]) -> list[str]:
    out: list[str] = []
    for value in values:
        # The data has "D8:6; D9:17" and "D:11:26" forms beside the plain "D3:5".
        for m in _EVIDENCE.finditer(str(value)):
            dia = f"D{int(m.group(1))}:{int(m.group(2))}"
            if dia not in out:
                out.append(dia)
    return out


def load_locomo(path: Path, *, limit_conversations: int | None = None) -> LoCoMo:
    import json

    raw = json.loads(path.read_text())
    conversations: list[Conversation] = []
    questions: list[Question] = []
    dropped: list[str] = []
    dropped_q = 0
    for sample in raw[:limit_conversations]:
        conv_raw = sample["conversation"]
        conv = Conversation(sample["sample_id"], conv_raw["speaker_a"], conv_raw["speaker_b"])
        for key, value in conv_raw.items():
            m = re.fullmatch(r"session_(\d+)", key)
            if not m or not isinstance(value, list):
                continue
            n = int(m.group(1))
            date = conv_raw.get(f"session_{n}_date_time", "")
            start = _parse_date(date)
            turns = []
            for i, t in enumerate(value):
                # Turns of a session get increasing times so their order survives sorting.
                at = (start + timedelta(seconds=30 * i)).strftime("%Y-%m-%dT%H:%M:%SZ")
                turns.append(
                    Turn(conv.sample_id, n, t["dia_id"], t["speaker"], _turn_text(t), date, at)
                )
            conv.sessions[n] = turns
        conv.sessions = dict(sorted(conv.sessions.items()))
        known = {t.dia_id for s in conv.sessions.values() for t in s}
        conversations.append(conv)
        for qa in sample["qa"]:
            cat = int(qa.get("category", 0))
            if cat not in CATEGORIES:
                continue
            ev = _normalise_evidence(qa.get("evidence") or [])
            dropped.extend(f"{conv.sample_id}:{e}" for e in ev if e not in known)
            ev = [e for e in ev if e in known]
            if not ev:
                dropped_q += 1
                continue
            questions.append(Question(conv.sample_id, str(qa["question"]), cat, tuple(ev)))
    return LoCoMo(conversations, questions, dropped, dropped_q)


def dia_of_uri(uri: str) -> str | None:
    m = _TURN_FILE.search(uri)
    return f"D{int(m.group(2))}:{int(m.group(3))}" if m else None


# ------------------------------------------------------------------------------ metrics


def ranking_metrics(ranked: list[str], evidence: Iterable[str]) -> dict[str, float]:
    """recall@k, nDCG@10 and MRR of one ranked list of distinct dia_ids."""
    relevant = set(evidence)
    out: dict[str, float] = {}
    for k in KS:
        out[f"recall@{k}"] = len(relevant & set(ranked[:k])) / len(relevant)
    dcg = sum(1.0 / math.log2(i + 2) for i, d in enumerate(ranked[:10]) if d in relevant)
    idcg = sum(1.0 / math.log2(i + 2) for i in range(min(len(relevant), 10)))
    out["ndcg@10"] = dcg / idcg
    first = next((i for i, d in enumerate(ranked[:DEPTH]) if d in relevant), None)
    out["mrr"] = 0.0 if first is None else 1.0 / (first + 1)
    return out


def aggregate(rows: list[dict[str, Any]], metric_names: Iterable[str]) -> dict[str, Any]:
    """Means per category and overall (every question weighs the same)."""
    names = list(metric_names)
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[CATEGORIES[row["category"]]].append(row)
        groups["overall"].append(row)
    out: dict[str, Any] = {}
    for label in [*CATEGORIES.values(), "overall"]:
        items = groups.get(label, [])
        out[label] = {
            "n": len(items),
            **{m: (sum(r[m] for r in items) / len(items)) if items else math.nan for m in names},
        }
    return out


# ------------------------------------------------------------------------------ resources


def ingest_resources(c: SyncHTTPClient, data: LoCoMo, batch_size: int = 200) -> dict[str, Any]:
    """Writes every turn as one file; returns timings. Processing is awaited at the end."""
    turns = data.turns
    t0 = time.perf_counter()
    c.mkdir(ROOT)
    for conv in data.conversations:
        root = f"{ROOT}/{conv.sample_id}"
        c.mkdir(root)
        conv_turns = [t for s in conv.sessions.values() for t in s]
        for start in range(0, len(conv_turns), batch_size):
            ops = [
                {"uri": t.uri, "content": t.file_text()}
                for t in conv_turns[start : start + batch_size]
            ]
            c.batch_write(root, ops, wait=False)
    written = time.perf_counter() - t0
    wait_drained(c)
    total = time.perf_counter() - t0
    return {
        "files": len(turns),
        "write_s": written,
        "total_s": total,
        "files_per_s": len(turns) / total,
    }


Asker = Callable[[SyncHTTPClient, str, str], dict[str, Any]]


def resource_askers(peer: bool) -> dict[str, Asker]:
    """The retrieval modes to evaluate; a peer without Skald's extensions gets its default."""

    def find_with(search_type: str | None) -> Asker:
        def ask(c: SyncHTTPClient, query: str, scope: str) -> dict[str, Any]:
            opts: dict[str, Any] = {"level": 2}
            if search_type is not None:
                opts["extra"] = {"search_type": search_type}
            result: dict[str, Any] = c.find(query, target_uri=scope, limit=DEPTH, options=opts)
            return result

        return ask

    def keywords(c: SyncHTTPClient, query: str, scope: str) -> dict[str, Any]:
        result: dict[str, Any] = c.search(
            query, target_uri=scope, limit=DEPTH, options={"level": 2, "search_type": "keywords"}
        )
        return result

    if peer:
        # OpenViking's find is dense-only and rejects search_type (extra="forbid").
        return {"find (default)": find_with(None), "search keywords": keywords}
    return {
        "find semantic": find_with("semantic"),
        "find hybrid": find_with("hybrid"),
        "search keywords": keywords,
    }


def evaluate_resources(c: SyncHTTPClient, data: LoCoMo, askers: dict[str, Asker]) -> dict[str, Any]:
    metric_names = [*(f"recall@{k}" for k in KS), "ndcg@10", "mrr"]
    out: dict[str, Any] = {}
    for mode, ask in askers.items():
        rows: list[dict[str, Any]] = []
        rankings: list[list[str]] = []  # per question, kept for the fusion analysis
        latencies: list[float] = []
        error: str | None = None
        for q in data.questions:
            scope = f"{ROOT}/{q.sample_id}"
            t0 = time.perf_counter()
            try:
                result = ask(c, q.text, scope)
            except Exception as exc:  # e.g. a peer that lacks keyword search
                error = f"{type(exc).__name__}: {exc}"
                break
            latencies.append((time.perf_counter() - t0) * 1000)
            ranked: list[str] = []
            for hit in merged_hits(result):
                dia = dia_of_uri(str(hit.get("uri", "")))
                if dia is not None and dia not in ranked:
                    ranked.append(dia)
            rows.append({"category": q.category, **ranking_metrics(ranked, q.evidence)})
            rankings.append(ranked)
        if error is not None:
            log(f"  {mode}: not available: {error}")
            out[mode] = {"error": error}
            continue
        out[mode] = {
            "metrics": aggregate(rows, metric_names),
            "latency_ms": percentiles(latencies),
            "ranked": rankings,
        }
        overall = out[mode]["metrics"]["overall"]
        log(
            f"  {mode}: recall@10={overall['recall@10']:.3f} ndcg@10={overall['ndcg@10']:.3f} "
            f"mrr={overall['mrr']:.3f} (n={overall['n']})"
        )
    return out


def fusion_analysis(
    data: LoCoMo,
    results: dict[str, Any],
    dense: str = "find semantic",
    lexical: str = "search keywords",
    hybrid: str = "find hybrid",
    rrf_k: int = 60,
) -> dict[str, Any]:
    """How much of the dense and keyword rankings' complementarity the server's hybrid keeps.

    - ceiling: recall of the union of the dense top 10 and the keyword top 10 (20 items):
      what a perfect fusion could bring into a top 20, an upper bound for a top 10.
    - client RRF: reciprocal rank fusion (k=60) of the two top-20 lists, done here; if it beats
      the server's hybrid, the server's fusion loses information.
    - per question: where hybrid's recall@10 is above / below the dense one.
    """
    if not all("ranked" in results.get(m, {}) for m in (dense, lexical, hybrid)):
        return {}
    d_r, l_r, h_r = (results[m]["ranked"] for m in (dense, lexical, hybrid))
    rows: list[dict[str, Any]] = []
    better = worse = 0
    for q, d, lx, h in zip(data.questions, d_r, l_r, h_r, strict=True):
        ev = set(q.evidence)
        scores: dict[str, float] = defaultdict(float)
        for ranking in (d, lx):
            for i, dia in enumerate(ranking):
                scores[dia] += 1.0 / (rrf_k + i + 1)
        rrf = sorted(scores, key=lambda x: -scores[x])
        union = set(d[:10]) | set(lx[:10])
        h10 = ranking_metrics(h, ev)["recall@10"]
        d10 = ranking_metrics(d, ev)["recall@10"]
        better += h10 > d10
        worse += h10 < d10
        rows.append(
            {
                "category": q.category,
                "client_rrf_recall@10": ranking_metrics(rrf, ev)["recall@10"],
                "union_ceiling_recall@20": len(ev & union) / len(ev),
                "dense_or_keywords_best_recall@10": max(d10, ranking_metrics(lx, ev)["recall@10"]),
            }
        )
    names = ["client_rrf_recall@10", "union_ceiling_recall@20", "dense_or_keywords_best_recall@10"]
    return {
        "metrics": aggregate(rows, names),
        "hybrid_better_than_dense": better,
        "hybrid_worse_than_dense": worse,
        "questions": len(rows),
    }


# ------------------------------------------------------------------------------ memories


def session_id(sample_id: str, n: int) -> str:
    return f"{sample_id}-s{n:02d}"


def _wait_task(c: SyncHTTPClient, task_id: str, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    delay = 0.02
    while True:
        task = c.get_task(task_id) or {}
        if task.get("status") in {"completed", "failed", "cancelled"}:
            return task
        if time.monotonic() > deadline:
            return {**task, "status": "timeout"}
        time.sleep(delay)
        # a tight cap: a slow poll would add idle time to every one of ~130 commits
        delay = min(delay * 1.5, 0.1)


def feed_conversation(
    c: SyncHTTPClient, conv: Conversation, *, timeout_s: float = 600.0
) -> dict[int, dict[str, Any]]:
    """One server session per LoCoMo session, committed in order; each extraction is awaited
    before the next session starts, as it would be for conversations days apart."""
    tasks: dict[int, dict[str, Any]] = {}
    for n, turns in conv.sessions.items():
        sid = session_id(conv.sample_id, n)
        c.create_session(sid)
        messages = [
            {
                "role": "user" if t.speaker == conv.speaker_a else "assistant",
                "content": t.text,
                "created_at": t.created_at,
                "turn_id": t.dia_id,
            }
            for t in turns
        ]
        for start in range(0, len(messages), 100):  # the batch route takes at most 100
            c.batch_add_messages(sid, messages[start : start + 100])
        commit = c.commit_session(sid)
        task_id = commit.get("task_id")
        tasks[n] = (
            _wait_task(c, task_id, timeout_s)
            if task_id
            else {"status": commit.get("status", "unknown")}
        )
    return tasks


_FIELDS = re.compile(r"<!-- MEMORY_FIELDS\n(.*?)\n-->", re.DOTALL)


class MemoryProvenance:
    """Maps a memory-find hit to the LoCoMo sessions its content came from.

    - Anything under `.../sessions/<sample>-sNN/` (archives, their summaries) comes from
      session NN.
    - A memory file comes from every session whose extraction wrote it: the union of (a) the
      archives' `memory_diff.json` (adds and updates name the file) and (b) the file's own
      MEMORY_FIELDS trailer, read with `read_raw`: `source_message_ids` (message ids ->
      session, through the archives' message lists) and `source_extraction_id` (-> the archive
      whose diff carries that id). (b) alone would under-count: an upserted file only keeps
      the ids of its latest write although its text merges earlier sessions.
    - A directory summary (`.abstract.md` / `.overview.md` under memories/) comes from the
      memory files directly inside that directory: it is built from their abstracts.
      Summaries of directories that hold only directories map to nothing (count as misses).
    """

    def __init__(self, c: SyncHTTPClient, conv: Conversation, user: str) -> None:
        self.c = c
        self.conv = conv
        self.user = user
        self.message_session: dict[str, int] = {}
        self.extraction_session: dict[str, int] = {}
        self.file_sessions: dict[str, set[int]] = defaultdict(set)
        self._fields_cache: dict[str, set[int]] = {}
        self.read_errors = 0

    def load(self) -> None:
        for n in self.conv.sessions:
            sid = session_id(self.conv.sample_id, n)
            try:
                archive = self.c.get_session_archive(sid, "archive_001")
            except Exception:
                continue
            for msg in archive.get("messages") or []:
                if msg.get("id"):
                    self.message_session[str(msg["id"])] = n
            diff_uri = (
                f"viking://user/{self.user}/sessions/{sid}/history/archive_001/memory_diff.json"
            )
            try:
                import json

                diff = json.loads(self.c.read(diff_uri))
            except Exception:
                continue
            if diff.get("extraction_id"):
                self.extraction_session[str(diff["extraction_id"])] = n
            ops = diff.get("operations") or {}
            for entry in [*(ops.get("adds") or []), *(ops.get("updates") or [])]:
                self.file_sessions[str(entry.get("uri"))].add(n)

    def _from_fields(self, uri: str) -> set[int]:
        if uri in self._fields_cache:
            return self._fields_cache[uri]
        found: set[int] = set()
        try:
            raw = self.c.read_raw(uri)
        except Exception:
            self.read_errors += 1
            raw = ""
        m = _FIELDS.search(raw)
        if m:
            import json

            try:
                fields = json.loads(m.group(1))
            except ValueError:
                fields = {}
            for mid in fields.get("source_message_ids") or []:
                if mid in self.message_session:
                    found.add(self.message_session[mid])
            ext = fields.get("source_extraction_id")
            if ext in self.extraction_session:
                found.add(self.extraction_session[ext])
        self._fields_cache[uri] = found
        return found

    def sessions_of(self, uri: str) -> set[int]:
        m = re.search(rf"/sessions/{re.escape(self.conv.sample_id)}-s(\d+)(/|$)", uri)
        if m:
            return {int(m.group(1))}
        name = uri.rsplit("/", 1)[-1]
        if name in {".abstract.md", ".overview.md"}:
            parent = uri.rsplit("/", 1)[0]
            out: set[int] = set()
            for f, sessions in self.file_sessions.items():
                if f.rsplit("/", 1)[0] == parent:
                    out |= sessions
            return out
        if "/memories/" in uri:
            return set(self.file_sessions.get(uri, set())) | self._from_fields(uri)
        return set()


def _chance_hit(n_sessions: int, evidence: int, covered: int) -> float:
    """P(a random set of `covered` sessions out of `n_sessions` holds an evidence session)."""
    if covered <= 0:
        return 0.0
    if covered > n_sessions - evidence:
        return 1.0
    return 1.0 - math.comb(n_sessions - evidence, covered) / math.comb(n_sessions, covered)


def evaluate_memories(
    make_client: Callable[[str], SyncHTTPClient],
    data: LoCoMo,
    *,
    k: int = 10,
    timeout_s: float = 600.0,
    parallel: int = 2,
) -> dict[str, Any]:
    from concurrent.futures import ThreadPoolExecutor

    rows: list[dict[str, Any]] = []
    feed: dict[str, Any] = {}
    latencies: list[float] = []
    read_errors = 0
    # One user per conversation: its memories are its own. Conversations are independent
    # users, so `parallel` of them are fed at once (the server has 2 worker threads); the
    # sessions of one conversation stay strictly sequential.
    clients = {conv.sample_id: make_client(conv.sample_id) for conv in data.conversations}

    def feed_one(conv: Conversation) -> None:
        tasks = feed_conversation(clients[conv.sample_id], conv, timeout_s=timeout_s)
        statuses: dict[str, int] = defaultdict(int)
        for task in tasks.values():
            statuses[str(task.get("status"))] += 1
        errors = sorted({str(t.get("error")) for t in tasks.values() if t.get("error")})
        feed[conv.sample_id] = {
            "sessions": len(tasks),
            "task_status": dict(statuses),
            "errors": errors[:3],
        }
        log(f"  {conv.sample_id}: {len(tasks)} sessions committed, tasks {dict(statuses)}")

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        list(pool.map(feed_one, data.conversations))
    t_feed = time.perf_counter() - t0
    # Questions only once every conversation is in: find latencies see no ingest load.
    for conv in data.conversations:
        user = conv.sample_id
        c = clients[user]
        prov = MemoryProvenance(c, conv, user)
        prov.load()
        for q in (q for q in data.questions if q.sample_id == conv.sample_id):
            t1 = time.perf_counter()
            result = c.find(
                q.text,
                target_uri=f"viking://user/{user}",
                limit=k,
                options={"context_type": "memory"},
            )
            latencies.append((time.perf_counter() - t1) * 1000)
            covered: set[int] = set()
            mapped = 0
            for hit in merged_hits(result)[:k]:
                sessions = prov.sessions_of(str(hit.get("uri", "")))
                mapped += bool(sessions)
                covered |= sessions
            ev = q.evidence_sessions
            rows.append(
                {
                    "category": q.category,
                    f"session_recall@{k}": float(bool(covered & ev)),
                    f"session_coverage@{k}": len(covered & ev) / len(ev),
                    f"chance@{k}": _chance_hit(len(conv.sessions), len(ev), len(covered)),
                    "sessions_covered": float(len(covered)),
                    "mapped_hits": float(mapped),
                }
            )
        read_errors += prov.read_errors
        c.close()
    names = [
        f"session_recall@{k}",
        f"session_coverage@{k}",
        f"chance@{k}",
        "sessions_covered",
        "mapped_hits",
    ]
    metrics = aggregate(rows, names)
    overall = metrics["overall"]
    log(
        f"  memory find: session_recall@{k}={overall[f'session_recall@{k}']:.3f} "
        f"(chance {overall[f'chance@{k}']:.3f}, {overall['sessions_covered']:.1f} sessions "
        f"covered per question)"
    )
    return {
        "metrics": metrics,
        "feed": feed,
        "feed_s": t_feed,
        "latency_ms": percentiles(latencies),
        "read_errors": read_errors,
    }
