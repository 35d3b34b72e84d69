"""Plans and quotas: which plan an account is on, and what it may still use.

- `PlanBook` (book.py): an account's effective plan, read with its account and cached briefly
"""

from skald.services.plans.book import PlanBook

__all__ = ["PlanBook"]
