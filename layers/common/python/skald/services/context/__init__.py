"""Search mode "context": one request answers with a budgeted block ready to inject.

- service.py: ContextService: the assembly, from the request to the block
- request.py: ContextRequest: purposes, quotas and their validation
- entries.py: retrieved candidates as entries, their selection under quotas
- texts.py: the text of each tier (abstract, overview, full) of an entry
- llm.py: the optional LLM steps: query expansion and the cited digest
"""

__all__ = ["entries", "llm", "request", "service", "texts"]
