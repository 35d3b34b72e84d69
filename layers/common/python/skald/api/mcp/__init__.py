"""MCP (Model Context Protocol) for agents: the tools, the `/mcp` endpoint and the stdio
bridge (`skald mcp`).

- tools.py: SkaldTools: the tools an agent calls, over the services
- render.py: compact text of their results for an agent's context window
- server.py: the tools on the SDK's MCPServer
- endpoint.py: /mcp over streamable HTTP, stateless
- lazy.py: the endpoint built on its first request
- bridge.py: `skald mcp`: MCP over stdio, forwarded to a running server
"""

__all__ = ["bridge", "endpoint", "lazy", "render", "server", "tools"]
