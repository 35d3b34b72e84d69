"""Remote sources: web pages and git repositories, fetched by the fetch worker under the
address rules of domain/sources/netguard (every address resolved and checked, every redirect
too)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from skald.domain.sources.netguard import FetchLimits


@dataclass(frozen=True)
class FetchedPage:
    url: str  # after redirects
    content_type: str  # the media type, lowercase, without parameters
    data: bytes


@runtime_checkable
class RemoteFetcher(Protocol):
    def get(self, url: str, limits: FetchLimits) -> FetchedPage:
        """One http(s) resource. Raises FetchFailed naming the cause."""
        ...

    def clone(self, url: str, ref: str | None, limits: FetchLimits) -> list[tuple[str, bytes]]:
        """The files of a git repository's `ref` (default branch when None) as (relative
        path, bytes), without the repository's metadata or links. Raises FetchFailed."""
        ...
