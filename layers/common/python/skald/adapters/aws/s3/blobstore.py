"""BlobStore on one S3 bucket: key "acme/user/alice/x.md" is the S3 object of the same key.

Design notes (the integrator should know these):

* Conditional writes use S3's own conditional PUT: `if_none_match` sends `If-None-Match: *`,
  `if_match` sends `If-Match: "<etag>"`. 412 PreconditionFailed and 409
  ConditionalRequestConflict (two conditional writes raced) raise BlobPreconditionFailed, as
  does 404 NoSuchKey on an `if_match` write (S3's answer when the key does not exist).
* Objects above `multipart_threshold` go through a multipart upload; the condition is then
  sent on CompleteMultipartUpload (S3 supports both headers there). The condition is also
  checked with a HEAD before uploading, only to fail early instead of uploading megabytes for
  nothing: the atomic check remains the one S3 does on completion. A failed upload is aborted.
* A conditional PUT that botocore retries after a lost response can fail on its own first,
  successful attempt: S3 cannot tell the writers apart (true of any conditional PUT).
* SSE settings (`sse` = "AES256" | "aws:kms" | "aws:kms:dsse", `kms_key_id`) are sent on every
  write: PUT, CreateMultipartUpload and CopyObject (a copy does not inherit them).
* Etags are S3's, without quotes, and opaque: MD5 for simple unencrypted PUTs, something else
  for multipart and SSE-KMS objects. Rewriting identical bytes may give the same etag again;
  a compare-and-swap then succeeds, which is harmless since the content is the same.
* `put` returns `modified` from the response's Date header (S3 returns no LastModified on
  PUT), saving a HEAD; head/list/copy return S3's LastModified.
* `delete` HEADs first because S3's DeleteObject succeeds on a missing key: two concurrent
  deletes of one key may both return True.
* `copy` is one CopyObject, so sources above 5 GB are out of scope (they would need
  UploadPartCopy). It pins the source version it HEADed with CopySourceIfMatch so the
  returned size matches the copied bytes.
* IAM: s3:GetObject, PutObject, DeleteObject, ListBucket (without ListBucket a missing key
  answers 403 instead of 404), AbortMultipartUpload; kms:GenerateDataKey/Decrypt with SSE-KMS.
  Tenant-scoped credentials may list their account's prefix only: should S3 then answer a
  missing key with 403, a listing of that one key (which they may make) tells a missing key
  from a refused one (`_missing`); a refused listing leaves the 403 an error.
* The pools of get_many, head_many and put_many run each request in a copy of the caller's
  context, so the call's tenant (skald.domain.access.call_context) goes with it.
"""

from __future__ import annotations

import builtins
import contextvars
import math
import time
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext, suppress
from email.utils import parsedate_to_datetime
from typing import Any, NoReturn

from botocore.exceptions import BotoCoreError, ClientError

from skald.domain.ops.scan_budget import ScanBudget
from skald.domain.paths.uri import dot_key_below
from skald.ports import BlobInfo, BlobListing, BlobNotFound, BlobPreconditionFailed

