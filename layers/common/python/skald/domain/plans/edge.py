"""The edge's view of plans: API Gateway throttles each account through a usage plan per tier,
and finds the account's usage plan by an API Gateway API key that the authorizer names for
every request it allows (its `usageIdentifierKey`).

The key's value is derived from the deployment and the account id, so the authorizer names
it without any lookup and the CDK app can compute the root account's at synth time. It is an
identifier, not a credential: with the API's key source set to AUTHORIZER, API Gateway reads
the key from the authorizer's answer only and never from a client's `x-api-key` header (which
carries the caller's Skald key), so knowing a value lets nobody in.
"""

from __future__ import annotations

import hashlib

from skald.domain.plans.limits import Plan

# API Gateway wants API key values of at least 20 characters.
_VALUE_HEX = 40


def edge_key_value(namespace: str, account_id: str) -> str:
    """The value of `account_id`'s API Gateway key in deployment `namespace` (the stack
    name: key values are unique per AWS account and region, so two stacks never share one)."""
    digest = hashlib.sha256(f"{namespace}\0{account_id}".encode()).hexdigest()
    return f"skald-{digest[:_VALUE_HEX]}"


def edge_key_name(namespace: str, account_id: str) -> str:
    """The name of that key, as API Gateway lists it (names need not be unique; values are)."""
    return f"{namespace}/{account_id}"


def edge_plan_name(namespace: str, tier: str) -> str:
    """The name of `tier`'s usage plan in deployment `namespace`: the stack names its plans so,
    and the app finds their ids by these names (passing the ids to the functions would make a
    dependency cycle: the plans need the stage, the stage the functions)."""
    return f"{namespace}-{tier}"


def edge_throttle(plan: Plan) -> tuple[float, int] | None:
    """(requests per second, burst) of `plan`'s usage plan, or None: no throttle beyond the
    stage's. A rate without a burst gets a burst of one second's requests."""
    if plan.rate_per_s is None:
        return None
    burst = plan.burst if plan.burst is not None else max(1, int(plan.rate_per_s))
    return plan.rate_per_s, burst
