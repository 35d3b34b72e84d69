"""SendMessageBatch for SqsJobQueue.enqueue_batch: prepared jobs packed into batches (at most
10 entries and 256 KiB each), and one batch sent with its transient entry failures retried."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from skald.adapters.aws.sqs.messages import SQS_MAX_BATCH, EnqueueItem, batch_entry_size

BATCH_BYTES = 256 * 1024  # conservative: the historical SendMessageBatch limit
BATCH_RETRIES = 4
Prepared = tuple[EnqueueItem, str, dict[str, Any]]  # an item, its job id, its SQS entry


def batch_chunks(entries: Sequence[Prepared]) -> Iterable[list[Prepared]]:
    chunk: list[Prepared] = []
    size = 0
    for entry in entries:
        entry_size = batch_entry_size(entry[2])
        if chunk and (len(chunk) == SQS_MAX_BATCH or size + entry_size > BATCH_BYTES):
            yield chunk
            chunk, size = [], 0
        chunk.append(entry)
        size += entry_size
    if chunk:
        yield chunk


def send_batch(sqs: Any, url: str, chunk: list[Prepared]) -> list[tuple[EnqueueItem, str, str]]:
    """Sends one batch, retrying transient entry failures; returns what still failed."""
    todo = {job_id: (item, entry) for item, job_id, entry in chunk}
    failed: list[tuple[EnqueueItem, str, str]] = []
    for attempt in range(BATCH_RETRIES):
        if attempt:
            time.sleep(0.05 * 2**attempt)
        response = sqs.send_message_batch(
            QueueUrl=url,
            Entries=[{"Id": job_id, **entry} for job_id, (_, entry) in todo.items()],
        )
        retry: dict[str, tuple[EnqueueItem, dict[str, Any]]] = {}
        for failure in response.get("Failed", []):
            job_id = failure["Id"]
            reason = f"{failure.get('Code', '?')}: {failure.get('Message', '')}"
            if failure.get("SenderFault"):
                failed.append((todo[job_id][0], job_id, reason))  # retrying cannot help
            else:
                retry[job_id] = todo[job_id]
        todo = retry
        if not todo:
            return failed
    failed.extend(
        (item, job_id, "still failing after retries") for job_id, (item, _) in todo.items()
    )
    return failed
