"""Content function: fs, content, resources, tasks, system and admin routes."""

from skald.compose.entrypoints import lambda_handler

handler = lambda_handler("content")
