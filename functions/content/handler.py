"""Content function: fs, content, resources, tasks, system and admin routes."""

from skald.api.app import CONTENT_ROUTERS
from skald.api.lambda_entry import build_handler

handler = build_handler(CONTENT_ROUTERS)
