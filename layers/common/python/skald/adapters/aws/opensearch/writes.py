"""The write transport of the OpenSearch records index: chunked `_bulk` requests that retry
throttled items, delete-by-query with its refresh and version-conflict handling, and the
scan-and-delete that stands in for delete-by-query on OpenSearch Serverless (see
index.py for the refresh and serverless semantics)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any, Literal

from opensearchpy import OpenSearch

from skald.adapters.aws.opensearch.client import OpenSearchIndexError

_BULK_MAX_DOCS = 500
_BULK_MAX_BYTES = 5_000_000
_BULK_RETRIES = 3
_DBQ_ATTEMPTS = 3
_SCAN_PAGE = 1000

Refresh = bool | Literal["wait_for"]


class IndexWriter:
    """Bulk writes and deletes on one index, with the index's refresh policy."""

    def __init__(
        self,
        client: OpenSearch,
        index: str,
        *,
        refresh: Refresh,
        serverless: bool,
        write_timeout: float,
    ) -> None:
        self._client = client
        self._index = index
        self._refresh: Refresh = refresh
        self._serverless = serverless
        self._write_timeout = write_timeout

    def _refresh_param(self) -> dict[str, Any]:
        return {} if self._refresh is False else {"refresh": self._refresh}

    def bulk(self, actions: list[dict[str, Any]], *, with_sources: bool) -> list[dict[str, Any]]:
        """Sends `actions` (meta lines, each followed by its source when `with_sources`) in
        chunks; retries items the cluster throttled (429). Returns every item's result."""
        step = 2 if with_sources else 1
        # Serialised once, here: the chunking needs the sizes and the client sends the text.
        ops = [
            "".join(
                json.dumps(line, separators=(",", ":")) + "\n" for line in actions[i : i + step]
            )
            for i in range(0, len(actions), step)
        ]
        results: list[dict[str, Any]] = []
        for chunk in self._bulk_chunks(ops):
            pending = chunk
            for attempt in range(_BULK_RETRIES + 1):
                resp = self._client.bulk(
                    body="".join(pending),
                    params={"request_timeout": self._write_timeout},
                    **self._refresh_param(),
                )
                items: list[dict[str, Any]] = resp.get("items", [])
                retry = []
                for op, item in zip(pending, items, strict=True):
                    kind, res = next(iter(item.items()))
                    if res.get("status") == 429 and attempt < _BULK_RETRIES:
                        retry.append(op)
                    else:
                        results.append({kind: res})
                if not retry:
                    break
                pending = retry
                time.sleep(0.2 * 2**attempt)
        errors = [
            (kind, res)
            for item in results
            for kind, res in item.items()
            if res.get("error") is not None and not (kind == "delete" and res.get("status") == 404)
        ]
        if errors:
            kind, res = errors[0]
            raise OpenSearchIndexError(
                f"OpenSearch index {self._index!r}: {len(errors)} bulk {kind} operation(s) "
                f"failed, first: {res.get('error')}"
            )
        return results

    @staticmethod
    def _bulk_chunks(ops: list[str]) -> Iterator[list[str]]:
        chunk: list[str] = []
        size = 0
        for op in ops:
            if chunk and (len(chunk) >= _BULK_MAX_DOCS or size + len(op) > _BULK_MAX_BYTES):
                yield chunk
                chunk, size = [], 0
            chunk.append(op)
            size += len(op)
        if chunk:
            yield chunk

    def delete(self, body: dict[str, Any], *, visible: bool = False) -> int:
        """Deletes what `body`'s query matches. `visible`: searches stop finding the deleted
        documents before this returns, whatever the refresh policy (a removal answers once
        its records are gone); otherwise they go at the policy's pace."""
        if self._serverless:
            return self.scan_delete(body)
        if self._refresh is False:
            # Delete-by-query only sees refreshed documents: make every earlier write visible.
            self._client.indices.refresh(index=self._index)
        deleted = 0
        for attempt in range(_DBQ_ATTEMPTS):
            resp = self._client.delete_by_query(
                index=self._index,
                body=body,
                conflicts="proceed",
                refresh=visible or self._refresh is not False,
                params={"request_timeout": self._write_timeout},
            )
            deleted += int(resp.get("deleted", 0))
            if resp.get("failures"):
                raise OpenSearchIndexError(
                    f"OpenSearch index {self._index!r}: delete by query failed: "
                    f"{resp['failures'][0]}"
                )
            # A concurrent write changed a matching document under us (conflicts=proceed
            # skipped it): it still matches, so another pass deletes the new version.
            if not resp.get("version_conflicts") or attempt == _DBQ_ATTEMPTS - 1:
                break
            if self._refresh is False:
                self._client.indices.refresh(index=self._index)
        return deleted

    def scan_delete(self, body: dict[str, Any]) -> int:
        """Delete-by-query without _delete_by_query (serverless): page through the matching
        ids in a stable order, delete them by id in bulk."""
        search: dict[str, Any] = {
            "size": _SCAN_PAGE,
            "_source": False,
            "query": body["query"],
            "sort": [{"record_id": {"order": "asc"}}, {"written_at": {"order": "asc"}}],
        }
        deleted = 0
        while True:
            hits = self._client.search(index=self._index, body=search)["hits"]["hits"]
            if not hits:
                return deleted
            actions = [{"delete": {"_index": self._index, "_id": h["_id"]}} for h in hits]
            for item in self.bulk(actions, with_sources=False):
                if item.get("delete", {}).get("result") == "deleted":
                    deleted += 1
            if len(hits) < _SCAN_PAGE:
                return deleted
            search["search_after"] = hits[-1]["sort"]
