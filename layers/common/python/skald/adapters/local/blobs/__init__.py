"""Blobs on a local directory.

- blobstore.py: LocalBlobStore: one file per key, atomic writes, conditional puts
- tree.py: walking a blob tree in key order
- recall_ledger.py: BlobRecallLedger: a session's recall turns as one JSON blob beside it
"""

__all__ = ["blobstore", "recall_ledger", "tree"]
