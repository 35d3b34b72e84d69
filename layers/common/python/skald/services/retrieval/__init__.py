"""Retrieval: by meaning and exactly.

- service.py: RetrievalService: find and search (list mode): scope, filters, dense, keyword
  and hybrid retrieval, time decay, reranking, intent planning, grouping
- request.py: FindRequest and the checks of its parameters (type, limit, levels, context types)
- intent.py: intent planning: a session's recent messages as search queries, by the LLM
- matching.py: MatchingService: grep (regex over file lines) and glob (path patterns)
"""

__all__ = ["intent", "matching", "request", "service"]
