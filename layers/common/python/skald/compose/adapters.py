"""The adapters of one composition: built per port on first use, and only the ports its entry
point is allowed (the catalogue's `uses`).

Services receive *lazy* ports: a stand-in that builds the adapter at its first attribute
access. So a service can be constructed without building everything it might touch (the
search function's session service holds a queue it never enqueues on); a port the entry
point may not use fails loudly (PortNotWired) at first use instead of being built.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection
from typing import Any

from skald import catalog
from skald.adapters.factory import AdapterFactory


class PortNotWired(RuntimeError):
    """An entry point used a port the catalogue does not give it."""


class _LazyPort:
    """Stands in for an adapter until its first attribute access, then forwards to it."""

    __slots__ = ("_port", "_resolve")

    def __init__(self, port: str, resolve: Callable[[str], Any]) -> None:
        object.__setattr__(self, "_port", port)
        object.__setattr__(self, "_resolve", resolve)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._resolve(self._port), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._resolve(self._port), name, value)

    def __repr__(self) -> str:
        return f"<lazy {self._port} port>"


class AdapterSet:
    def __init__(
        self, factory: AdapterFactory, ports: Collection[str] | None = None, *, name: str = "serve"
    ) -> None:
        unknown = set(ports or ()) - set(catalog.PORTS)
        if unknown:
            raise ValueError(f"unknown ports: {', '.join(sorted(unknown))}")
        self.factory = factory
        self.name = name
        self._ports = None if ports is None else frozenset(ports)
        self._built: dict[str, Any] = {}
        self._order: list[str] = []
        self._lock = threading.Lock()
        # Wraps each adapter as it is built (the composition's meters): (port, adapter) -> the
        # adapter its services see.
        self.decorate: Callable[[str, Any], Any] | None = None

    def allows(self, port: str) -> bool:
        return self._ports is None or port in self._ports

    @property
    def built(self) -> tuple[str, ...]:
        """The ports built so far, in order."""
        return tuple(self._order)

    def get(self, port: str) -> Any:
        """The adapter of `port`, built now if needed (None for an unconfigured optional
        port)."""
        try:
            return self._built[port]
        except KeyError:
            pass
        if not self.allows(port):
            raise PortNotWired(
                f"the {self.name} entry point does not use the {port} port (see skald/catalog.py)"
            )
        with self._lock:
            if port not in self._built:
                adapter = self.factory.build(port)
                if adapter is not None and self.decorate is not None:
                    adapter = self.decorate(port, adapter)
                self._built[port] = adapter
                self._order.append(port)
            return self._built[port]

    def lazy(self, port: str) -> Any:
        """The adapter if built, else a stand-in that builds it on first use."""
        if port in self._built:
            return self._built[port]
        return _LazyPort(port, self.get)

    def optional(self, port: str) -> Any:
        """An optional port (LLM, reranker, scheduler): built now, since a service needs to
        know whether it exists; None when this entry point does not use it."""
        return self.get(port) if self.allows(port) else None