MIN_PART_SIZE = 5 * 1024 * 1024  # S3's minimum for every part but the last
MAX_PARTS = 10_000
_COPY_RETRIES = 5
_PRECONDITION_CODES = {"PreconditionFailed", "ConditionalRequestConflict"}
_NOT_FOUND_CODES = {"NoSuchKey", "404", "NotFound"}
_DENIED_CODES = {"AccessDenied", "403", "Forbidden"}
# get_many's read-ahead: GETs in flight (the client's connection pool holds as many: see the
# adapter factory) and their expected bytes.
READ_AHEAD = 16
READ_AHEAD_BYTES = 32 * 1024 * 1024
# put_many's PUTs at once (their payloads are in memory already: no byte bound).
WRITE_AHEAD = 16


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _status(exc: ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


def _unquote(etag: str) -> str:
    return etag.strip('"')


def _quote(etag: str) -> str:
    return etag if etag.startswith('"') else f'"{etag}"'


def _epoch(value: Any) -> float:
    # boto3 parses LastModified into an aware datetime.
    return float(value.timestamp())


def _date_header(response: dict[str, Any]) -> float:
    headers = response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
    raw = headers.get("date")
    if raw:
        try:
            return parsedate_to_datetime(raw).timestamp()
        except (TypeError, ValueError):
            pass
    return time.time()


class S3BlobStore:
    """BlobStore over an S3 bucket. Thread-safe (boto3 clients are); see the module notes."""

    def __init__(
        self,
        client: Any,
        bucket: str,
        *,
        sse: str | None = None,
        kms_key_id: str | None = None,
        multipart_threshold: int = 8 * 1024 * 1024,
        list_page_size: int = 1000,
    ) -> None:
        if kms_key_id is not None and sse is None:
            sse = "aws:kms"
        if multipart_threshold < 1:
            raise ValueError("multipart_threshold must be >= 1")
        self._s3 = client
        self._bucket = bucket
        self._sse: dict[str, str] = {}
        if sse is not None:
            self._sse["ServerSideEncryption"] = sse
        if kms_key_id is not None:
            self._sse["SSEKMSKeyId"] = kms_key_id
        self._threshold = multipart_threshold
        self._page_size = max(1, min(1000, list_page_size))

    @property
    def bucket(self) -> str:
        return self._bucket

    # ---------------------------------------------------------------------------------------
    # reads

    def get(self, key: str) -> bytes:
        try:
            response = self._s3.get_object(Bucket=self._bucket, Key=key)
        except ClientError as exc:
            if _code(exc) in _NOT_FOUND_CODES or self._missing(key, exc):
                raise BlobNotFound(key) from None
            raise
        body = response["Body"]
        try:
            data: bytes = body.read()
        finally:
            body.close()
        return data

    def head(self, key: str) -> BlobInfo | None:
        try:
            response = self._s3.head_object(Bucket=self._bucket, Key=key)
        except ClientError as exc:
            # HEAD has no body, so the code is the bare status ("404").
            if _status(exc) == 404 or _code(exc) in _NOT_FOUND_CODES or self._missing(key, exc):
                return None
            raise
        return BlobInfo(
            key=key,
            size=int(response["ContentLength"]),
            modified=_epoch(response["LastModified"]),
            etag=_unquote(response["ETag"]),
        )

    def head_many(self, keys: Sequence[str]) -> builtins.list[BlobInfo | None]:
        """Up to READ_AHEAD HEADs at once: a listing's subfolders each wait a round trip."""
        if len(keys) <= 1:
            return [self.head(key) for key in keys]
        with ThreadPoolExecutor(
            min(len(keys), READ_AHEAD), thread_name_prefix="skald-s3-head"
        ) as pool:
            futures = [_submit(pool, self.head, key) for key in keys]
        return [future.result() for future in futures]

    def list(self, prefix: str, *, delimiter: str | None = "/") -> BlobListing:
        blobs: builtins.list[BlobInfo] = []
        prefixes: builtins.list[str] = []
        params: dict[str, Any] = {
            "Bucket": self._bucket,
            "Prefix": prefix,
            "MaxKeys": self._page_size,
        }
        if delimiter is not None:
            params["Delimiter"] = delimiter
        while True:
            page = self._s3.list_objects_v2(**params)
            blobs.extend(self._info(obj) for obj in page.get("Contents", []))
            prefixes.extend(p["Prefix"] for p in page.get("CommonPrefixes", []))
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                break
            params["ContinuationToken"] = token
        # Pages are each sorted and consecutive, so the concatenation is sorted already.
        return BlobListing(blobs=blobs, prefixes=prefixes)

    def iter_all(self, prefix: str, *, hidden: bool = True) -> Iterator[BlobInfo]:
        paginator = self._s3.get_paginator("list_objects_v2")
        pages = paginator.paginate(
            Bucket=self._bucket, Prefix=prefix, PaginationConfig={"PageSize": self._page_size}
        )
        for page in pages:
            for obj in page.get("Contents", []):
                if hidden or not dot_key_below(prefix, obj["Key"]):
                    yield self._info(obj)

    def get_many(self, items: Iterable[tuple[str, int]]) -> Generator[bytes | None, None, None]:
        """Up to READ_AHEAD GETs in flight, while their expected sizes stay under
        READ_AHEAD_BYTES (one more is always allowed): each GET waits a round trip on S3, so
        reading one file after another spends a grep's time waiting (a large tree would run
        past API Gateway's 29 s limit)."""
        source = iter(items)
        pending: deque[tuple[Future[bytes | None], int]] = deque()
        in_flight = 0
        more = True
        pool = ThreadPoolExecutor(READ_AHEAD, thread_name_prefix="skald-s3-read")
        try:
            while True:
                while (
                    more
                    and len(pending) < READ_AHEAD
                    and (not pending or in_flight < READ_AHEAD_BYTES)
                ):
                    item = next(source, None)
                    if item is None:
                        more = False
                        break
                    key, size = item
                    pending.append((_submit(pool, self._get_or_none, key), size))
                    in_flight += size
                if not pending:
                    return
                future, size = pending.popleft()
                in_flight -= size
                yield future.result()
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def read_tree(
        self,
        prefix: str,
        *,
        enter: Callable[[str], bool],
        admit: Callable[[str], bool] | None,
        budget: ScanBudget,
    ) -> Generator[tuple[str, bytes], None, None]:
        """The listing's objects (`_entered_folders`), read ahead by get_many."""
        inside = _entered_folders(prefix, enter)
        chosen: deque[str] = deque()

        def to_read() -> Iterator[tuple[str, int]]:
            for info in self.iter_all(prefix, hidden=False):
                if (
                    inside(info.key.rpartition("/")[0])
                    and (admit is None or admit(info.key))
                    and budget.take(info.size)
                ):
                    chosen.append(info.key)
                    yield info.key, info.size

        contents = self.get_many(to_read())
        try:
            for data in contents:
                key = chosen.popleft()
                if data is not None:
                    yield key, data
        finally:
            contents.close()

    def walk_keys(self, prefix: str, *, enter: Callable[[str], bool]) -> Iterator[str]:
        inside = _entered_folders(prefix, enter)
        for info in self.iter_all(prefix, hidden=False):
            if inside(info.key.rpartition("/")[0]):
                yield info.key

    def put_many(self, items: Sequence[tuple[str, bytes]]) -> builtins.list[BlobInfo]:
        """Up to WRITE_AHEAD PUTs at once (a batch write's group of 256 blobs one after
        another would wait on S3 for seconds). Each PUT is durable when S3 answers it, so
        there is nothing to flush together. On an error, every PUT already started is awaited
        before the first error (in item order) is raised: those that succeeded stay."""
        if len({key for key, _ in items}) < len(items):
            raise ValueError("put_many writes each key once")
        if len(items) <= 1:
            return [self.put(key, data) for key, data in items]
        with ThreadPoolExecutor(
            min(len(items), WRITE_AHEAD), thread_name_prefix="skald-s3-write"
        ) as pool:
            futures = [_submit(pool, self.put, key, data) for key, data in items]
        return [future.result() for future in futures]

    def batch(self) -> AbstractContextManager[None]:
        # Each PUT is durable when S3 answers it: nothing is left to do at the end.
        return nullcontext()

    def _missing(self, key: str, exc: ClientError) -> bool:
        """Whether a read refused with 403 was of a missing key (see the module notes)."""
        if _code(exc) not in _DENIED_CODES and _status(exc) != 403:
            return False
        try:
            page = self._s3.list_objects_v2(Bucket=self._bucket, Prefix=key, MaxKeys=1)
        except ClientError:
            return False
        # The key itself sorts before every longer key it prefixes.
        return not any(obj["Key"] == key for obj in page.get("Contents", []))

    def _get_or_none(self, key: str) -> bytes | None:
        try:
            return self.get(key)
        except BlobNotFound:
            return None

    @staticmethod
    def _info(obj: dict[str, Any]) -> BlobInfo:
        return BlobInfo(
            key=obj["Key"],
            size=int(obj["Size"]),
            modified=_epoch(obj["LastModified"]),
            etag=_unquote(obj["ETag"]),
        )

    # ---------------------------------------------------------------------------------------
    # writes

    def put(
        self,
        key: str,
        data: bytes,
        *,
        if_none_match: bool = False,
        if_match: str | None = None,
    ) -> BlobInfo:
        conditions: dict[str, str] = {}
        if if_none_match:
            conditions["IfNoneMatch"] = "*"
        if if_match is not None:
            conditions["IfMatch"] = _quote(if_match)
        try:
            if len(data) > self._threshold:
                return self._put_multipart(key, data, conditions, if_match)
            response = self._s3.put_object(
                Bucket=self._bucket, Key=key, Body=data, **conditions, **self._sse
            )
        except ClientError as exc:
            self._raise_put_error(
                key, exc, conditional=bool(conditions), compare=if_match is not None
            )
        return BlobInfo(
            key=key,
            size=len(data),
            modified=_date_header(response),
            etag=_unquote(response["ETag"]),
        )

    def _raise_put_error(
        self, key: str, exc: ClientError, *, conditional: bool, compare: bool = False
    ) -> NoReturn:
        code = _code(exc)
        if conditional and (code in _PRECONDITION_CODES or _status(exc) in (409, 412)):
            raise BlobPreconditionFailed(f"{key}: {code or _status(exc)}") from exc
        if conditional and (code in _NOT_FOUND_CODES or compare and self._missing(key, exc)):
            # If-Match on a key that does not exist.
            raise BlobPreconditionFailed(f"{key} does not exist") from exc
        raise exc

    def _part_size(self, size: int) -> int:
        return max(self._threshold, MIN_PART_SIZE, math.ceil(size / MAX_PARTS))

    def _put_multipart(
        self, key: str, data: bytes, conditions: dict[str, str], if_match: str | None
    ) -> BlobInfo:
        if if_match is not None or "IfNoneMatch" in conditions:
            # Early failure only (see the module notes): S3 checks again, atomically, on
            # completion.
            current = self.head(key)
            if "IfNoneMatch" in conditions and current is not None:
                raise BlobPreconditionFailed(f"{key} exists")
            if if_match is not None and (current is None or current.etag != _unquote(if_match)):
                raise BlobPreconditionFailed(f"{key}: etag mismatch")
        # An explicit checksum algorithm, as s3transfer does: botocore checksums each part by
        # default, and completion then needs every part's checksum.
        created = self._s3.create_multipart_upload(
            Bucket=self._bucket, Key=key, ChecksumAlgorithm="CRC32", **self._sse
        )
        upload_id = created["UploadId"]
        try:
            parts: builtins.list[dict[str, Any]] = []
            step = self._part_size(len(data))
            view = memoryview(data)
            for number, start in enumerate(range(0, len(data), step), start=1):
                uploaded = self._s3.upload_part(
                    Bucket=self._bucket,
                    Key=key,
                    UploadId=upload_id,
                    PartNumber=number,
                    Body=bytes(view[start : start + step]),
                    ChecksumAlgorithm="CRC32",
                )
                part: dict[str, Any] = {"ETag": uploaded["ETag"], "PartNumber": number}
                if "ChecksumCRC32" in uploaded:
                    part["ChecksumCRC32"] = uploaded["ChecksumCRC32"]
                parts.append(part)
            response = self._s3.complete_multipart_upload(
                Bucket=self._bucket,
                Key=key,
                UploadId=upload_id,
                MultipartUpload={"Parts": parts},
                **conditions,
            )
        except BaseException:
            self._abort(key, upload_id)
            raise
        return BlobInfo(
            key=key,
            size=len(data),
            modified=_date_header(response),
            etag=_unquote(response["ETag"]),
        )

    def _abort(self, key: str, upload_id: str) -> None:
        # The original error matters more; a bucket lifecycle rule should reap what an abort
        # could not (AbortIncompleteMultipartUpload).
        with suppress(ClientError, BotoCoreError):
            self._s3.abort_multipart_upload(Bucket=self._bucket, Key=key, UploadId=upload_id)

    def copy(self, src: str, dst: str) -> BlobInfo:
        for _ in range(_COPY_RETRIES):
            source = self.head(src)
            if source is None:
                raise BlobNotFound(src)
            try:
                response = self._s3.copy_object(
                    Bucket=self._bucket,
                    Key=dst,
                    CopySource={"Bucket": self._bucket, "Key": src},
                    CopySourceIfMatch=_quote(source.etag),
                    **self._sse,
                )
            except ClientError as exc:
                code = _code(exc)
                if code in _NOT_FOUND_CODES:
                    raise BlobNotFound(src) from None
                if code in _PRECONDITION_CODES or _status(exc) == 412:
                    continue  # the source changed since the HEAD: copy the new version
                raise
            result = response["CopyObjectResult"]
            return BlobInfo(
                key=dst,
                size=source.size,
                modified=_epoch(result["LastModified"]),
                etag=_unquote(result["ETag"]),
            )
        raise BlobPreconditionFailed(f"{src} kept changing during the copy")

    def delete(self, key: str) -> bool:
        if self.head(key) is None:
            return False
        self._s3.delete_object(Bucket=self._bucket, Key=key)
        return True

    def purge_prefix(self, prefix: str, *, limit: int = 1000) -> int:
        """Every version and delete marker below `prefix` (the bucket is versioned: a plain
        delete would leave the content behind as a noncurrent version), up to `limit`, in
        DeleteObjects batches of 1,000."""
        if not prefix.endswith("/"):
            raise ValueError(f"a folder's key ends in '/', not {prefix!r}")
        removed = 0
        while removed < limit:
            page = self._s3.list_object_versions(
                Bucket=self._bucket, Prefix=prefix, MaxKeys=min(1000, limit - removed)
            )
            doomed = [
                {"Key": v["Key"], "VersionId": v["VersionId"]}
                for v in (*page.get("Versions", []), *page.get("DeleteMarkers", []))
            ]
            if not doomed:
                break
            resp = self._s3.delete_objects(
                Bucket=self._bucket, Delete={"Objects": doomed, "Quiet": True}
            )
            errors = resp.get("Errors") or []
            if errors:
                first = errors[0]
                raise RuntimeError(
                    f"S3 refused to delete {len(errors)} object version(s) "
                    f"under {prefix}: {first.get('Code')} {first.get('Key')}"
                )
            removed += len(doomed)
        return removed


def _submit(pool: ThreadPoolExecutor, fn: Callable[..., Any], *args: Any) -> Future[Any]:
    """`fn(*args)` on the pool, in a copy of the caller's context (one copy per task: a
    context runs in one thread at a time)."""
    return pool.submit(contextvars.copy_context().run, fn, *args)


def _entered_folders(prefix: str, enter: Callable[[str], bool]) -> Callable[[str], bool]:
    """Whether a folder below `prefix` (a folder's key) is entered: when every folder between
    the prefix and it is. S3 has no folders, so `enter` is asked only of those holding an
    object (parents first), once each."""
    if not prefix.endswith("/") and prefix:
        raise ValueError(f"a folder's key ends in '/', not {prefix!r}")
    entered: dict[str, bool] = {}

    def inside(folder: str) -> bool:
        if len(folder) < len(prefix) or not folder:  # the prefix's own folder
            return True
        known = entered.get(folder)
        if known is None:
            known = entered[folder] = inside(folder.rpartition("/")[0]) and enter(folder)
        return known

    return inside
