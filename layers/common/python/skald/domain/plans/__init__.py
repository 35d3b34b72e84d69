"""Plans: what an account may use. A named tier from the catalogue (`TIERS`) with the account's
own overrides on top (set by root in the account's settings); None in a limit is unlimited.

- limits.py: `Plan`, the limit names, `resolve` (settings -> the effective plan)
"""

from skald.domain.plans.limits import (
    LIMITS,
    TIERS,
    UNLIMITED,
    Plan,
    plan_overrides,
    resolve,
)

__all__ = ["LIMITS", "TIERS", "UNLIMITED", "Plan", "plan_overrides", "resolve"]
