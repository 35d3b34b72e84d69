"""The AWS backend.

- s3/: BlobStore on one S3 bucket
- dynamo/: the state, session and audit stores, counters, dedup claims and the recall ledger
  in one DynamoDB table
- opensearch/: SearchIndex on OpenSearch (a domain or a Serverless collection)
- sqs/: JobQueue on SQS, with counters, dedup claims and large payloads in S3
- tenancy/: which items are an account's (rules.py) and the tenant-scoped clients
- factory.py: AwsAdapterFactory: one builder per port, and setup()
- setup.py: `skald admin init` on AWS: what must exist, and the search index behind its alias
- scheduler.py: EventBridgeScheduler: one-shot timers
- secrets.py: the root API key from Secrets Manager
- metrics.py: EmfMetrics: CloudWatch embedded metric format
- local_stack.py: `skald serve --backend aws-local`: moto and osmem-server (dev only)
"""

__all__ = [
    "dynamo",
    "factory",
    "local_stack",
    "metrics",
    "opensearch",
    "scheduler",
    "s3",
    "secrets",
    "setup",
    "sqs",
    "tenancy",
]
