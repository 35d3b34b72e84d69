"""The MCP server: Skald's tools on the SDK's MCPServer, with protocol errors for calls that
name no tool or whose arguments do not fit its input schema (a tool error, `isError`, is kept
for failures of a valid call)."""

from __future__ import annotations

import inspect
from typing import Any

import jsonschema
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, ToolAnnotations

from skald import __version__
from skald.compose.composition import Composition

from .tools import SkaldTools

INSTRUCTIONS = (
    "Skald is the user's context database: memories about the user, shared resources "
    "(documents, code) and skills in one viking:// filesystem. Before answering anything that "
    "may depend on earlier work or on the user's preferences, call find (or search with "
    "mode=context); read the URIs it returns. Call remember when the user shares something "
    "worth keeping. Browse with list, tree, glob; match exact text with grep."
)

ANNOTATIONS = {
    "read": ToolAnnotations(read_only_hint=True, open_world_hint=False),
    "write": ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False),
    "delete": ToolAnnotations(
        read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
    ),
}


class StrictToolCalls:
    """Middleware: an unknown tool or arguments outside the tool's input schema are the
    caller's mistake, answered as JSON-RPC INVALID_PARAMS before any tool runs."""

    def __init__(self, server: MCPServer) -> None:
        self.server = server
        self._validators: dict[str, Any] | None = None

    async def _schemas(self) -> dict[str, Any]:
        if self._validators is None:
            # Unknown argument names are refused too: a misspelt parameter would otherwise
            # be dropped silently and the call would run with its default.
            self._validators = {
                t.name: jsonschema.Draft202012Validator(
                    {**t.input_schema, "additionalProperties": False}
                )
                for t in await self.server.list_tools()
            }
        return self._validators

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if ctx.method == "tools/call" and isinstance(ctx.params, dict):
            name = ctx.params.get("name")
            validators = await self._schemas()
            validator = validators.get(name) if isinstance(name, str) else None
            if validator is None:
                raise MCPError(
                    INVALID_PARAMS, f"Unknown tool: {name}", {"tools": sorted(validators)}
                )
            arguments = ctx.params.get("arguments") or {}
            problems = sorted(validator.iter_errors(arguments), key=lambda e: list(e.path))
            if problems:
                said = "; ".join(
                    f"{'.'.join(str(p) for p in e.path) or 'arguments'}: {e.message}"
                    for e in problems[:3]
                )
                raise MCPError(
                    INVALID_PARAMS,
                    f"Invalid arguments for {name}: {said}",
                    {
                        "errors": [
                            {"path": [str(p) for p in e.path], "message": e.message}
                            for e in problems
                        ]
                    },
                )
        return await call_next(ctx)


def build_server(container: Composition) -> MCPServer:
    server: MCPServer = MCPServer(
        "skald", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING"
    )
    tools = SkaldTools(container)
    for name, fn, kind in tools.catalog():
        server.add_tool(
            fn,
            name=name,
            description=inspect.cleandoc(fn.__doc__ or ""),
            annotations=ANNOTATIONS[kind],
            structured_output=False,
        )
    server.middleware.append(StrictToolCalls(server))
    return server
