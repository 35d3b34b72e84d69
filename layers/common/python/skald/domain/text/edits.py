"""Exact string replacement, the rule behind an agent's `edit`: the old text must occur exactly
once (or every occurrence is replaced on request), so an edit never lands somewhere the agent
did not look."""

from __future__ import annotations

from skald.domain.errors import InvalidArgument


def replace_exact(text: str, old: str, new: str, *, replace_all: bool = False) -> tuple[str, int]:
    """Returns the edited text and how many occurrences were replaced."""
    if not old:
        raise InvalidArgument("old_string must not be empty")
    if old == new:
        raise InvalidArgument("old_string and new_string are identical; nothing to change")
    count = text.count(old)
    if count == 0:
        raise InvalidArgument(
            "old_string was not found in the file; read the file and copy "
            "the text exactly, including whitespace",
            {"occurrences": 0},
        )
    if count > 1 and not replace_all:
        raise InvalidArgument(
            f"old_string occurs {count} times; include more surrounding text "
            "to make it unique, or set replace_all",
            {"occurrences": count},
        )
    return text.replace(old, new), count
