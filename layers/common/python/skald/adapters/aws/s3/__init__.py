"""S3.

- blobstore.py: S3BlobStore: one object per key, conditional writes, read and write ahead
"""

__all__ = ["blobstore"]
