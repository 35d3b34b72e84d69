"""Claim-check for job payloads larger than one SQS message (the "SQS extended client" pattern).

An SQS message (body + attributes) is limited to 256 KiB, and a semantic job lists every file
it processes: a fetched repository near the file limit makes a larger payload. Such a payload
is stored as one JSON object in the data bucket, and the message body only carries a small
reference, `{"$payload": {"bucket": ..., "key": ...}}`, next to the payload's short scalar
fields (task, account, user: a dead letter still says whose job it is). Receiving resolves it,
so handlers see the original payload.

* Keys are `_jobs/<queue>/<job_id>.json`. Account ids may not start with `_` (the blob store
  keys an account's data `<account>/...`), so the prefix never collides with account data.
* The object lives as long as the job: deleted when the job is acked (done), kept while the
  job waits for a retry (the retry copy carries the same reference: nothing is uploaded
  again) and while it sits in the DLQ (a redrive must still find it). A lifecycle rule on the
  prefix (JOB_PAYLOAD_EXPIRY_DAYS, longer than any SQS retention) removes what a missed
  delete leaves behind.
* An object that is gone when its message arrives means the job was already done (a copy
  delivered twice, or a message that came back after its ack) or expired: receivers treat
  such a message as done.
* Only the queues the store `serves` offload (those whose jobs can be large: the catalogue
  says which, and grants PutObject/GetObject/DeleteObject on their prefixes only).
* IAM: s3:PutObject on `_jobs/<queue>/*` to send, s3:GetObject and s3:DeleteObject to receive;
  with SSE-KMS, kms:GenerateDataKey / kms:Decrypt through S3.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from botocore.exceptions import ClientError

from skald.adapters.aws.sqs.messages import SQS_MAX_VISIBILITY_S, batch_entry_size
from skald.catalog import JOB_PAYLOAD_EXPIRY_DAYS, JOB_PAYLOAD_PREFIX
from skald.ports import Lease

log = logging.getLogger(__name__)

__all__ = [
    "JOB_PAYLOAD_EXPIRY_DAYS",
    "JOB_PAYLOAD_PREFIX",
    "ClaimCheck",
    "PayloadMissing",
    "PayloadRef",
    "PayloadTooLarge",
    "S3PayloadStore",
    "payload_key",
    "payload_ref",
]

PAYLOAD_REF = "$payload"
SQS_MAX_MESSAGE_BYTES = 256 * 1024  # body + attributes
# Above this (body + attributes) a payload goes to S3: room is left for the attributes a
# retry or a dead letter adds (attempts, error of up to 8,000 characters, failure time).
INLINE_MAX_BYTES = 200 * 1024
KEPT_STRING_CHARS = 256  # a reference keeps the payload's strings up to this long
_MISSING_CODES = {"NoSuchKey", "404", "NotFound"}


class PayloadTooLarge(ValueError):
    """A job's message would exceed SQS's size limit and no payload store takes it."""


class PayloadMissing(RuntimeError):
    """The object a message refers to is gone: its job was done (or expired)."""


@dataclass(frozen=True)
class PayloadRef:
    bucket: str
    key: str

    def body(self, payload: Mapping[str, Any]) -> str:
        """The message body carrying the reference, with the payload's short scalar fields
        (its task, account, user): whoever reads the message without the object, a dead
        letter listed for its account, still knows whose job it is."""
        kept = {k: v for k, v in payload.items() if k != PAYLOAD_REF and _short_scalar(v)}
        return json.dumps({**kept, PAYLOAD_REF: {"bucket": self.bucket, "key": self.key}})


def _short_scalar(value: Any) -> bool:
    if isinstance(value, str):
        return len(value) <= KEPT_STRING_CHARS
    return value is None or isinstance(value, bool | int | float)


def payload_ref(payload: Mapping[str, Any]) -> PayloadRef | None:
    """The reference a received body carries instead of its payload, else None."""
    ref = payload.get(PAYLOAD_REF)
    if not isinstance(ref, dict):
        return None
    bucket, key = ref.get("bucket"), ref.get("key")
    if isinstance(bucket, str) and isinstance(key, str) and key.startswith(JOB_PAYLOAD_PREFIX):
        return PayloadRef(bucket, key)
    return None


def payload_key(queue: str, job_id: str) -> str:
    return f"{JOB_PAYLOAD_PREFIX}{queue}/{job_id}.json"


class S3PayloadStore:
    """Where the payloads too large for a message go: one object each in `bucket`."""

    def __init__(
        self,
        s3_client: Any,
        bucket: str,
        *,
        queues: Collection[str] | None = None,
        inline_max_bytes: int = INLINE_MAX_BYTES,
    ) -> None:
        if not 0 < inline_max_bytes <= SQS_MAX_MESSAGE_BYTES:
            raise ValueError("inline_max_bytes must be within SQS's message size limit")
        self._s3 = s3_client
        self.bucket = bucket
        self._queues = frozenset(queues) if queues is not None else None
        self.inline_max_bytes = inline_max_bytes

    def serves(self, queue: str) -> bool:
        """Whether payloads of `queue` may be offloaded (None: every queue)."""
        return self._queues is None or queue in self._queues

    def put(self, queue: str, job_id: str, body: str) -> PayloadRef:
        ref = PayloadRef(self.bucket, payload_key(queue, job_id))
        self._s3.put_object(
            Bucket=ref.bucket, Key=ref.key, Body=body.encode(), ContentType="application/json"
        )
        return ref

    def get(self, ref: PayloadRef) -> dict[str, Any]:
        """The payload `ref` names. Raises PayloadMissing when it is gone, ValueError for a
        reference outside this store (never read a key a message body chose freely)."""
        if ref.bucket != self.bucket or not ref.key.startswith(JOB_PAYLOAD_PREFIX):
            raise ValueError(
                f"job payload reference outside the store: s3://{ref.bucket}/{ref.key}"
            )
        try:
            response = self._s3.get_object(Bucket=ref.bucket, Key=ref.key)
        except ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code", "")) in _MISSING_CODES:
                raise PayloadMissing(f"job payload s3://{ref.bucket}/{ref.key} is gone") from None
            raise
        payload = json.loads(response["Body"].read())
        if not isinstance(payload, dict):
            raise ValueError(f"job payload s3://{ref.bucket}/{ref.key} is not a JSON object")
        return payload

    def delete(self, ref: PayloadRef) -> None:
        """Best effort: a failed delete leaves the object to the lifecycle rule."""
        if ref.bucket != self.bucket:
            return
        try:
            self._s3.delete_object(Bucket=ref.bucket, Key=ref.key)
        except Exception:
            log.warning(
                "could not delete job payload s3://%s/%s", ref.bucket, ref.key, exc_info=True
            )


class ClaimCheck:
    """SqsJobQueue's side of the claim-check: which messages go to the store, and the
    reference of each leased job's payload, by receipt, until the job is settled (ack deletes
    the object; a retry copy or a dead letter carries the reference on). Thread-safe."""

    def __init__(self, store: S3PayloadStore | None) -> None:
        self._store = store
        self._refs: dict[str, tuple[PayloadRef, float]] = {}
        self._lock = threading.Lock()

    def must_offload(self, queue: str, entry: Mapping[str, Any]) -> bool:
        """Whether the SendMessage entry's body must go to the store; raises PayloadTooLarge
        when the message cannot be sent and no store serves the queue."""
        size = batch_entry_size(dict(entry))
        store = self._store
        if store is not None and store.serves(queue):
            return size > store.inline_max_bytes
        if size > SQS_MAX_MESSAGE_BYTES:
            raise PayloadTooLarge(
                f"a job for queue '{queue}' makes a {size}-byte message, over SQS's "
                f"{SQS_MAX_MESSAGE_BYTES} bytes, and no payload store is configured for it"
            )
        return False

    def offload(
        self, queue: str, job_id: str, entry: dict[str, Any], payload: Mapping[str, Any]
    ) -> PayloadRef | None:
        """Uploads the entry's body (`payload` as JSON) when it must be, and puts the
        reference in its place."""
        if self._store is None or not self.must_offload(queue, entry):
            return None
        ref = self._store.put(queue, job_id, entry["MessageBody"])
        entry["MessageBody"] = ref.body(payload)
        return ref

    def drop(self, refs: Iterable[PayloadRef]) -> None:
        if self._store is not None:
            for ref in refs:
                self._store.delete(ref)

    def remember(self, receipt: str, ref: PayloadRef) -> None:
        now = time.monotonic()
        with self._lock:
            # A lease never outlives SQS's longest visibility: older entries were abandoned.
            stale = [r for r, (_, at) in self._refs.items() if now - at > SQS_MAX_VISIBILITY_S]
            for r in stale:
                del self._refs[r]
            self._refs[receipt] = (ref, now)

    def forget(self, receipt: str) -> PayloadRef | None:
        with self._lock:
            held = self._refs.pop(receipt, None)
        return held[0] if held is not None else None


class LargePayloads:
    """SqsJobQueue's side of large payloads: references resolved when a job is received, the
    stored object deleted once its job is done (a base class)."""

    _payloads: S3PayloadStore | None
    _claims: ClaimCheck

    def _delete(self, url: str, receipt: str) -> bool:
        raise NotImplementedError

    def _open(self, url: str, lease: Lease) -> Lease | None:
        """The lease with its payload resolved; None when the payload is gone (the job was
        done: the message is deleted)."""
        ref = payload_ref(lease.job.payload)
        if ref is None:
            return lease
        job = lease.job
        if self._payloads is None:
            log.error(
                "job %s (%s) carries a payload reference and no payload store is configured",
                job.job_id,
                job.kind,
            )
            return lease
        try:
            payload = self._payloads.get(ref)
        except PayloadMissing:
            log.warning(
                "job %s (%s): payload %s is gone, the job was done; dropping the message",
                job.job_id,
                job.kind,
                ref.key,
            )
            self._delete(url, lease.receipt)
            return None
        except ValueError:
            log.exception("job %s (%s): unreadable payload reference", job.job_id, job.kind)
            return lease
        self._claims.remember(lease.receipt, ref)
        return Lease(job=replace(job, payload=payload), receipt=lease.receipt)

    def open_payload(self, payload: dict[str, Any]) -> dict[str, Any] | None:
        """The payload of a received message body: the body itself, or the object its
        reference names (a worker fed by a Lambda event source mapping calls it); None when
        that object is gone: the job was done."""
        ref = payload_ref(payload)
        if ref is None or self._payloads is None:
            return payload
        try:
            return self._payloads.get(ref)
        except PayloadMissing:
            return None

    def payload_done(self, payload: dict[str, Any]) -> None:
        """Deletes the object a received message body refers to, once its job succeeded (a
        Lambda worker: the event source mapping deletes the message itself)."""
        ref = payload_ref(payload)
        if ref is not None:
            self._claims.drop([ref])
