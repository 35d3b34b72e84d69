"""HTTP: the FastAPI app, its routers and what every request passes through. No business
logic: a route resolves the caller and calls a service.

- app.py: create_app: the app of a router set, its guards, metrics and error handlers
- routers/: one router per route family
- mcp/: the MCP endpoint (/mcp), its tools and the stdio bridge
- deps.py: the composition and the caller's identity as request dependencies
- envelope.py: the wire envelope, and error codes mapped to statuses
- guards.py: ASGI guards on every request (sizes, JSON text, request ids)
- http_limits.py: request head limits of `skald serve`
- openapi.py: what the OpenAPI document says beyond the routes; results.py: the bodies of
  /health and /ready
- metrics.py: request metrics by route template
- telemetry.py: the `telemetry` option of find and search (timings when asked)
- authorizer.py: the API Gateway authorizer (API keys)
- lambda_entry.py: the HTTP functions behind API Gateway (Mangum)
"""

__all__ = [
    "app",
    "authorizer",
    "deps",
    "envelope",
    "guards",
    "http_limits",
    "lambda_entry",
    "mcp",
    "metrics",
    "openapi",
    "results",
    "routers",
    "telemetry",
]
