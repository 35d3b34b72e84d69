"""Skald: a context database for AI agents.

Dependencies point inward: api, jobs and cli -> services -> ports <- adapters, with domain at
the centre (docs/architecture.md has the module map).

- domain/: pure rules, no I/O
- ports/: the Protocols the services need
- services/: the use cases, on the ports only
- adapters/: the ports implemented for the local and the AWS backends
- api/: the FastAPI app and its routers, the authorizer, the MCP endpoint
- jobs/: the job handlers, shared by the worker Lambdas and `skald serve`'s threads
- compose/: one composition of adapters and services per entry point
- cli/: the `skald` command
- catalog.py: the deployable parts: workers (queue, job kinds, function), functions, resources
- workers.py: the catalogue's workers: each a queue, its job kinds and its function's uses
- resource_access.py: the resources a function uses, their access levels, the bucket's
  system objects
- sizes.py: memory and timeout of each function, generated from measurements
- config.py: the settings (SKALD_*)
"""

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "adapters",
    "api",
    "catalog",
    "cli",
    "compose",
    "config",
    "domain",
    "jobs",
    "ports",
    "resource_access",
    "services",
    "sizes",
    "workers",
]
