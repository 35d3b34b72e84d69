"""Intent planning: a session's recent messages and the current request turned by the LLM
into at most five search queries (search's list mode runs each of them)."""

from __future__ import annotations

import json
import logging

from skald.domain.errors import QuotaExceeded
from skald.domain.metering.subject import Purpose, purpose
from skald.ports import LLM, ChatMessage
from skald.services.retrieval.request import CONTEXT_TYPES
from skald.services.retrieval.results import PlannedQuery, QueryPlan

log = logging.getLogger("skald.retrieval")


def session_intent(
    llm: LLM, recent: list[str], query: str
) -> tuple[list[str] | None, QueryPlan | None]:
    """The queries to run for `query` after the `recent` messages (`query` first when it is
    not empty), and the plan shown to the caller; (None, None) when the LLM fails: the raw
    query is always a valid plan."""
    schema = {
        "type": "object",
        "properties": {
            "queries": {
                "type": "array",
                "maxItems": 5,
                "items": {
                    "type": "object",
                    "properties": {
                        "query": {"type": "string"},
                        "context_type": {"type": "string", "enum": list(CONTEXT_TYPES)},
                    },
                    "required": ["query"],
                },
            }
        },
        "required": ["queries"],
    }
    prompt = (
        "Recent conversation:\n"
        + "\n".join(recent[-10:])
        + f"\n\nCurrent request: {query}\n\nWrite 0 to 5 short search queries "
        "that would retrieve what the assistant needs. Answer in JSON."
    )
    try:
        with purpose(Purpose.QUERY_REWRITE):
            raw = llm.complete(
                [ChatMessage("user", prompt)], json_schema=schema, max_tokens=400, timeout_s=15
            )
        data = json.loads(raw)
        items = [
            q
            for q in data.get("queries", [])
            if isinstance(q, dict) and str(q.get("query", "")).strip()
        ][:5]
    except QuotaExceeded:
        raise
    except Exception as exc:  # the raw query is always a valid plan
        log.warning("intent planning failed: %s", exc)
        return None, None
    queries = [str(q["query"]).strip() for q in items]
    if query.strip() and query not in queries:
        queries.insert(0, query)
    plan = QueryPlan(
        [
            PlannedQuery(
                query=str(q["query"]),
                context_type=q.get("context_type")
                if isinstance(q.get("context_type"), str)
                else None,
            )
            for q in items
        ],
        "session intent",
    )
    return queries or None, plan
