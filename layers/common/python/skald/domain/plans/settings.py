"""The plan part of an account's settings: what a PATCH of the settings route may change, and
how a change applies.

A patch is `{"plan": "<tier>" | null, "limits": {"<limit>": <number> | null | "default"}}`,
both keys optional:
- `plan`: the account's tier; null drops the account's own choice (the deployment's default
  tier applies again);
- a limit set to a number overrides the tier's value, set to null it overrides it with
  "unlimited", set to "default" it drops the override (the tier's value applies again).
Any other key is refused by name: Skald keeps no other account setting (OpenViking's
`agent_evolution` included). Every other key already stored in the settings is left alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from skald.domain.errors import InvalidArgument
from skald.domain.plans.limits import LIMITS, TIERS, Plan, plan_overrides, resolve

PATCHABLE = ("plan", "limits")
DEFAULT = "default"  # a limit's value in a patch that drops its override


def check_patch(patch: Mapping[str, Any]) -> None:
    """Refuses unknown keys, naming what is supported."""
    unknown = sorted(set(patch) - set(PATCHABLE))
    if unknown:
        hint = "; Skald has no agent evolution setting" if "agent_evolution" in unknown else ""
        raise InvalidArgument(
            f"unsupported account setting(s): {', '.join(unknown)}; supported: "
            f"{', '.join(PATCHABLE)}{hint}",
            {"unsupported": unknown, "supported": list(PATCHABLE)},
        )
    if not patch:
        raise InvalidArgument(f"nothing to change: send one of {', '.join(PATCHABLE)}")


def check_tier(name: Any) -> str:
    if not isinstance(name, str) or name not in TIERS:
        raise InvalidArgument(
            f"unknown plan {name!r}; known: {', '.join(TIERS)}",
            {"plan": name, "known": list(TIERS)},
        )
    return name


def apply_patch(
    settings: Mapping[str, Any], patch: Mapping[str, Any], default_tier: str
) -> dict[str, Any]:
    """The settings after `patch` (validated as a whole: nothing applies when a part is bad)."""
    check_patch(patch)
    out = dict(settings)
    if "plan" in patch:
        if patch["plan"] is None:
            out.pop("plan", None)
        else:
            out["plan"] = check_tier(patch["plan"])
    if "limits" in patch:
        raw = patch["limits"]
        if not isinstance(raw, Mapping):
            raise InvalidArgument("limits must be an object of limit names to values")
        limits = dict(out.get("limits") or {})
        checked = plan_overrides({n: None if v == DEFAULT else v for n, v in raw.items()})
        for name, value in checked.items():
            if raw[name] == DEFAULT:
                limits.pop(name, None)
            else:
                limits[name] = value
        if limits:
            out["limits"] = limits
        else:
            out.pop("limits", None)
    resolve(out, default_tier)  # the whole stays valid
    return out


def check_initial(settings: Mapping[str, Any] | None, default_tier: str) -> dict[str, Any]:
    """The settings of a new account: a plan and limits, when given, must be valid."""
    out = dict(settings or {})
    if "plan" in out:
        check_tier(out["plan"])
    if "limits" in out:
        out["limits"] = plan_overrides(out["limits"])
    resolve(out, default_tier)
    return out


def effective(plan: Plan) -> dict[str, Any]:
    """The effective settings: the plan's name and every limit (null: unlimited)."""
    return {"plan": plan.name, "limits": {name: plan.limit(name) for name in LIMITS}}


def overrides(settings: Mapping[str, Any]) -> dict[str, Any]:
    """What is stored for the account itself: its plan and its own limits, when set."""
    out: dict[str, Any] = {}
    if settings.get("plan") is not None:
        out["plan"] = settings["plan"]
    if settings.get("limits"):
        out["limits"] = dict(settings["limits"])
    return out
