"""Token usage of the language model, metered per unit of work (one archive's extraction).

The LLM adapters report each completion's usage with `record`; whoever wants the total of a
piece of work runs it inside `metering()`. A context variable rather than a return value: the
usage crosses the extractors and the summary steps without threading through their signatures,
and concurrent jobs (worker threads) each see only their own meter."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass
class TokenUsage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def as_dict(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }


# Every meter open around the current call, innermost last: blocks nest (an archive's meter
# around each completion's), and a completion counts in each of them.
_METER: ContextVar[tuple[TokenUsage, ...]] = ContextVar("skald_llm_usage", default=())


@contextmanager
def metering() -> Iterator[TokenUsage]:
    """Counts the usage every completion inside the block records (and the enclosing blocks
    count it too)."""
    usage = TokenUsage()
    token = _METER.set((*_METER.get(), usage))
    try:
        yield usage
    finally:
        _METER.reset(token)


def record(prompt_tokens: object, completion_tokens: object) -> None:
    """Adds one completion's usage to the current meter (none: nothing to do). Values a
    provider did not report (None, junk) count as 0."""
    prompt, completion = _count(prompt_tokens), _count(completion_tokens)
    for usage in _METER.get():
        usage.prompt_tokens += prompt
        usage.completion_tokens += completion


def total(usages: Iterator[Mapping[str, object]]) -> dict[str, int]:
    """The sum of stored usage dicts (an archive's `llm_token_usage`)."""
    sum_ = TokenUsage()
    for u in usages:
        sum_.prompt_tokens += _count(u.get("prompt_tokens"))
        sum_.completion_tokens += _count(u.get("completion_tokens"))
    return sum_.as_dict()


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
