"""The places where the contract tests learn what each function is. One helper per question,
so that when the composition moves (one catalogue listing functions, routers, job kinds,
queues and environments) only this module is re-pointed:

- FUNCTIONS / routers_of(): which functions exist and which routers an HTTP function mounts
  (today `skald.api.app.*_ROUTERS`);
- entry_point(): the file and attribute Lambda runs for a function (today the `functions/*`
  modules, located through the CDK specs in `infra.functions` / `infra.workers`);
- function_construct(): the CDK construct of a function (today `stack.functions.*` and
  `stack.workers.functions`), hence its logical id and its role in the template;
- worker_queue(): the queue feeding a worker; job_kinds(): every job kind a worker may run.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skald import catalog
from tests.contract.cfn import Template

ROOT = Path(__file__).resolve().parents[2]

HTTP_FUNCTIONS = tuple(fn.name for fn in catalog.functions("http"))
AUTHORIZER = catalog.functions("authorizer")[0].name
WORKERS = tuple(fn.name for fn in catalog.functions("worker"))
SETUP = catalog.functions("setup")[0].name
# Deploy order: the setup trigger runs before the API serves anything.
FUNCTIONS = (SETUP, *HTTP_FUNCTIONS, AUTHORIZER, *WORKERS)


@dataclass(frozen=True)
class Route:
    function: str
    verb: str
    path: str  # FastAPI path template, e.g. /api/v1/sessions/{session_id}

    def sample_path(self) -> str:
        """A concrete path this route serves (parameters filled with plain segments)."""
        parts = []
        for part in self.path.split("/"):
            if part.startswith("{") and part.endswith("}"):
                part = "x/y" if part.endswith(":path}") else "x"
            parts.append(part)
        return "/".join(parts) or "/"


def routers_of(function: str) -> tuple[str, ...]:
    """SEAM: the routers an HTTP function mounts."""
    return catalog.function(function).routers


def routes_of(function: str) -> list[Route]:
    """Every (verb, path) the HTTP function serves, read from its FastAPI routers."""
    from fastapi.routing import APIRoute

    routes: list[Route] = []
    for name in routers_of(function):
        if name == "mcp":  # an endpoint, not a router: POST /mcp (skald.api.mcp)
            routes.append(Route(function, "POST", "/mcp"))
            continue
        router = importlib.import_module(f"skald.api.routers.{name}").router
        for route in router.routes:
            if isinstance(route, APIRoute):
                for verb in sorted((route.methods or set()) - {"HEAD", "OPTIONS"}):
                    routes.append(Route(function, verb, route.path))
    return routes


def public_paths() -> frozenset[str]:
    """The only paths served without an API key (OpenViking's probes)."""
    return frozenset(p for fn in catalog.functions("http") for p in fn.public_paths)


def entry_point(function: str) -> tuple[Path, str]:
    """SEAM: (file, attribute) of the Lambda handler of `function`."""
    fn = catalog.function(function)
    module, _, attribute = fn.handler.rpartition(".")
    return ROOT / "functions" / fn.code / f"{module}.py", attribute


def function_construct(stack: Any, function: str) -> Any:
    """SEAM: the CDK construct of `function` in the synthesised stack."""
    return stack.functions.by_name[function]


def function_ids(stack: Any) -> dict[str, str]:
    """function key -> logical id of its AWS::Lambda::Function."""
    return {
        f: stack.get_logical_id(function_construct(stack, f).node.default_child) for f in FUNCTIONS
    }


def role_of(template: Template, function_id: str) -> str:
    """The logical id of the execution role of a function (by its logical id)."""
    role = template.props(function_id)["Role"]
    assert isinstance(role, dict) and "Fn::GetAtt" in role, role
    return str(role["Fn::GetAtt"][0])


def tenant_role_of(template: Template, function_id: str) -> str | None:
    """The logical id of a function's tenant role (the role its SKALD_TENANT_ROLE_ARN names),
    or None for a function without one."""
    variables = template.props(function_id)["Environment"]["Variables"]
    arn = variables.get(catalog.TENANT_ROLE_ENV)
    if arn is None:
        return None
    assert isinstance(arn, dict) and "Fn::GetAtt" in arn, arn
    return str(arn["Fn::GetAtt"][0])


def reset_process_caches() -> None:
    """SEAM: forget what one function's cold start cached process-wide, so the next function
    loaded in this process starts as cold as its own Lambda would. (Nothing is cached
    process-wide today: each composition holds its own root key and caches.)"""


def worker_queue(function: str) -> str:
    """SEAM: the job queue an SQS worker consumes."""
    queue = catalog.function(function).queue
    assert queue is not None, function
    return queue


def default_kind(worker: str) -> str | None:
    """SEAM: the job kind of a message without a `kind` attribute on the worker's queue
    (EventBridge Scheduler cannot set message attributes)."""
    return catalog.queue(worker_queue(worker)).default_kind


def job_kinds() -> frozenset[str]:
    """SEAM: every job kind a worker may be handed."""
    return frozenset(job.kind for job in catalog.JOBS)
