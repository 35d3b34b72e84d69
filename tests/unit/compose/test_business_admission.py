"""The composition's admission: an account's limit is its plan's jobs_in_flight (a tier, or an
override in its settings), else the max_queued_jobs setting; the count is the account's own."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from skald.config import Settings
from skald.domain.errors import ResourceExhausted
from skald.ports import Account
from tests.support.compose import local_services


def test_the_plan_sets_the_limit_and_the_setting_fills_in(tmp_path: Path) -> None:
    c = local_services(
        Settings(
            backend="local", data_dir=tmp_path / "data", max_queued_jobs=3, queue_depth_cache_s=0
        )
    )
    try:
        c.state.create_account(
            Account("tight", time.time(), {"plan": "unlimited", "limits": {"jobs_in_flight": 1}})
        )
        for account, n in (("tight", 1), ("plain", 3)):
            for i in range(n):
                c.queue.enqueue("semantic", "k", {"account": account, "i": i})
        with pytest.raises(ResourceExhausted) as exc:
            c.admission.admit("tight")
        assert exc.value.details["value"] == 1 and exc.value.details["current"] == 1
        with pytest.raises(ResourceExhausted) as exc:
            c.admission.admit("plain")  # no plan limit: max_queued_jobs
        assert exc.value.details["value"] == 3
        c.admission.admit("idle")
    finally:
        c.close()
