"""Job handlers: pure functions of (the services they need, job payload), run by local
worker threads and by the SQS worker Lambdas alike. One module per catalogue worker, named as
the worker, whose `JOBS` maps each of its kinds to its handlers.

- registry.py: the handlers of each job kind, from its worker's module; old kinds' aliases
- semantic.py: index changed files, drop removed ones, refresh sidecars
- memory.py: commit phase 2 (extract memories from an archive)
- autocommit.py: the idle auto-commit, the sweep of half-done commits
- fetch.py: a remote source, or an upload too large for a request, into its reserved root;
  the due watches
- purge.py: what a removed user or account owned; the sweep of lost purges
- lambda_workers.py: the worker Lambdas: SQS batches and schedules to the handlers
- deadline.py: the deadline of the job running in this thread
"""

__all__ = [
    "autocommit",
    "deadline",
    "fetch",
    "lambda_workers",
    "memory",
    "purge",
    "registry",
    "semantic",
]
