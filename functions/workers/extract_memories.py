"""Memory worker: SQS memory queue -> commit phase 2 (extract memories from an archive)."""

from skald.jobs.lambda_workers import default_container, default_max_attempts, make_sqs_worker

handler = make_sqs_worker(default_container, max_attempts=default_max_attempts())
