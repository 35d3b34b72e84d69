"""SqsJobQueue's side of fairness between accounts (domain/ops/fairness.py):

* every message it sends goes in its account's message group (MessageGroupId = the account,
  SYSTEM_GROUP for system jobs): on a standard queue that makes it a fair queue, where SQS
  keeps one account's backlog from delaying the other accounts' messages;
* each account's jobs not done yet are counted (account_counts.py): +1 when a job is sent,
  -1 when it is done or dead-lettered; the message carries the day it was counted in (the
  `counted` attribute), so the settling finds its bucket;
* the worker Lambdas hold a slot per running job of an account (take_slot), and a job whose
  account holds them all is deferred: a copy of its message is sent again after a delay and
  the record reported done, so the deferral costs no receive (ApproximateReceiveCount, what
  the redrive policy counts, belongs to the message the mapping deletes).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from skald.adapters.aws.sqs.account_counts import AccountCounts
from skald.adapters.aws.sqs.messages import (
    A_ATTEMPTS,
    SQS_MAX_DELAY_S,
    attempts_before,
    number_attribute,
    parse_body,
    whole_seconds,
)
from skald.domain.ops.fairness import count_day, job_account, message_group

log = logging.getLogger(__name__)

A_COUNTED = "counted"


def job_payload(body: dict[str, Any]) -> dict[str, Any]:
    """The payload of a message body: a schedule's envelope `{"kind", "payload"}` holds it."""
    inner = body.get("payload")
    return inner if isinstance(inner, dict) and isinstance(body.get("kind"), str) else body


class FairShare:
    def __init__(self, counts: AccountCounts | None, clock: Callable[[], float] = time.time):
        self.counts = counts
        self.clock = clock
        self._marks: dict[str, str] = {}  # receipt -> the counted mark of a leased job
        self._lock = threading.Lock()

    # -- sending ---------------------------------------------------------------------------

    def mark_for(self, payload: dict[str, Any]) -> str | None:
        """The mark a new job's message carries when its account's count takes it."""
        if self.counts is None or job_account(payload) is None:
            return None
        return str(count_day(self.clock()))

    @staticmethod
    def dress(entry: dict[str, Any], payload: dict[str, Any], mark: str | None) -> None:
        """A standard queue's SendMessage entry in the job's message group, with its mark."""
        entry["MessageGroupId"] = message_group(payload)
        if mark is not None:
            entry["MessageAttributes"][A_COUNTED] = {"DataType": "String", "StringValue": mark}

    def queued(self, sent: Iterable[tuple[dict[str, Any], str | None]]) -> None:
        """Counts jobs just sent: (payload, mark) each. After the send: a count that fails
        leaves the account under-counted (admitted more), never blocked."""
        if self.counts is None:
            return
        by: Counter[tuple[str, str]] = Counter()
        for payload, mark in sent:
            account = job_account(payload)
            if account is not None and mark is not None:
                by[(account, mark)] += 1
        for (account, mark), n in by.items():
            try:
                self.counts.add(account, int(mark), n)
            except Exception:
                log.exception("could not count %d queued job(s) of %s", n, account)

    # -- settling --------------------------------------------------------------------------

    def remember(self, receipt: str, mark: str | None) -> None:
        if mark is not None and self.counts is not None:
            with self._lock:
                self._marks[receipt] = mark

    def forget(self, receipt: str) -> str | None:
        with self._lock:
            return self._marks.pop(receipt, None)

    def settled(self, account: str | None, mark: str | None) -> None:
        """A counted job is done or dead-lettered. Never fatal: a lost decrement heals when
        its bucket expires."""
        if self.counts is None or account is None or mark is None:
            return
        try:
            self.counts.add(account, int(mark), -1)
        except ValueError:
            log.warning("job of %s carries an unreadable counted mark %r", account, mark)
        except Exception:
            log.exception("could not settle a job of %s in its count", account)

    def depth_of(self, account: str) -> int:
        return 0 if self.counts is None else self.counts.count(account)

    def drop(self, account: str) -> None:
        if self.counts is not None:
            self.counts.drop(account)

    # -- deferring -------------------------------------------------------------------------

    @staticmethod
    def copy_of(record: dict[str, Any], delay_s: float) -> dict[str, Any]:
        """SendMessage parameters (without QueueUrl) of a copy of a Lambda SQS record, sent
        again after `delay_s`: same body and attributes, its earlier deliveries carried over
        but this one (which did not run the job) not counted."""
        attrs: dict[str, dict[str, str]] = {}
        for name, value in (record.get("messageAttributes") or {}).items():
            text = value.get("stringValue")
            if text is not None:
                attrs[name] = {
                    "DataType": str(value.get("dataType") or "String"),
                    "StringValue": text,
                }
        plain = {k: v["StringValue"] for k, v in attrs.items()}
        received = int((record.get("attributes") or {}).get("ApproximateReceiveCount", "1"))
        attrs[A_ATTEMPTS] = number_attribute(attempts_before(plain) + max(0, received - 1))
        body = str(record.get("body", ""))
        return {
            "MessageBody": body,
            "MessageAttributes": attrs,
            "MessageGroupId": message_group(job_payload(parse_body(body))),
            "DelaySeconds": whole_seconds(delay_s, SQS_MAX_DELAY_S),
        }


class FairQueue:
    """SqsJobQueue's AccountJobs, AccountSettlement and AccountShares (a base class)."""

    _fair: FairShare
    _sqs: Any

    def _url(self, queue: str) -> str:
        raise NotImplementedError

    def depth_of(self, account_id: str) -> int:
        """The account's jobs not done yet, from its counts (0 without them)."""
        return self._fair.depth_of(account_id)

    def account_settled(self, account_id: str, mark: str | None) -> None:
        self._fair.settled(account_id, mark)

    def take_slot(
        self, queue: str, account_id: str, holder: str, *, cap: int, hold_s: float
    ) -> bool:
        counts = self._fair.counts
        return counts is None or counts.take_slot(f"{account_id}/{queue}", holder, cap, hold_s)

    def release_slot(self, queue: str, account_id: str, holder: str) -> None:
        if self._fair.counts is not None:
            self._fair.counts.release_slot(f"{account_id}/{queue}", holder)

    def defer(self, queue: str, record: dict[str, Any], delay_s: float) -> None:
        self._sqs.send_message(QueueUrl=self._url(queue), **FairShare.copy_of(record, delay_s))
