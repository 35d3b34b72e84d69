"""Job handlers: pure functions of (the services they need, job payload), run by local
worker threads and by the SQS worker Lambdas alike. `skald.catalog` says which runs which
kind.

- registry.py: the handler of each job kind, from the catalogue
- semantic.py: index changed files, drop removed ones, refresh sidecars
- memory.py: commit phase 2 (extract memories), the idle auto-commit, the commit sweeper
- fetch.py: a remote source into its reserved root; the due watches
- purge.py: what a removed user or account owned; the sweep of lost purges
- lambda_workers.py: the worker Lambdas: SQS batches and schedules to the handlers
- deadline.py: the deadline of the job running in this thread
"""

__all__ = ["deadline", "fetch", "lambda_workers", "memory", "purge", "registry", "semantic"]
