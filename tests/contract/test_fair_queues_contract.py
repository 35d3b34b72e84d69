"""Fair queues in the contract drive: every job message a function sends (SendMessage and
each SendMessageBatch entry; moto, like SQS, takes MessageGroupId on a standard queue) goes
in its account's message group, `_system` for a job of no account. EventBridge Scheduler's
deliveries (the `scheduler` principal) cannot set one (docs/operations.md)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from skald.domain.ops.fairness import SYSTEM_GROUP
from tests.contract.conftest import Recording

pytestmark = pytest.mark.contract


def _account(body: str) -> str | None:
    payload: Any = json.loads(body)
    if isinstance(payload.get("payload"), dict) and isinstance(payload.get("kind"), str):
        payload = payload["payload"]  # a schedule's envelope
    account = payload.get("account")
    return account if isinstance(account, str) and account else None


def test_every_message_a_function_sends_carries_its_accounts_group(recording: Recording) -> None:
    sent: list[tuple[str, dict[str, Any]]] = []
    for call in recording.calls:
        if call.service != "sqs" or call.function in (None, "scheduler"):
            continue
        if call.operation == "SendMessage":
            sent.append((call.function, call.params))
        elif call.operation == "SendMessageBatch":
            sent += [(call.function, entry) for entry in call.params.get("Entries", [])]
    assert {fn for fn, _ in sent} >= {"content", "sessions"}
    wrong = [
        (fn, entry.get("MessageGroupId"), entry["MessageBody"][:80])
        for fn, entry in sent
        if entry.get("MessageGroupId") != (_account(entry["MessageBody"]) or SYSTEM_GROUP)
    ]
    assert wrong == []
    assert any(entry.get("MessageGroupId") != SYSTEM_GROUP for _, entry in sent)
