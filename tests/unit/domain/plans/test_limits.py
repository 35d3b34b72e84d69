import pytest

from skald.domain.errors import InvalidArgument
from skald.domain.plans import LIMITS, TIERS, UNLIMITED, plan_overrides, resolve


def test_no_settings_is_the_default_tier() -> None:
    assert resolve({}) is UNLIMITED
    assert resolve(None, "free") == TIERS["free"]


def test_overrides_replace_single_limits_of_the_tier() -> None:
    plan = resolve({"plan": "free", "limits": {"sessions": 3, "watches": None}})
    assert plan.name == "free"
    assert plan.sessions == 3
    assert plan.watches is None
    assert plan.storage_bytes == TIERS["free"].storage_bytes


def test_every_limit_is_named_and_unlimited_has_none() -> None:
    assert "rate_per_s" in LIMITS and "name" not in LIMITS
    assert all(UNLIMITED.limit(name) is None for name in LIMITS)


@pytest.mark.parametrize(
    "raw",
    [{"bogus": 1}, {"sessions": -1}, {"sessions": 1.5}, {"sessions": "3"}, {"burst": True}, [1]],
)
def test_bad_overrides_are_refused(raw: object) -> None:
    with pytest.raises(InvalidArgument):
        plan_overrides(raw)


def test_unknown_tier_is_refused() -> None:
    with pytest.raises(InvalidArgument):
        resolve({"plan": "platinum"})
