"""UsagePlans port: each account's API Gateway key in its tier's usage plan. One adapter,
API Gateway's, run against moto (keys, usage plans and their keys); `skald serve` has none.

Then the service over it (EdgeKeys): an account created lands in its tier's plan before it
exists, a plan change moves it, a purge deletes its key, and `sync_all` places every account.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from skald.adapters.aws.edge import ApiGatewayUsagePlans
from skald.adapters.local.sqlite.statestore import SqliteStateStore
from skald.domain.access.identity import Identity
from skald.domain.errors import InvalidArgument, Unavailable
from skald.domain.plans import edge_key_name, edge_key_value, edge_plan_name
from skald.ports import Account, UsagePlans
from skald.services.plans import EdgeKeys
from skald.services.tenancy.accounts import ROOT_ACCOUNT, AccountService
from tests.conformance.conftest import _DUMMY_AWS_ENV, _MotoServer, moto_client

TIERS = ("unlimited", "free", "team")


class Edge:
    def __init__(self, client: Any, namespace: str, plan_ids: dict[str, str]) -> None:
        self.client = client
        self.namespace = namespace
        self.plan_ids = plan_ids

    def open(self) -> ApiGatewayUsagePlans:
        return ApiGatewayUsagePlans(self.client, self.namespace)

    def plan_keys(self, tier: str) -> list[dict[str, Any]]:
        items = self.client.get_usage_plan_keys(usagePlanId=self.plan_ids[tier])["items"]
        return [k for k in items if str(k.get("name", "")).startswith(f"{self.namespace}/")]

    def api_keys(self) -> list[dict[str, Any]]:
        found = self.client.get_api_keys(nameQuery=f"{self.namespace}/", includeValues=True)
        return list(found["items"])


@pytest.fixture
def edge() -> Iterator[Edge]:
    with mock.patch.dict(os.environ, _DUMMY_AWS_ENV):
        client = moto_client("apigateway", _MotoServer.get().endpoint)
        namespace = f"Skald{uuid.uuid4().hex[:8]}"
        plans = {tier: client.create_usage_plan(name=f"{namespace}-{tier}")["id"] for tier in TIERS}
        try:
            yield Edge(client, namespace, plans)
        finally:
            for key in client.get_api_keys(nameQuery=f"{namespace}/")["items"]:
                client.delete_api_key(apiKey=key["id"])


def test_the_adapter_is_a_usage_plans_port(edge: Edge) -> None:
    plans = edge.open()
    assert isinstance(plans, UsagePlans)
    # the stack's plans, found by their names (another deployment's are not this one's)
    edge.client.create_usage_plan(name=edge_plan_name(edge.namespace + "x", "business"))
    assert plans.tiers == frozenset(TIERS)
    assert plans.plan_ids == edge.plan_ids


def test_assign_makes_the_account_key_with_its_derived_value(edge: Edge) -> None:
    plans = edge.open()
    plans.assign("acme", "free")
    [key] = edge.api_keys()
    assert key["name"] == edge_key_name(edge.namespace, "acme")
    assert key["value"] == edge_key_value(edge.namespace, "acme")  # what the authorizer names
    assert key["enabled"] is True
    assert [k["name"] for k in edge.plan_keys("free")] == [key["name"]]
    assert plans.placement("acme") == "free"


def test_assign_again_changes_nothing(edge: Edge) -> None:
    plans = edge.open()
    plans.assign("acme", "team")
    plans.assign("acme", "team")
    edge.open().assign("acme", "team")  # another process: finds the key by its name
    assert len(edge.api_keys()) == 1
    assert len(edge.plan_keys("team")) == 1
    assert plans.placement("acme") == "team"


def test_a_plan_change_moves_the_key_out_of_the_old_plan(edge: Edge) -> None:
    plans = edge.open()
    plans.assign("acme", "free")
    plans.assign("acme", "team")
    assert edge.plan_keys("free") == []
    assert len(edge.plan_keys("team")) == 1
    assert plans.placement("acme") == "team"
    plans.assign("acme", "unlimited")
    assert [t for t in TIERS if edge.plan_keys(t)] == ["unlimited"]


def test_accounts_have_keys_of_their_own(edge: Edge) -> None:
    plans = edge.open()
    plans.assign("acme", "free")
    plans.assign("acme2", "team")  # a name that extends another's: matched exactly
    assert plans.placement("acme") == "free"
    assert plans.placement("acme2") == "team"
    values = {k["value"] for k in edge.api_keys()}
    assert values == {edge_key_value(edge.namespace, a) for a in ("acme", "acme2")}


def test_a_tier_without_a_plan_is_refused_before_any_write(edge: Edge) -> None:
    plans = edge.open()
    with pytest.raises(KeyError, match="business"):
        plans.assign("acme", "business")
    assert edge.api_keys() == []
    assert plans.placement("acme") is None


def test_release_deletes_the_key_and_its_plan_membership(edge: Edge) -> None:
    plans = edge.open()
    plans.assign("acme", "free")
    assert plans.release("acme") is True
    assert edge.api_keys() == []
    assert edge.plan_keys("free") == []
    assert plans.placement("acme") is None
    assert plans.release("acme") is False  # nothing left: a purge run again finds nothing


def test_a_key_made_elsewhere_is_taken_up(edge: Edge) -> None:
    """A concurrent sync made the key between the lookup and the create: the value is unique,
    so the create conflicts and the adapter uses the key that exists."""
    edge.client.create_api_key(
        name=edge_key_name(edge.namespace, "acme"),
        value=edge_key_value(edge.namespace, "acme"),
        enabled=True,
    )
    plans = edge.open()
    real = plans._key_id
    lookups: list[str] = []

    def racing_lookup(account_id: str) -> str | None:
        lookups.append(account_id)
        return None if len(lookups) == 1 else real(account_id)  # the first one misses it

    plans._key_id = racing_lookup  # type: ignore[method-assign]
    plans.assign("acme", "free")
    assert len(lookups) >= 2
    assert len(edge.api_keys()) == 1
    assert plans.placement("acme") == "free"


def test_namespaces_keep_their_keys_apart(edge: Edge) -> None:
    assert edge_key_value("SkaldA", "acme") != edge_key_value("SkaldB", "acme")
    assert len(edge_key_value("x", "y")) >= 20  # API Gateway's minimum


# --------------------------------------------------------------------------------------------
# the service: EdgeKeys over the adapter, accounts in a real state store

ROOT = Identity(ROOT_ACCOUNT, "root", "root")


@pytest.fixture
def state(tmp_path: Path) -> SqliteStateStore:
    return SqliteStateStore(tmp_path / "state.db")


def test_a_new_account_is_in_the_default_tier_plan_before_it_exists(
    edge: Edge, state: SqliteStateStore
) -> None:
    keys = EdgeKeys(edge.open(), state, default_tier="free")
    accounts = AccountService(state, "root-key-0123456789", edge=lambda: keys)
    accounts.create_account(ROOT, "acme", "alice")
    assert edge.open().placement("acme") == "free"


def test_an_existing_id_is_refused_without_moving_its_key(
    edge: Edge, state: SqliteStateStore
) -> None:
    keys = EdgeKeys(edge.open(), state, default_tier="free")
    accounts = AccountService(state, "root-key-0123456789", edge=lambda: keys)
    accounts.create_account(ROOT, "acme", "alice")
    keys.sync("acme", "team")
    with pytest.raises(Exception, match="already exists"):
        accounts.create_account(ROOT, "acme", "bob")
    assert edge.open().placement("acme") == "team"


def test_an_edge_failure_creates_nothing(state: SqliteStateStore) -> None:
    class Broken:
        default_tier = "unlimited"

        def sync(self, account_id: str, tier: str | None = None) -> str | None:
            raise RuntimeError("API Gateway is down")

    accounts = AccountService(state, "root-key-0123456789", edge=lambda: Broken())
    with pytest.raises(Unavailable, match="not created"):
        accounts.create_account(ROOT, "acme", "alice")
    assert state.get_account("acme") is None


def test_sync_follows_the_settings_and_sync_all_places_every_account(
    edge: Edge, state: SqliteStateStore
) -> None:
    state.create_account(Account("a", 1.0, settings={"plan": "team"}))
    state.create_account(Account("b", 1.0))
    state.create_account(Account("c", 1.0, settings={"plan": "free", "limits": {"burst": 5}}))
    keys = EdgeKeys(edge.open(), state, default_tier="unlimited")
    assert keys.sync("a") == "team"
    done = keys.sync_all()
    assert done.accounts == 3
    assert done.by_tier == {"team": 1, "unlimited": 1, "free": 1}
    plans = edge.open()
    assert [plans.placement(a) for a in "abc"] == ["team", "unlimited", "free"]
    assert keys.remove("a") == 1
    assert plans.placement("a") is None
    with pytest.raises(InvalidArgument, match="unknown plan"):
        keys.sync("b", "platinum")


def test_without_usage_plans_nothing_happens(state: SqliteStateStore) -> None:
    keys = EdgeKeys(None, state)
    assert keys.sync("acme") is None
    assert keys.remove("acme") == 0
    assert keys.sync_all().accounts == 0


def test_a_plan_change_through_the_settings_moves_the_key(edge: Edge, tmp_path: Path) -> None:
    """The composition's settings service tells the edge: the next request of the account is
    throttled at its new tier's rate (AWS)."""
    from skald.config import Settings
    from tests.support.compose import local_services

    c = local_services(
        Settings(backend="local", data_dir=tmp_path / "d", root_api_key="root-key-0123456789")
    )
    try:
        c.__dict__["edge_keys"] = EdgeKeys(edge.open(), c.state, default_tier="free")
        c.accounts.create_account(ROOT, "acme", "alice")
        assert edge.open().placement("acme") == "free"
        c.account_settings.patch(ROOT, "acme", {"plan": "team"})
        assert edge.open().placement("acme") == "team"
        c.account_settings.patch(ROOT, "acme", {"plan": None})  # back to the default tier
        assert edge.open().placement("acme") == "free"
    finally:
        c.close()
