"""Auto-commit worker: the SQS queue EventBridge Scheduler targets (or a direct invocation)
-> commit a session whose idle deadline passed."""

from skald.compose.entrypoints import lambda_handler

handler = lambda_handler("autocommit")
