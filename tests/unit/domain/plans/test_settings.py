import pytest

from skald.domain.errors import InvalidArgument
from skald.domain.plans import LIMITS, TIERS
from skald.domain.plans.settings import (
    apply_patch,
    check_initial,
    effective,
    overrides,
)


def test_plan_and_limits_are_set_and_other_settings_kept() -> None:
    out = apply_patch({"other": 1}, {"plan": "team", "limits": {"sessions": 3}}, "unlimited")
    assert out == {"other": 1, "plan": "team", "limits": {"sessions": 3}}


def test_null_is_unlimited_and_default_drops_the_override() -> None:
    base = {"plan": "free", "limits": {"sessions": 3, "watches": 1}}
    out = apply_patch(base, {"limits": {"sessions": None, "watches": "default"}}, "unlimited")
    assert out == {"plan": "free", "limits": {"sessions": None}}
    out = apply_patch(out, {"limits": {"sessions": "default"}}, "unlimited")
    assert out == {"plan": "free"}  # no override left: no limits key


def test_a_null_plan_goes_back_to_the_default_tier() -> None:
    assert apply_patch({"plan": "team"}, {"plan": None}, "free") == {}


@pytest.mark.parametrize(
    "patch",
    [
        {"agent_evolution": {"enabled": True}},
        {"plan": "gold"},
        {"plan": 3},
        {"limits": {"nope": 1}},
        {"limits": {"nope": "default"}},
        {"limits": {"sessions": -1}},
        {"limits": {"sessions": 1.5}},
        {"limits": {"sessions": True}},
        {"limits": {"sessions": "many"}},
        {"limits": [1]},
        {},
    ],
)
def test_bad_patches_are_refused_whole(patch: dict[str, object]) -> None:
    with pytest.raises(InvalidArgument):
        apply_patch({"plan": "free"}, patch, "unlimited")


def test_agent_evolution_is_named_as_unsupported() -> None:
    with pytest.raises(InvalidArgument) as err:
        apply_patch({}, {"agent_evolution": {"enabled": True}}, "unlimited")
    assert err.value.details == {
        "unsupported": ["agent_evolution"],
        "supported": ["plan", "limits"],
    }
    assert "agent evolution" in err.value.message


def test_views() -> None:
    plan = TIERS["free"]
    view = effective(plan)
    assert view["plan"] == "free" and set(view["limits"]) == set(LIMITS)
    assert view["limits"]["sessions"] == plan.sessions
    assert overrides({"other": 1}) == {}
    assert overrides({"plan": "free", "limits": {"sessions": None}}) == {
        "plan": "free",
        "limits": {"sessions": None},
    }


def test_initial_settings_are_checked() -> None:
    assert check_initial(None, "unlimited") == {}
    assert check_initial({"plan": "free", "x": 1}, "unlimited") == {"plan": "free", "x": 1}
    with pytest.raises(InvalidArgument):
        check_initial({"plan": "gold"}, "unlimited")
    with pytest.raises(InvalidArgument):
        check_initial({"limits": {"sessions": -2}}, "unlimited")
