"""The LLM steps of context assembly: session-aware query expansion (the prompt and the
parsing of its answer) and the optional rewrite of the assembled block into a cited digest.
Both are optional: without an LLM, or when it fails, the request still answers."""

from __future__ import annotations

import json
import logging
import re
import time
from typing import Any, Protocol

from skald.domain.errors import QuotaExceeded
from skald.domain.retrieval.context_budget import BudgetPlan
from skald.domain.text.tokens import estimate_tokens
from skald.ports import ChatMessage
from skald.services.context.entries import recall_key
from skald.services.context.request import ContextRequest
from skald.services.context.results import RewriteStatus, RewriteUsage

log = logging.getLogger("skald.context")

MAX_EXPANSIONS = 3
NO_RELEVANT = "NO_RELEVANT_MEMORY"
_BULLET = re.compile(r"^(?:[-*\u2022]|\d+[.)])\s+(.+)$")
EXPANSION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["queries"],
    "properties": {
        "queries": {"type": "array", "maxItems": MAX_EXPANSIONS, "items": {"type": "string"}}
    },
}


class LLMCall(Protocol):
    """The LLM under a deadline (ContextService._call_llm)."""

    def __call__(
        self,
        messages: list[ChatMessage],
        *,
        json_schema: dict[str, Any] | None,
        max_tokens: int,
        timeout_s: float,
    ) -> str: ...


def expansion_prompt(recent: list[str], query: str) -> list[ChatMessage]:
    """The chat asking for at most MAX_EXPANSIONS queries from the recent conversation."""
    return [
        ChatMessage(
            "system",
            "You help a retrieval system. From the recent conversation "
            "and the current request, write at most 3 short, self-contained "
            "search queries for what the assistant needs to know next. Answer "
            'in JSON: {"queries": ["..."]}.',
        ),
        ChatMessage(
            "user",
            "Recent conversation:\n" + "\n".join(recent)[-6000:] + f"\n\nCurrent request: {query}",
        ),
    ]


def parse_queries(answer: str, original: list[str]) -> list[str] | None:
    """The new queries of an expansion answer (none of `original`, at most MAX_EXPANSIONS);
    None when the answer is not the JSON asked for."""
    text = answer.strip()
    if text.startswith("```"):  # some models fence JSON even when asked not to
        text = text.strip("`").removeprefix("json").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return None
    items = data.get("queries") if isinstance(data, dict) else data
    if not isinstance(items, list):
        return None
    seen = {q.strip().lower() for q in original}
    out: list[str] = []
    for item in items:
        value = item.get("query") if isinstance(item, dict) else item
        if not isinstance(value, str) or not value.strip():
            continue
        query = " ".join(value.split())[:256]
        if query.lower() in seen:
            continue
        seen.add(query.lower())
        out.append(query)
        if len(out) == MAX_EXPANSIONS:
            break
    return out


def rewrite(
    req: ContextRequest, query: str, plan: BudgetPlan, call: LLMCall | None, timeout_s: float
) -> tuple[RewriteStatus, str, RewriteUsage | None]:
    """(status, digest, usage): the assembled block condensed into at most
    `rewrite_max_bullets` bullets, each citing an entry's URI."""
    skipped = _not_rewritten(req, plan, call)
    if skipped is not None or call is None:
        return skipped or RewriteStatus.SKIPPED, "", None
    system, user = _rewrite_prompt(req, query, plan)
    usage = RewriteUsage(input_tokens=estimate_tokens(system) + estimate_tokens(user))
    started = time.monotonic()
    try:
        answer = call(
            [ChatMessage("system", system), ChatMessage("user", user)],
            json_schema=None,
            max_tokens=min(req.max_tokens, 2048),
            timeout_s=timeout_s,
        )
    except QuotaExceeded:
        raise
    except TimeoutError:
        usage.elapsed_ms, usage.error = _elapsed_ms(started), "timeout"
        return RewriteStatus.FAILED, "", usage
    except Exception as exc:  # the rendered block stands on its own
        log.warning("context rewrite failed: %s", exc)
        usage.elapsed_ms, usage.error = _elapsed_ms(started), type(exc).__name__
        return RewriteStatus.FAILED, "", usage
    usage.elapsed_ms, usage.output_tokens = _elapsed_ms(started), estimate_tokens(answer)
    if answer.strip() == NO_RELEVANT:
        usage.digest_tokens = 0
        return RewriteStatus.NO_RELEVANT, "", usage
    bullets = cited_bullets(answer, plan, req.rewrite_max_bullets, req.max_tokens)
    if not bullets:
        usage.error, usage.digest_tokens = "no cited bullets", 0
        return RewriteStatus.FAILED, "", usage
    digest = "\n".join(bullets)
    usage.digest_tokens = estimate_tokens(digest)
    return RewriteStatus.OK, digest, usage


def _not_rewritten(
    req: ContextRequest, plan: BudgetPlan, call: LLMCall | None
) -> RewriteStatus | None:
    """Why no rewrite is attempted; None when one is."""
    if req.rewrite is False:
        return RewriteStatus.OFF
    if call is None:
        return RewriteStatus.UNAVAILABLE if req.rewrite is True else RewriteStatus.SKIPPED
    if not plan.entries:
        return RewriteStatus.SKIPPED
    if req.rewrite == "auto" and plan.used_tokens <= req.max_tokens / 2:
        return RewriteStatus.SKIPPED
    return None


def _rewrite_prompt(req: ContextRequest, query: str, plan: BudgetPlan) -> tuple[str, str]:
    n = req.rewrite_max_bullets
    system = (
        f"You condense retrieved context for an AI agent. Using only the <memory> "
        f"blocks given, write at most {n} bullet points with what matters for the "
        "query. Start each bullet with '- ' and end it with the URI it comes from "
        "in square brackets, e.g. [viking://resources/doc.md]. If nothing in the "
        f"blocks is relevant to the query, answer exactly {NO_RELEVANT}."
    )
    return system, f"Query: {query}\n\n{plan.rendered}"


def _elapsed_ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


def cited_bullets(answer: str, plan: BudgetPlan, most: int, max_tokens: int) -> list[str]:
    """The answer's bullets that cite an entry (at most `most`), whole bullets only, within
    `max_tokens`."""
    cites = {e.item.uri for e in plan.entries} | {recall_key(e.item.uri) for e in plan.entries}
    bullets: list[str] = []
    for line in answer.splitlines():
        m = _BULLET.match(line.strip())
        # a bullet that cites none of the entries is not grounded in them
        if m and any(uri in m.group(1) for uri in cites):
            bullets.append("- " + m.group(1).strip())
        if len(bullets) == most:
            break
    while bullets and estimate_tokens("\n".join(bullets)) > max_tokens:
        bullets.pop()  # whole bullets only: a digest is never cut mid-sentence
    return bullets
