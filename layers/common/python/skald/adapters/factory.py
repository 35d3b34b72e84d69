"""What every backend's adapter factory offers: one builder per port, each run at most once.

A composition asks its factory for a port when a service first needs it, so an entry point
builds only the adapters it uses (see `skald.compose`). The factories do no I/O when they are
made: clients are created by the first builder that needs them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from skald import catalog
from skald.config import Settings

log = logging.getLogger("skald")


class MissingSettings(ValueError):
    """A port cannot be built: the environment lacks what it needs."""


@dataclass
class SetupReport:
    """What `skald admin init` (and the deploy-time setup function) did, step by step."""

    backend: str
    steps: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "steps": list(self.steps)}


class SetupError(RuntimeError):
    """Setup found something missing or inconsistent; the message names it."""


class AdapterFactory(Protocol):
    settings: Settings

    def build(self, port: str) -> Any:
        """The adapter of `port` (one of catalog.PORTS), built on the first call; None for
        an optional port the settings leave unconfigured."""
        ...

    def setup(self) -> SetupReport:
        """Creates what the adapters need to exist (schemas, the search index) and checks
        the rest; idempotent."""
        ...

    def close(self) -> None: ...


def embedding_dimension(settings: Settings) -> int:
    """The vector size of the configured embedder, known without building it (the search
    index's mapping depends on it)."""
    if settings.embedding_provider == "onnx":
        from skald.adapters.models.onnx_embedder import DIMENSION

        return DIMENSION
    return settings.embedding_dimension


def model_names(settings: Settings) -> dict[str, list[tuple[str, str]]]:
    """(model, provider) of each configured model kind, known without building any: the
    observer reports them from entry points that never call a model."""
    if settings.embedding_provider == "onnx":
        from skald.adapters.models.onnx_embedder import MODEL_ID

        embedding = [(MODEL_ID, "onnx")]
    elif settings.embedding_provider == "bedrock":
        embedding = [(settings.bedrock_embedding_model, "bedrock")]
    else:
        embedding = [(settings.embedding_model or "default", "openai-compatible")]
    llm: list[tuple[str, str]] = []
    if settings.llm_enabled:
        llm = (
            [(settings.bedrock_llm_model or "", "bedrock")]
            if settings.llm_provider == "bedrock"
            else [(settings.llm_model or "", "openai-compatible")]
        )
    rerank = [(settings.bedrock_rerank_model, "bedrock")] if settings.bedrock_rerank_model else []
    return {"vlm": llm, "embedding": embedding, "rerank": rerank}


def require(settings: Settings, port: str) -> None:
    """Raises MissingSettings naming every unset variable `port` needs (per the catalogue)."""
    names = [
        n
        for n in catalog.resource_env(port)
        if n.startswith("SKALD_") and n not in catalog.OPTIONAL_ENV
    ]
    missing = [n for n in names if settings.env_value(n) in (None, "")]
    if missing:
        raise MissingSettings(
            f"the {settings.backend} backend's {port} adapter needs {', '.join(missing)}"
        )


class CachingFactory:
    """Base of the backend factories: `build(port)` calls the method named like the port once
    and keeps its result; close() runs the closers the builders registered, newest first."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._built: dict[str, Any] = {}
        self._closers: list[Callable[[], None]] = []
        self._lock = threading.RLock()  # builders may build other ports (recall -> blobs)

    def build(self, port: str) -> Any:
        if port not in catalog.PORTS:
            raise KeyError(f"unknown port '{port}'")
        try:
            return self._built[port]
        except KeyError:
            pass
        with self._lock:
            if port not in self._built:
                builder: Callable[[], Any] = getattr(self, port)
                self._built[port] = builder()
            return self._built[port]

    def on_close(self, closer: Callable[[], None]) -> None:
        self._closers.append(closer)

    def close(self) -> None:
        with self._lock:
            closers, self._closers = self._closers, []
            self._built.clear()
        for closer in reversed(closers):
            try:
                closer()
            except Exception:  # closing is best effort at shutdown
                log.exception("error while closing an adapter")
