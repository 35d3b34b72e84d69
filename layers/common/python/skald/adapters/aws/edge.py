"""UsagePlans on API Gateway: one API key per account, whose value the authorizer names for
every request it allows (skald.domain.plans.edge), in the usage plan of the account's tier.

The usage plans come from the stack, one per tier, named `<namespace>-<tier>`; this adapter
finds their ids by name once per process, and only makes, moves and deletes keys. A key may
not sit in two plans of the same API stage, so a move takes the key out of its old plan before
adding it to the new one: in between, the gateway answers the account's requests 403 for the
moment the two calls take.

IAM (infra/access.py): apigateway:GET and POST on /apikeys, DELETE on /apikeys/*, GET on
/usageplans (the plans by name, the plans holding a key), POST on /usageplans/*/keys and
DELETE on /usageplans/*/keys/*.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from typing import Any

from botocore.exceptions import ClientError

from skald.domain.plans.edge import edge_key_name, edge_key_value, edge_plan_name
from skald.domain.plans.limits import TIERS


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


class ApiGatewayUsagePlans:
    def __init__(self, client: Any, namespace: str, tiers: Iterable[str] = TIERS) -> None:
        self.client = client
        self.namespace = namespace
        self._wanted = {edge_plan_name(namespace, tier): tier for tier in tiers}
        self._ids: dict[str, str] | None = None  # tier -> usage plan id, read once
        self._lock = threading.Lock()

    @property
    def plan_ids(self) -> dict[str, str]:
        """Each tier's usage plan id, found by the plan's name on first use."""
        with self._lock:
            if self._ids is None:
                self._ids = {
                    self._wanted[str(plan["name"])]: str(plan["id"])
                    for plan in self._pages(self.client.get_usage_plans)
                    if str(plan.get("name")) in self._wanted
                }
            return dict(self._ids)

    @property
    def tiers(self) -> frozenset[str]:
        return frozenset(self.plan_ids)

    # ------------------------------------------------------------------ keys

    def _pages(self, call: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
        position: str | None = None
        while True:
            page = call(**kwargs, limit=500, **({"position": position} if position else {}))
            yield from page.get("items", [])
            position = page.get("position")
            if not position:
                return

    def _key_id(self, account_id: str) -> str | None:
        name = edge_key_name(self.namespace, account_id)
        # nameQuery matches a prefix: keep the exact name only.
        for item in self._pages(self.client.get_api_keys, nameQuery=name):
            if item.get("name") == name:
                return str(item["id"])
        return None

    def _ensure_key(self, account_id: str) -> str:
        key_id = self._key_id(account_id)
        if key_id is not None:
            return key_id
        try:
            made = self.client.create_api_key(
                name=edge_key_name(self.namespace, account_id),
                value=edge_key_value(self.namespace, account_id),
                enabled=True,
                description="Skald account (usage plan of its tier; never sent by clients)",
            )
        except ClientError as exc:
            if _code(exc) != "ConflictException":
                raise
            # Made meanwhile by a concurrent sync: the values are unique, so it is this one.
            key_id = self._key_id(account_id)
            if key_id is None:
                raise
            return key_id
        return str(made["id"])

    def _plans_holding(self, key_id: str) -> list[str]:
        ours = set(self.plan_ids.values())
        return [
            str(plan["id"])
            for plan in self._pages(self.client.get_usage_plans, keyId=key_id)
            if str(plan["id"]) in ours
        ]

    def _remove(self, plan_id: str, key_id: str) -> None:
        try:
            self.client.delete_usage_plan_key(usagePlanId=plan_id, keyId=key_id)
        except ClientError as exc:
            if _code(exc) != "NotFoundException":
                raise

    # ------------------------------------------------------------------ the port

    def assign(self, account_id: str, tier: str) -> None:
        target = self.plan_ids.get(tier)
        if target is None:
            raise KeyError(
                f"no usage plan for tier '{tier}' ({edge_plan_name(self.namespace, tier)})"
            )
        key_id = self._ensure_key(account_id)
        held = self._plans_holding(key_id)
        if held == [target]:
            return
        for plan_id in held:
            if plan_id != target:
                self._remove(plan_id, key_id)
        if target not in held:
            try:
                self.client.create_usage_plan_key(
                    usagePlanId=target, keyId=key_id, keyType="API_KEY"
                )
            except ClientError as exc:
                if _code(exc) != "ConflictException":  # already there (a concurrent sync)
                    raise

    def placement(self, account_id: str) -> str | None:
        key_id = self._key_id(account_id)
        if key_id is None:
            return None
        held = self._plans_holding(key_id)
        tiers = {plan_id: tier for tier, plan_id in self.plan_ids.items()}
        return tiers[held[0]] if held else None

    def release(self, account_id: str) -> bool:
        key_id = self._key_id(account_id)
        if key_id is None:
            return False
        for plan_id in self._plans_holding(key_id):
            self._remove(plan_id, key_id)
        try:
            self.client.delete_api_key(apiKey=key_id)
        except ClientError as exc:
            if _code(exc) != "NotFoundException":
                raise
        return True
