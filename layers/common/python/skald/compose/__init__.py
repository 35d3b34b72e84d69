"""Per-entry-point composition: each Lambda function, the authorizer, each worker, the
deploy-time setup and `skald serve` build only the adapters and services they use.

- adapters.py: a composition's adapters, built per port on first use, limited to the ports
  the catalogue gives its entry point;
- lazy.py: what a composition builds on first use: a service (`service`), and its adapters
  as typed properties (`LazyPorts`, the base of a Composition);
- composition.py: the services over those adapters, each built on first use;
- entrypoints.py: one composition per catalogue function, and the Lambda handlers;
- serve.py: `skald serve` (local and aws-local): everything, plus workers and the idle timer.
"""

__all__ = ["adapters", "composition", "entrypoints", "lazy", "serve"]
