"""Semantic worker: SQS semantic queue -> summarise (L0/L1) and index changed files."""

from skald.jobs.lambda_workers import default_container, default_max_attempts, make_sqs_worker

handler = make_sqs_worker(default_container, max_attempts=default_max_attempts())
