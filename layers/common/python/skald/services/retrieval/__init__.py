"""Retrieval: by meaning and exactly.

- service.py: RetrievalService: find and search (list mode): scope, filters, dense, keyword
  and hybrid retrieval, time decay, reranking, intent planning, grouping
- matching.py: MatchingService: grep (regex over file lines) and glob (path patterns)
"""

__all__ = ["matching", "service"]
