"""The S3 blob store's get_many, head_many and put_many keep several requests in flight (S3
answers each in tens of milliseconds: one after another, a grep over thousands of files would
spend minutes waiting, a batch write's group of 256 blobs seconds, and a listing's subfolders
a few too), keep their order, and stay within their bounds. The client here only delays
GetObject, HeadObject and PutObject; S3's semantics are the
conformance suite's (tests/conformance/test_blobstore.py, on moto)."""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.exceptions import ClientError

from skald.adapters.aws.s3 import blobstore as s3_blobstore
from skald.adapters.aws.s3.blobstore import S3BlobStore


class SlowS3:
    """GetObject after `delay_s`, counting how many run at once."""

    def __init__(self, objects: dict[str, bytes], delay_s: float) -> None:
        self.objects, self.delay_s = objects, delay_s
        self.lock = threading.Lock()
        self.running = self.peak = self.calls = 0

    def get_object(self, Bucket: str, Key: str) -> dict[str, Any]:  # noqa: N803 - boto3's names
        with self._call():
            if Key not in self.objects:
                raise ClientError({"Error": {"Code": "NoSuchKey"}}, "GetObject")
            return {"Body": io.BytesIO(self.objects[Key])}

    def head_object(self, Bucket: str, Key: str) -> dict[str, Any]:  # noqa: N803
        with self._call():
            if Key not in self.objects:
                raise ClientError(
                    {
                        "Error": {"Code": "404"},
                        "ResponseMetadata": {
                            "RequestId": "",
                            "HostId": "",
                            "HTTPStatusCode": 404,
                            "HTTPHeaders": {},
                            "RetryAttempts": 0,
                        },
                    },
                    "HeadObject",
                )
            return {
                "ContentLength": len(self.objects[Key]),
                "ETag": f'"{Key}"',
                "LastModified": datetime(2026, 1, 1, tzinfo=UTC),
            }

    def put_object(self, Bucket: str, Key: str, Body: bytes) -> dict[str, Any]:  # noqa: N803
        with self._call():
            if Key.endswith("/denied"):
                raise ClientError({"Error": {"Code": "AccessDenied"}}, "PutObject")
            self.objects[Key] = Body
            return {"ETag": f'"{Key}"', "ResponseMetadata": {"HTTPHeaders": {}}}

    @contextmanager
    def _call(self) -> Iterator[None]:
        with self.lock:
            self.running += 1
            self.calls += 1
            self.peak = max(self.peak, self.running)
        try:
            time.sleep(self.delay_s)
            yield
        finally:
            with self.lock:
                self.running -= 1


def store(n: int, delay_s: float = 0.02) -> tuple[S3BlobStore, SlowS3, list[str]]:
    keys = [f"acme/f{i:03d}" for i in range(n)]
    client = SlowS3({k: k.encode() for k in keys}, delay_s)
    return S3BlobStore(client, "bucket"), client, keys


def test_reads_overlap_in_order_and_within_the_bound() -> None:
    blobs, client, keys = store(64)
    got = list(blobs.get_many([*((k, 100) for k in keys), ("acme/gone", 100)]))
    assert got == [k.encode() for k in keys] + [None]
    assert 1 < client.peak <= s3_blobstore.READ_AHEAD


def test_lookups_overlap_in_order_and_within_the_bound() -> None:
    blobs, client, keys = store(40)
    got = blobs.head_many([*keys, "acme/gone", keys[0]])
    assert [None if info is None else (info.key, info.size) for info in got] == [
        (k, len(k)) for k in keys
    ] + [None, (keys[0], len(keys[0]))]
    assert 1 < client.peak <= s3_blobstore.READ_AHEAD
    client.peak = 0
    assert blobs.head_many([keys[1]])[0] is not None  # one HEAD: no pool
    assert client.peak == 1


def test_large_files_are_read_one_at_a_time() -> None:
    blobs, client, keys = store(6, delay_s=0.01)
    size = s3_blobstore.READ_AHEAD_BYTES  # each alone reaches the byte bound
    assert list(blobs.get_many((k, size) for k in keys)) == [k.encode() for k in keys]
    assert client.peak == 1


def test_closing_early_stops_the_reads() -> None:
    blobs, client, keys = store(200)

    def items() -> Iterator[tuple[str, int]]:
        yield from ((k, 10) for k in keys)

    contents = blobs.get_many(items())
    assert next(contents) == keys[0].encode()
    contents.close()
    time.sleep(0.1)
    assert client.calls <= 1 + s3_blobstore.READ_AHEAD
    assert client.running == 0


def test_writes_overlap_within_the_bound_and_answer_in_order() -> None:
    blobs, client, _ = store(0)
    items = [(f"acme/new{i:03d}", f"body {i}".encode()) for i in range(40)]
    infos = blobs.put_many(items)
    assert [info.key for info in infos] == [key for key, _ in items]
    assert all(client.objects[key] == data for key, data in items)
    assert 1 < client.peak <= s3_blobstore.WRITE_AHEAD
    client.peak = 0
    blobs.put_many([("acme/one", b"1")])  # one PUT: no pool
    assert client.peak == 1


def test_a_failed_write_waits_for_the_others_and_keeps_them() -> None:
    blobs, client, _ = store(0)
    items = [(f"acme/w{i:02d}", b"x") for i in range(20)]
    items.insert(3, ("acme/denied", b"no"))
    with pytest.raises(ClientError):
        blobs.put_many(items)
    assert client.running == 0  # nothing still in flight once it raised
    assert all(client.objects.get(key) == b"x" for key, _ in items if key != "acme/denied")
