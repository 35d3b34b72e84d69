"""The ports as the composition hands them out, each reporting what it does to the Meter:
the blob store its bytes stored (a gauge), the search index the records it writes, the
embedder the texts it embeds, the language model its tokens (by purpose and model) after
checking the account's daily token limit.

A wrapper forwards everything it does not meter to the adapter. Who is metered is the call's
subject (domain/metering/subject.py); a blob's account is its key's first part (the subject's
user when the subject is that account's, else none)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from skald.domain.metering.subject import current_purpose, current_subject
from skald.domain.metering.units import Unit
from skald.domain.ops.usage import metering
from skald.ports import LLM, BlobInfo, BlobStore, ChatMessage, Embedder, Meter, SearchIndex
from skald.services.metering.limits import UsageLimits


class _Forwarding:
    def __init__(self, inner: Any, meter: Meter) -> None:
        self._inner = inner
        self._meter = meter

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    @property
    def unwrapped(self) -> Any:
        return self._inner


def _subject() -> tuple[str, str] | None:
    return current_subject()


class MeteredBlobStore(_Forwarding):
    """Bytes stored: + a new blob's size, + / - an overwrite's difference, - a removed blob's.
    Knowing an overwrite's difference takes the old blob's head before the write."""

    _inner: BlobStore

    def _record(self, key: str, delta: int) -> None:
        account, sep, _ = key.partition("/")
        if not delta or not sep or not account or account.startswith("_"):
            return
        subject = _subject()
        user = subject[1] if subject is not None and subject[0] == account else ""
        self._meter.record(account, user, Unit.BYTES_STORED, delta)

    def _old_size(self, key: str) -> int:
        try:
            info = self._inner.head(key)
        except Exception:
            return 0
        return info.size if info is not None else 0

    def put(self, key: str, data: bytes, **kwargs: Any) -> BlobInfo:
        # A create-only put replaces nothing (it fails if the blob exists): no head needed.
        old = 0 if kwargs.get("if_none_match") else self._old_size(key)
        info = self._inner.put(key, data, **kwargs)
        self._record(key, len(data) - old)
        return info

    def put_many(self, items: Sequence[tuple[str, bytes]]) -> list[BlobInfo]:
        try:
            heads = self._inner.head_many([k for k, _ in items])
        except Exception:
            heads = [None] * len(items)
        infos = self._inner.put_many(items)
        for (k, data), old in zip(items, heads, strict=False):
            self._record(k, len(data) - (old.size if old is not None else 0))
        return infos

    def copy(self, src: str, dst: str) -> BlobInfo:
        old = self._old_size(dst)
        info = self._inner.copy(src, dst)
        self._record(dst, info.size - old)
        return info

    def delete(self, key: str) -> bool:
        old = self._old_size(key)
        removed = self._inner.delete(key)
        if removed:
            self._record(key, -old)
        return removed

    def purge_prefix(self, prefix: str, *, limit: int = 1000) -> int:
        if prefix.count("/") == 1 and prefix.endswith("/"):
            # A whole account's tree (its removal): its usage is removed with it, so the
            # freed bytes are not filed under an account that no longer exists.
            return self._inner.purge_prefix(prefix, limit=limit)
        sizes: list[tuple[str, int]] = []
        try:
            for blob in self._inner.iter_all(prefix):
                if len(sizes) >= limit:
                    break
                sizes.append((blob.key, blob.size))
        except Exception:
            sizes = []
        removed = self._inner.purge_prefix(prefix, limit=limit)
        for key, size in sizes[:removed]:
            self._record(key, -size)
        return removed

    def batch(self) -> Any:
        return self._inner.batch()

    def iter_all(self, prefix: str, *, hidden: bool = True) -> Iterator[BlobInfo]:
        return self._inner.iter_all(prefix, hidden=hidden)


class MeteredIndex(_Forwarding):
    """Index records written (a count: every record upserted or replaced)."""

    _inner: SearchIndex

    def _record(self, account: str, count: int) -> None:
        subject = _subject()
        user = subject[1] if subject is not None and subject[0] == account else ""
        self._meter.record(account, user, Unit.INDEX_RECORDS, count)

    def upsert(self, records: Sequence[Any]) -> None:
        self._inner.upsert(records)
        counts: dict[str, int] = {}
        for r in records:
            counts[r.account] = counts.get(r.account, 0) + 1
        for account, count in counts.items():
            self._record(account, count)

    def replace_sections(self, account: str, uri: str, level: int, records: Sequence[Any]) -> None:
        self._inner.replace_sections(account, uri, level, records)
        self._record(account, len(records))

    def replace_many(self, account: str, sets: Mapping[tuple[str, int], Sequence[Any]]) -> None:
        self._inner.replace_many(account, sets)
        self._record(account, sum(len(v) for v in sets.values()))


class MeteredEmbedder(_Forwarding):
    """Texts embedded, by model, for the call's subject."""

    _inner: Embedder

    @property
    def dimension(self) -> int:
        return self._inner.dimension

    @property
    def model_id(self) -> str:
        return self._inner.model_id

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors = self._inner.embed(texts)
        subject = _subject()
        if subject is not None:
            self._meter.record(
                subject[0], subject[1], Unit.TEXTS_EMBEDDED, len(texts), {"model": self.model_id}
            )
        return vectors


def model_of(llm: Any) -> str:
    name = getattr(llm, "model", None) or getattr(llm, "model_id", None)
    return str(name) if name else type(llm).__name__


class MeteredLLM(_Forwarding):
    """Every completion: the account's daily token limit checked first (QuotaExceeded, no
    call made), then its tokens in and out recorded by purpose and model, also when the call
    failed after the provider counted them."""

    _inner: LLM

    def __init__(self, inner: LLM, meter: Meter, limits: Callable[[], UsageLimits | None]) -> None:
        super().__init__(inner, meter)
        self._limits = limits
        self._model = model_of(inner)

    def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        json_schema: dict[str, Any] | None = None,
        max_tokens: int = 1024,
        timeout_s: float = 30.0,
    ) -> str:
        subject = _subject()
        limits = self._limits() if subject is not None else None
        if subject is not None and limits is not None:
            limits.check_llm(subject[0])
        with metering() as used:
            try:
                return self._inner.complete(
                    messages, json_schema=json_schema, max_tokens=max_tokens, timeout_s=timeout_s
                )
            finally:
                if subject is not None:
                    dims = {"purpose": current_purpose(), "model": self._model}
                    account, user = subject
                    self._meter.record(account, user, Unit.LLM_TOKENS_IN, used.prompt_tokens, dims)
                    self._meter.record(
                        account, user, Unit.LLM_TOKENS_OUT, used.completion_tokens, dims
                    )
