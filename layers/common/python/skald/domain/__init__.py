"""Pure rules, no I/O: nothing here imports an adapter, a service, a framework or an SDK.

- paths/: viking:// URIs, the names the product manages, preset directories, tags, summaries
- access/: who calls (Identity), what they may see (visibility), the call's tenant
- text/: what is text, token estimates, formats, parsed text, sections, outlines, edits
- memory/: memory types and their revision, memory stats, message parts, tool results
- sources/: remote pages and repositories (and the network rules of fetching them), skill
  packages, .ovpack packs
- retrieval/: filters, score fusion, crowding, sequences, the context budget
- ops/: audit records, consistency, queue quiescence, route stats, status tables, budgets of
  long work, LLM usage metering
- errors.py: SkaldError and its codes, which the HTTP edge turns into statuses
- timefmt.py: times on the wire (ISO-8601 UTC) and since/until windows
- wire.py: how a result dataclass's optional keys are written (OMIT_NONE)
"""

__all__ = [
    "access",
    "errors",
    "memory",
    "ops",
    "paths",
    "retrieval",
    "sources",
    "text",
    "timefmt",
    "wire",
]
