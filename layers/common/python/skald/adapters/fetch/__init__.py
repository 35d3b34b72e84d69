"""Remote sources: http(s) and git under the address rules of domain/sources/netguard.

- network.py: NetworkFetcher: the RemoteFetcher of every deployment
- guarded_http.py: GuardedHttp: http(s) with every address checked, redirects too
- archive.py: repositories on GitHub and GitLab fetched as zip archives
- git_clone.py: GitCloner: shallow clones with the git client, held to the same rules
"""

__all__ = ["archive", "git_clone", "guarded_http", "network"]
