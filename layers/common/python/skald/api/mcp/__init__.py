"""MCP (Model Context Protocol) for agents: the tools, the `/mcp` endpoint and the stdio
bridge (`skald mcp`)."""
