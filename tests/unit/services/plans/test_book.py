from typing import Any

from skald.domain.plans import TIERS, UNLIMITED
from skald.ports.accounts import Account
from skald.services.plans import PlanBook


class Accounts:
    def __init__(self) -> None:
        self.settings: dict[str, Any] = {"plan": "free"}
        self.reads = 0

    def get_account(self, account_id: str) -> Account | None:
        self.reads += 1
        return Account(account_id, 0.0, dict(self.settings)) if account_id == "acme" else None


def test_plan_is_read_once_per_ttl_and_again_after() -> None:
    now = [0.0]
    accounts = Accounts()
    book = PlanBook(accounts, ttl_s=2.0, clock=lambda: now[0])  # type: ignore[arg-type]
    assert book.for_account("acme") == TIERS["free"]
    accounts.settings = {"plan": "team"}
    assert book.for_account("acme") == TIERS["free"]
    assert accounts.reads == 1
    now[0] = 2.5
    assert book.for_account("acme") == TIERS["team"]
    assert accounts.reads == 2


def test_root_and_unknown_accounts_are_unlimited_or_default() -> None:
    book = PlanBook(Accounts(), default_tier="unlimited")  # type: ignore[arg-type]
    assert book.for_account("_root") is UNLIMITED
    assert book.for_account("ghost") is UNLIMITED


def test_invalidate_forgets() -> None:
    accounts = Accounts()
    book = PlanBook(accounts)  # type: ignore[arg-type]
    book.for_account("acme")
    accounts.settings = {"plan": "team"}
    book.invalidate("acme")
    assert book.for_account("acme") == TIERS["team"]


def test_a_stored_plan_that_no_longer_resolves_falls_back_to_the_default_tier() -> None:
    accounts = Accounts()
    accounts.settings = {"plan": "retired-tier"}
    book = PlanBook(accounts, default_tier="free")  # type: ignore[arg-type]
    assert book.for_account("acme") == TIERS["free"]
