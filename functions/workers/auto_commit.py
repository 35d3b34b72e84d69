"""Auto-commit worker: the SQS queue EventBridge Scheduler targets (or a direct invocation)
-> commit a session whose idle deadline passed."""

from skald.jobs.lambda_workers import default_container, make_auto_commit_handler

handler = make_auto_commit_handler(default_container)
