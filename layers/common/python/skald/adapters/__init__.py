"""Adapters: the ports implemented for each backend. Only here (and in api/) do I/O libraries,
SDKs and frameworks appear.

- local/: the embedded backend of `skald serve`: a directory, SQLite, the embedded index
- aws/: the AWS backend: S3, DynamoDB, OpenSearch, SQS, EventBridge Scheduler
- models/: embedders and language models: the packaged ONNX embedder, OpenAI-compatible
  endpoints, Bedrock
- parsers/: documents and media turned into Markdown (LibraryParsers)
- fetch/: remote sources over guarded HTTP, archives and git (NetworkFetcher)
- factory.py: what every backend's adapter factory offers (CachingFactory, SetupReport)
- heap.py, libc.py: returning freed memory to the system; calling libc
"""

__all__ = ["aws", "factory", "fetch", "heap", "libc", "local", "models", "parsers"]
