"""Sessions function: session, message and commit routes."""

from skald.compose.entrypoints import lambda_handler

handler = lambda_handler("sessions")
