"""One composition per catalogue function, and the Lambda handler of each.

`compose(name)` gives a function's services over an adapter factory limited to the ports the
catalogue says it uses; `lambda_handler(name)` is what `functions/*` export. Both take
optional settings and a factory, so tests (and contract checks) can build any function
against emulators, e.g. aws-local's settings with a recording factory.

Nothing here does I/O when a handler is made: a handler module's import builds the app and
the (empty) composition; adapters are built by the first invocation that needs them, and the
authorizer reads the root key's secret on its first call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from skald import catalog
from skald.adapters.factory import AdapterFactory, SetupReport
from skald.compose.composition import Composition
from skald.config import Settings

log = logging.getLogger("skald")
LambdaHandler = Callable[[dict[str, Any], Any], Any]


def _settings(settings: Settings | None, factory: AdapterFactory | None) -> Settings:
    if settings is not None:
        return settings
    return factory.settings if factory is not None else Settings()


def adapter_factory(settings: Settings) -> AdapterFactory:
    if settings.backend == "local":
        from skald.adapters.local.factory import LocalAdapterFactory

        return LocalAdapterFactory(settings)
    if settings.backend == "aws":
        from skald.adapters.aws.factory import AwsAdapterFactory

        return AwsAdapterFactory(settings)
    raise ValueError(
        "aws-local starts its emulators in `skald serve --backend aws-local`; "
        "compose against the settings LocalAwsStack.start() returns"
    )


def compose(
    name: str, settings: Settings | None = None, factory: AdapterFactory | None = None
) -> Composition:
    """The services of catalogue function `name`, over only the ports it uses."""
    fn = catalog.function(name)
    settings = _settings(settings, factory)
    # HTTP functions: identity from the authorizer only, no dev mode whatever the settings.
    return Composition(
        settings,
        factory or adapter_factory(settings),
        ports=fn.ports,
        name=name,
        authorizer_only=fn.kind == "http",
        ensure_presets=fn.uses.get(catalog.BLOBS) == catalog.WRITE,
    )


def run_setup(
    settings: Settings | None = None, factory: AdapterFactory | None = None
) -> SetupReport:
    """`skald admin init`, the setup function and `skald serve`'s start: create what the
    adapters need (schemas, the search index behind its alias), check the rest exists."""
    settings = _settings(settings, factory)
    owned = factory is None
    factory = factory or adapter_factory(settings)
    try:
        return factory.setup()
    finally:
        if owned:
            factory.close()


def lambda_handler(
    name: str, settings: Settings | None = None, factory: AdapterFactory | None = None
) -> LambdaHandler:
    """The Lambda handler of catalogue function `name`."""
    fn = catalog.function(name)
    if fn.kind == "http":
        from skald.api.lambda_entry import build_handler

        container = compose(name, settings, factory)
        mangum: LambdaHandler = build_handler(container, fn.routers, fn.public_paths)
        return flushing_usage(mangum, lambda: container)
    if fn.kind == "authorizer":
        from skald.api.authorizer import make_authorizer
        from skald.domain.plans import edge_key_value

        resolved = _settings(settings, factory)
        namespace = resolved.edge_namespace

        def usage_key(account_id: str) -> str:
            assert namespace
            return edge_key_value(namespace, account_id)

        return make_authorizer(
            lambda: compose(name, settings, factory),
            ttl_s=resolved.auth_cache_ttl_s,
            usage_key=usage_key if namespace else None,
        )
    if fn.kind == "worker":
        return _worker(fn, settings, factory)
    return _setup_handler(settings, factory)


def _worker(
    fn: catalog.Function, settings: Settings | None, factory: AdapterFactory | None
) -> LambdaHandler:
    from skald.jobs.lambda_workers import make_auto_commit_handler, make_sqs_worker

    assert fn.queue is not None
    queue = catalog.queue(fn.queue)
    # = the queue's maxReceiveCount (the catalogue sets both)
    attempts = _settings(settings, factory).job_max_attempts

    def services() -> Composition:
        return compose(fn.name, settings, factory)

    built: list[Composition] = []

    def services_once() -> Composition:
        if not built:
            built.append(services())
        return built[0]

    def built_services() -> Composition | None:
        return built[0] if built else None

    if queue.name == catalog.QUEUE_AUTOCOMMIT:  # also invoked directly, without SQS
        return flushing_usage(
            make_auto_commit_handler(services_once, max_attempts=attempts), built_services
        )
    return flushing_usage(
        make_sqs_worker(
            services_once, max_attempts=attempts, default_kind=queue.default_kind, queue=queue.name
        ),
        built_services,
    )


def flushing_usage(
    handler: LambdaHandler, container: Callable[[], Composition | None]
) -> LambdaHandler:
    """`handler`, flushing the usage it recorded before each invocation returns: a frozen or
    recycled execution environment then loses nothing."""

    def flushed(event: dict[str, Any], context: Any) -> dict[str, Any]:
        try:
            answer: dict[str, Any] = handler(event, context)
            return answer
        finally:
            c = container()
            if c is not None:
                try:
                    c.meter.flush()
                except Exception:
                    log.exception("usage flush failed")

    return flushed


def _setup_handler(settings: Settings | None, factory: AdapterFactory | None) -> LambdaHandler:
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        # A failure raises: the deploy-time trigger then fails the deployment with it.
        report = run_setup(settings, factory)
        for step in report.steps:
            log.info("setup: %s", step)
        return report.as_dict()

    return handler
