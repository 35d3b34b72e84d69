"""Plans: what an account may use. A named tier from the catalogue (`TIERS`) with the account's
own overrides on top (set by root in the account's settings); None in a limit is unlimited.

- limits.py: `Plan`, the limit names, `resolve` (settings -> the effective plan)
- bucket.py: `TokenBucket`, the request rate rule (`retry_after_s`: its Retry-After)
- settings.py: the settings route's patch of a plan and its limits, and its views
- edge.py: the edge's usage plans: an account's API Gateway key value, a tier's throttle
"""

from skald.domain.plans.bucket import TokenBucket, retry_after_s
from skald.domain.plans.edge import (
    edge_key_name,
    edge_key_value,
    edge_plan_name,
    edge_throttle,
)
from skald.domain.plans.limits import (
    LIMITS,
    TIERS,
    UNLIMITED,
    Plan,
    plan_overrides,
    resolve,
)

__all__ = [
    "LIMITS",
    "TIERS",
    "UNLIMITED",
    "Plan",
    "TokenBucket",
    "edge_key_name",
    "edge_key_value",
    "edge_plan_name",
    "edge_throttle",
    "plan_overrides",
    "resolve",
    "retry_after_s",
]
