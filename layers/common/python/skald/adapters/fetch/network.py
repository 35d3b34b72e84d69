"""Remote sources: http(s) and git under the address rules of domain/sources/netguard."""

from __future__ import annotations

from skald.adapters.fetch.archive import archive_url, fetch_archive
from skald.adapters.fetch.git_clone import GitCloner
from skald.adapters.fetch.guarded_http import GuardedHttp
from skald.domain.sources.netguard import FetchLimits
from skald.ports import FetchedPage


class NetworkFetcher:
    """The RemoteFetcher of every deployment: pages over guarded http;
    repositories on GitHub and GitLab as archives, others with git."""

    def __init__(self) -> None:
        self.http = GuardedHttp()
        self.git = GitCloner()

    def get(self, url: str, limits: FetchLimits) -> FetchedPage:
        return self.http.get(url, limits)

    def clone(self, url: str, ref: str | None, limits: FetchLimits) -> list[tuple[str, bytes]]:
        archive = archive_url(url, ref)
        if archive is not None:
            return fetch_archive(self.http, archive, limits)
        return self.git.clone(url, ref, limits)
