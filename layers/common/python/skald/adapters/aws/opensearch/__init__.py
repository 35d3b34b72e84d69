"""SearchIndex on OpenSearch: k-NN for dense search, BM25 for lexical, RRF for hybrid.

- index.py: OpenSearchIndex: the adapter
- ranking.py: Ranker: the search modes as requests, their hits ranked and fused
- requests.py: the request bodies (golden-tested)
- filters.py: IndexFilter as `bool.filter` clauses
- hits.py: hits as the port's records and scores
- writes.py: IndexWriter: chunked `_bulk` writes that retry throttled items
- client.py: the client: endpoint, auth, signing
- setup.py: IndexSetup: a versioned index behind an alias, at deploy time
"""

__all__ = ["client", "filters", "hits", "index", "ranking", "requests", "setup", "writes"]
