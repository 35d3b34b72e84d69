"""What a composition builds on first use: its services (`service`, a property built once)
and its adapters (`LazyPorts`, the base of a Composition: each port as a typed property over
the AdapterSet, which builds an adapter at the first call a service makes on it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection
from typing import Any, Generic, TypeVar, overload

from skald import catalog
from skald.adapters.factory import AdapterFactory
from skald.compose.adapters import AdapterSet
from skald.config import Settings
from skald.ports import (
    LLM,
    BlobStore,
    Embedder,
    JobQueue,
    SearchIndex,
    SessionStore,
    StateStore,
)

T = TypeVar("T")


class service(Generic[T]):  # noqa: N801 - used as a decorator, like cached_property
    """A cached property built once under the composition's lock (first requests may race)."""

    def __init__(self, build: Callable[[Any], T]) -> None:
        self.build = build
        self.name = build.__name__
        self.__doc__ = build.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type) -> service[T]: ...

    @overload
    def __get__(self, obj: object, owner: type) -> T: ...

    def __get__(self, obj: object | None, owner: type) -> T | service[T]:
        if obj is None:
            return self
        values = obj.__dict__
        if self.name not in values:
            with obj._lock:  # type: ignore[attr-defined]
                if self.name not in values:
                    values[self.name] = self.build(obj)
        value: T = values[self.name]
        return value


class LazyPorts:
    """A composition's settings, flags and adapters. `authorizer_only`: identity comes only
    from an API Gateway authorizer (the HTTP functions); no key is checked here and there is
    no dev mode. `ensure_presets`: a data request creates the caller's preset directories
    (entry points that write blobs)."""

    def __init__(
        self,
        settings: Settings,
        factory: AdapterFactory,
        *,
        ports: Collection[str] | None = None,
        name: str = "serve",
        authorizer_only: bool = False,
        ensure_presets: bool = True,
    ) -> None:
        self.settings = settings
        self.name = name
        self.adapters = AdapterSet(factory, ports, name=name)
        self.authorizer_only = authorizer_only
        self.ensure_presets = ensure_presets
        self.clock: Callable[[], float] = time.time
        self._lock = threading.RLock()

    @property
    def blobs(self) -> BlobStore:
        adapter: BlobStore = self.adapters.get(catalog.BLOBS)
        return adapter

    @property
    def state(self) -> StateStore:
        adapter: StateStore = self.adapters.get(catalog.STATE)
        return adapter

    @property
    def session_store(self) -> SessionStore:
        adapter: SessionStore = self.adapters.get(catalog.SESSIONS)
        return adapter

    @property
    def queue(self) -> JobQueue:
        adapter: JobQueue = self.adapters.get(catalog.QUEUE)
        return adapter

    @property
    def index(self) -> SearchIndex:
        adapter: SearchIndex = self.adapters.get(catalog.INDEX)
        return adapter

    @property
    def embedder(self) -> Embedder:
        adapter: Embedder = self.adapters.get(catalog.EMBEDDER)
        return adapter

    @property
    def llm(self) -> LLM | None:
        adapter: LLM | None = self.adapters.optional(catalog.LLM)
        return adapter

    def _lazy(self, port: str) -> Any:
        return self.adapters.lazy(port)

    def close(self) -> None:
        self.adapters.factory.close()
