"""Compositions over the local adapters, for tests that drive services directly."""

from __future__ import annotations

from typing import Any

from skald.adapters.local.factory import LocalAdapterFactory
from skald.compose.composition import Composition
from skald.config import Settings


def local_services(settings: Settings) -> Composition:
    """Every port, like `skald serve` (close() closes the stores)."""
    return Composition(settings, LocalAdapterFactory(settings))


class GivenAdapters(LocalAdapterFactory):
    """The local factory with some ports given as built adapters (an emulated store, a fake
    embedder); the rest are built as `skald serve` builds them. close() closes the given ones
    that can be closed too."""

    def __init__(self, settings: Settings, given: dict[str, Any]) -> None:
        super().__init__(settings)
        self._built.update(given)
        for adapter in given.values():
            close = getattr(adapter, "close", None)
            if callable(close):
                self.on_close(close)


def given_services(settings: Settings, **given: Any) -> tuple[Composition, GivenAdapters]:
    factory = GivenAdapters(settings, given)
    return Composition(settings, factory), factory
