"""Sessions: messages in, context out, and the commit that turns them into memories.

- service.py: SessionService: sessions, messages, context, archives
- commit.py: SessionCommitter: commit phase 1, archive and queue extraction, crash-safe
- recovery.py: CommitRecovery: half-done commits finished or rolled back
- memory.py: MemoryCommitService: commit phase 2, memories extracted and written
- memory_diff.py: the memory diff being planned: adds, updates, deletes, provenance
- tool_results.py: ToolResultService: the tool outputs a session recorded
"""

__all__ = ["commit", "memory", "memory_diff", "recovery", "service", "tool_results"]
