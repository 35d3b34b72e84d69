"""Scheduler on EventBridge Scheduler: one one-shot schedule per timer, delivering its payload
to an SQS queue (the auto-commit queue).

Design notes (the integrator should know these):

* schedule_once creates `at(YYYY-MM-DDTHH:MM:SS)` in UTC (rounded up to the second, so it never
  fires early) with ActionAfterCompletion=DELETE, FlexibleTimeWindow OFF, and the payload JSON as
  the target Input: the SQS message body is the payload itself, with no message attributes, so
  the consuming SqsJobQueue / sqs_records_to_jobs needs a default kind for that queue.
* An existing schedule (ConflictException) is moved with UpdateSchedule, which replaces every
  setting, so both calls send the same full request. If the schedule fired and deleted itself
  between the two calls, it is created again.
* A time in the past is moved to now + 5 s: the idle deadline has passed, fire soon.
* Names: `name_prefix + name` when that fits `[0-9a-zA-Z-_.]{1,64}`; otherwise the disallowed
  characters become "-", the result is cut, and a hash of the full name is appended, so the
  mapping stays deterministic (cancel finds what schedule_once created) and collision-free.
* A FIFO target queue gets SqsParameters.MessageGroupId = the schedule name.
* The schedule group must exist (infra creates it). IAM: scheduler:CreateSchedule,
  UpdateSchedule, DeleteSchedule on the group, and iam:PassRole on `role_arn`, a role that
  scheduler.amazonaws.com assumes and that may sqs:SendMessage to the target (+ kms for SSE).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

MAX_NAME_LEN = 64
MAX_INPUT_LEN = 8192
_ALLOWED = re.compile(r"^[0-9a-zA-Z\-_.]+$")
_DISALLOWED = re.compile(r"[^0-9a-zA-Z\-_.]")
_HASH_LEN = 16
_PAST_LEAD_S = 5.0
_MOVE_RETRIES = 3


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def at_expression(at: float) -> str:
    """`at(...)` for epoch seconds `at`, in UTC, rounded up to the second."""
    moment = datetime.fromtimestamp(math.ceil(at), tz=UTC)
    return f"at({moment.strftime('%Y-%m-%dT%H:%M:%S')})"


class EventBridgeScheduler:
    """Scheduler port on EventBridge Scheduler one-shot schedules; see the module notes."""

    def __init__(
        self,
        client: Any,
        *,
        group: str,
        target_arn: str,
        role_arn: str,
        name_prefix: str = "skald-",
        dead_letter_arn: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if name_prefix and not _ALLOWED.match(name_prefix):
            raise ValueError(f"invalid schedule name prefix {name_prefix!r}")
        if len(name_prefix) > MAX_NAME_LEN - _HASH_LEN - 2:
            raise ValueError("schedule name prefix too long")
        self._client = client
        self._group = group
        self._target_arn = target_arn
        self._role_arn = role_arn
        self._prefix = name_prefix
        self._dead_letter_arn = dead_letter_arn
        self._clock = clock

    def schedule_name(self, name: str) -> str:
        """The EventBridge schedule name of timer `name` (deterministic)."""
        full = self._prefix + name
        if name and len(full) <= MAX_NAME_LEN and _ALLOWED.match(full):
            return full
        digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_LEN]
        readable = _DISALLOWED.sub("-", full)[: MAX_NAME_LEN - _HASH_LEN - 1]
        return f"{readable}-{digest}"

    def request(self, name: str, at: float, payload: dict[str, Any]) -> dict[str, Any]:
        """The CreateSchedule / UpdateSchedule parameters for this timer."""
        body = json.dumps(payload)
        if len(body) > MAX_INPUT_LEN:
            raise ValueError(
                f"timer payload is {len(body)} characters; the limit is {MAX_INPUT_LEN}"
            )
        at = max(at, self._clock() + _PAST_LEAD_S)
        schedule_name = self.schedule_name(name)
        target: dict[str, Any] = {
            "Arn": self._target_arn,
            "RoleArn": self._role_arn,
            "Input": body,
        }
        if self._target_arn.endswith(".fifo"):
            target["SqsParameters"] = {"MessageGroupId": schedule_name}
        if self._dead_letter_arn is not None:
            target["DeadLetterConfig"] = {"Arn": self._dead_letter_arn}
        return {
            "Name": schedule_name,
            "GroupName": self._group,
            "ScheduleExpression": at_expression(at),
            "ScheduleExpressionTimezone": "UTC",
            "FlexibleTimeWindow": {"Mode": "OFF"},
            "ActionAfterCompletion": "DELETE",
            "State": "ENABLED",
            "Target": target,
        }

    def schedule_once(self, name: str, at: float, payload: dict[str, Any]) -> None:
        params = self.request(name, at, payload)
        for _ in range(_MOVE_RETRIES):
            try:
                self._client.create_schedule(**params)
                return
            except ClientError as exc:
                if _code(exc) != "ConflictException":
                    raise
            try:
                self._client.update_schedule(**params)
                return
            except ClientError as exc:
                # It fired and deleted itself in between: create it again.
                if _code(exc) != "ResourceNotFoundException":
                    raise
        raise RuntimeError(f"could not create or move schedule {params['Name']}")

    def cancel(self, name: str) -> bool:
        try:
            self._client.delete_schedule(Name=self.schedule_name(name), GroupName=self._group)
        except ClientError as exc:
            if _code(exc) == "ResourceNotFoundException":
                return False
            raise
        return True
