"""MCP function: the agent tools at /mcp (streamable HTTP, stateless, JSON responses)."""

from skald.compose.entrypoints import lambda_handler

handler = lambda_handler("mcp")
