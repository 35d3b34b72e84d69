"""Use cases, on the ports only: no adapter, framework or SDK is imported here.

- fs/: the viking:// tree of an account on its blob store (VikingFS), listing, parsed text
- ingest/: what goes into the tree and the index: writes, uploads, remote sources, watches,
  packs, and the semantic processing they queue
- retrieval/: find and search by meaning, grep and glob exactly
- context/: search mode "context": one budgeted block ready to inject
- sessions/: messages, the commit (archive, then memory extraction), tool results
- extraction/: the memory extractors (rule-based and LLM)
- skills/: agent skill packages, and an agent's one-step actions
- tenancy/: accounts, users, keys, the root key, removing tenants, the job gate
- operations/: observer, stats, consistency, the index inspector, admission (back-pressure)
- plans/: an account's plan, its request rate, the quotas checked before writes, its settings
- tasks.py: tasks, the client-visible record of background work (used by every package)
- audit.py: the audit trail of admin, security and destructive actions
- faults.py: crash points between the steps of a change (the crash tests arm them)
"""

__all__ = [
    "audit",
    "context",
    "extraction",
    "faults",
    "fs",
    "ingest",
    "operations",
    "plans",
    "retrieval",
    "sessions",
    "skills",
    "tasks",
    "tenancy",
]
