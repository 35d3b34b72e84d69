"""JobQueue on SQS: one queue per logical queue, each with its DLQ.

- jobqueue.py: SqsJobQueue: the adapter
- messages.py: the messages: limits, attributes, batches
- batches.py: SendMessageBatch: jobs packed by count and size, entry failures retried
- counters.py: per-queue counters and dedup claims (in memory; DynamoDB in dynamo/extras.py)
- inspect.py: approximate counts, dead letters peeked and purged
- payloads.py: ClaimCheck: payloads larger than one message, kept in S3
"""

__all__ = ["batches", "counters", "inspect", "jobqueue", "messages", "payloads"]
