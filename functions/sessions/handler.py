"""Sessions function: session, message and commit routes."""

from skald.api.app import SESSION_ROUTERS
from skald.api.lambda_entry import build_handler

handler = build_handler(SESSION_ROUTERS)
