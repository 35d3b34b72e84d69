"""Who a call is metered to, and why a model is called.

Context variables, like the call's tenant: the HTTP edge sets the subject once the caller is
known, a worker to its job's account and user; a model call reads the purpose its caller
declared around it (`with purpose("summary"):`), so no model signature carries it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from enum import StrEnum


class Purpose(StrEnum):
    EXTRACTION = "extraction"  # memories from a session's archive
    SUMMARY = "summary"  # a file's or a directory's L0/L1, an archive's overview
    QUERY_REWRITE = "query_rewrite"  # intent planning, query expansion
    DIGEST = "digest"  # context assembly's cited digest
    CAPTION = "caption"  # an image described by a vision model
    RERANK = "rerank"
    OTHER = "other"


_subject: ContextVar[tuple[str, str] | None] = ContextVar("skald_usage_subject", default=None)
_purpose: ContextVar[str | None] = ContextVar("skald_usage_purpose", default=None)


def current_subject() -> tuple[str, str] | None:
    """(account, user) the current call is metered to; None outside any account."""
    return _subject.get()


def set_subject(account_id: str, user_id: str) -> None:
    """For the HTTP edge, whose request context ends with the request."""
    _subject.set((account_id, user_id))


@contextmanager
def subject_scope(account_id: str | None, user_id: str | None) -> Iterator[None]:
    token = _subject.set((account_id, user_id or "") if account_id else None)
    try:
        yield
    finally:
        _subject.reset(token)


def current_purpose() -> str:
    return _purpose.get() or Purpose.OTHER.value


@contextmanager
def purpose(name: str) -> Iterator[None]:
    token = _purpose.set(name)
    try:
        yield
    finally:
        _purpose.reset(token)
