"""Semantic worker: SQS semantic queue -> summarise (L0/L1) and index changed files."""

from skald.compose.entrypoints import lambda_handler

handler = lambda_handler("semantic")
