"""Compositions over the local adapters, for tests that drive services directly."""

from __future__ import annotations

from skald.adapters.local.factory import LocalAdapterFactory
from skald.compose.composition import Composition
from skald.config import Settings


def local_services(settings: Settings) -> Composition:
    """Every port, like `skald serve` (close() closes the stores)."""
    return Composition(settings, LocalAdapterFactory(settings))
