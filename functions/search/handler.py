"""Search function: find, search, grep and glob routes."""

from skald.api.app import SEARCH_ROUTERS
from skald.api.lambda_entry import build_handler

handler = build_handler(SEARCH_ROUTERS)
