"""Setup function, invoked by the CDK app at deploy time (what `skald admin init` runs): the
search index behind its alias, its pipeline; checks the bucket, table and queues exist."""

from skald.compose.entrypoints import lambda_handler

handler = lambda_handler("setup")
