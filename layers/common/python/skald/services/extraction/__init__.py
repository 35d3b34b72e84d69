"""Memory extraction: turn the messages of an archived conversation into memory operations.

Two extractors share one interface (`Extractor`):
- `DeterministicExtractor`: rule-based, offline, no model at all. It is the fallback whenever
  no LLM is configured, and the fallback of `LLMExtractor` when the model keeps failing.
- `LLMExtractor`: asks the configured LLM for JSON that matches a schema, validates it and
  retries with the validation error fed back.

Neither touches storage: the caller (the extraction job) applies the operations with
`skald.domain.memory.types.memory_path` / `render_memory` and writes `memory_diff.json`.

This package's names are imported from here; the parts live in common.py (context, result,
interface, skip codes, collector, message helpers), lexicon.py (patterns and word lists),
text.py (sentences, names, dates), rules.py (the rule extractor, with its detectors in
facts.py and its archive-wide memories in archive.py) and llm.py (the LLM extractor).
"""

from __future__ import annotations

from skald.services.extraction.common import (
    PERSONAL_TYPES,
    SKIP_ASSISTANT,
    SKIP_DUPLICATE,
    SKIP_EMPTY_ARCHIVE,
    SKIP_INVALID_DATE,
    SKIP_INVALID_OPERATION,
    SKIP_INVALID_PEER,
    SKIP_INVALID_TAG,
    SKIP_LIMIT,
    SKIP_LLM_FAILED,
    SKIP_NO_MEMORY,
    SKIP_PEER_DISABLED,
    SKIP_QUESTION,
    SKIP_REQUEST,
    SKIP_TOO_SHORT,
    SKIP_TOOL_UNRESOLVED,
    SKIP_VAGUE,
    ExtractionContext,
    ExtractionResult,
    Extractor,
    ToolCall,
    message_date,
    message_text,
    tool_calls,
)
from skald.services.extraction.llm import (
    ANSWER_SCHEMA,
    LLMAnswer,
    LLMExtractor,
    LLMOperation,
    MemoryTypeName,
    render_conversation,
)
from skald.services.extraction.rules import DeterministicExtractor
from skald.services.extraction.text import find_date

__all__ = [
    "ANSWER_SCHEMA",
    "PERSONAL_TYPES",
    "SKIP_ASSISTANT",
    "SKIP_DUPLICATE",
    "SKIP_EMPTY_ARCHIVE",
    "SKIP_INVALID_DATE",
    "SKIP_INVALID_OPERATION",
    "SKIP_INVALID_PEER",
    "SKIP_INVALID_TAG",
    "SKIP_LIMIT",
    "SKIP_LLM_FAILED",
    "SKIP_NO_MEMORY",
    "SKIP_PEER_DISABLED",
    "SKIP_QUESTION",
    "SKIP_REQUEST",
    "SKIP_TOOL_UNRESOLVED",
    "SKIP_TOO_SHORT",
    "SKIP_VAGUE",
    "DeterministicExtractor",
    "ExtractionContext",
    "ExtractionResult",
    "Extractor",
    "LLMAnswer",
    "LLMExtractor",
    "LLMOperation",
    "MemoryTypeName",
    "ToolCall",
    "find_date",
    "message_date",
    "message_text",
    "render_conversation",
    "tool_calls",
]
