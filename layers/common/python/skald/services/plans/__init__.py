"""Plans and quotas: which plan an account is on, and what it may still use.

- `PlanBook` (book.py): an account's effective plan, read with its account and cached briefly
- `RateLimits` (rate.py): the request rate of each account, a token bucket in this process
- `Quotas` (quotas.py): the counted limits (sessions, watches, index records), checked by the
  services before they write
- `AccountSettings` (settings.py): the settings route: an account's plan read and changed
- `EdgeKeys` (edge.py): each account's API Gateway key in its tier's usage plan (AWS only)
"""

from skald.services.plans.book import PlanBook
from skald.services.plans.edge import EdgeKeys, EdgeSynced
from skald.services.plans.quotas import Quotas
from skald.services.plans.rate import RateLimits
from skald.services.plans.settings import AccountSettings, AccountSettingsView

__all__ = [
    "AccountSettings",
    "AccountSettingsView",
    "EdgeKeys",
    "EdgeSynced",
    "PlanBook",
    "Quotas",
    "RateLimits",
]
