"""Operational rules: records, health, metering and the budgets of long work.

- audit.py: audit records, their actions and the console's filters
- consistency.py: drift between storage and the search index
- quiescence.py: when a set of job queues may be called idle
- route_stats.py: per-route request totals kept in process
- status_tables.py: the observer's plain-text status tables
- usage.py: the language model's token usage, metered per unit of work
- time_budget.py: when a long job hands the rest of its work to a new job
- scan_budget.py: how much a whole-tree scan (grep) may read
- fairness.py: whose job a job is, its message group, per-account worker caps
"""

__all__ = [
    "audit",
    "consistency",
    "fairness",
    "quiescence",
    "route_stats",
    "scan_budget",
    "status_tables",
    "time_budget",
    "usage",
]
