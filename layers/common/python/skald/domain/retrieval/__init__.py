"""Retrieval rules shared by every SearchIndex adapter and the retrieval services.

- index_filter.py: IndexFilter rules: canonical URIs, scopes, time fields, levels
- filter_tree.py: the metadata filter tree of find/search and its validation
- filter_forms.py: OpenViking's other spellings of a filter node, rewritten
- scores.py: dense, lexical and tie-break score rules
- fusion.py: reciprocal rank fusion of the dense and BM25 rankings
- crowding.py: which directory sidecars a result list keeps
- sequence.py: numbered files ranked with their neighbours
- context_budget.py: which tier of each entry a context block injects
"""

__all__ = [
    "context_budget",
    "crowding",
    "filter_forms",
    "filter_tree",
    "fusion",
    "index_filter",
    "scores",
    "sequence",
]
