"""Skald: a context database for AI agents."""

__version__ = "0.1.0"
