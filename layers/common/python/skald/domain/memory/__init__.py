"""Memories and the conversations they come from.

- types.py: memory types, where each memory lives and how its body is written
- revision.py: how new statements revise the memories already written
- stats.py: memory health numbers (counts, hotness, staleness)
- parts.py: message parts (text, context, tool, image): validation and normalisation
- tool_results.py: tool outputs recorded in a session's messages, read and searched
- archives.py: ArchiveStatus, the states of a session's archive
"""

__all__ = ["archives", "parts", "revision", "stats", "tool_results", "types"]
