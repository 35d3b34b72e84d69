"""Scheduler port on EventBridge Scheduler: the exact requests (botocore Stubber) and the
behaviour against moto (create, move, cancel, names). moto never fires schedules, so delivery
to the queue is out of reach here; the request shape is what makes it happen on AWS."""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from unittest import mock

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from skald.adapters.aws.scheduler import EventBridgeScheduler, at_expression
from skald.ports import Scheduler
from tests.conformance.conftest import _DUMMY_AWS_ENV, _MotoServer, moto_client

QUEUE_ARN = "arn:aws:sqs:us-east-1:123456789012:skald-autocommit"
ROLE_ARN = "arn:aws:iam::123456789012:role/skald-scheduler"
AT = datetime(2031, 1, 2, 3, 4, 5, tzinfo=UTC).timestamp()
NOW = datetime(2030, 6, 1, tzinfo=UTC).timestamp()
NAME_RE = re.compile(r"^[0-9a-zA-Z\-_.]{1,64}$")


def fixed_clock() -> float:
    return NOW


# --------------------------------------------------------------------------------------------
# exact requests (Stubber)


@pytest.fixture(scope="module")
def offline_client() -> Any:
    """A scheduler client that only ever talks to Stubbers (no endpoint is contacted)."""
    with mock.patch.dict(os.environ, _DUMMY_AWS_ENV):
        return boto3.session.Session().client("scheduler", region_name="us-east-1")


@pytest.fixture
def stubbed(offline_client: Any) -> Iterator[tuple[EventBridgeScheduler, Stubber]]:
    client = offline_client
    stubber = Stubber(client)
    with stubber:
        yield (
            EventBridgeScheduler(
                client, group="skald", target_arn=QUEUE_ARN, role_arn=ROLE_ARN, clock=fixed_clock
            ),
            stubber,
        )
        stubber.assert_no_pending_responses()


def expected_request(name: str, expression: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "Name": name,
        "GroupName": "skald",
        "ScheduleExpression": expression,
        "ScheduleExpressionTimezone": "UTC",
        "FlexibleTimeWindow": {"Mode": "OFF"},
        "ActionAfterCompletion": "DELETE",
        "State": "ENABLED",
        "Target": {"Arn": QUEUE_ARN, "RoleArn": ROLE_ARN, "Input": json.dumps(payload)},
    }  # exactly: no other parameter (botocore adds its ClientToken after the Stubber's check)


def conflict(operation: str, code: str) -> dict[str, Any]:
    return {
        "service_error_code": code,
        "service_message": f"{operation}: {code}",
        "http_status_code": 409 if code == "ConflictException" else 404,
    }


def test_implements_port(stubbed: tuple[EventBridgeScheduler, Stubber]) -> None:
    assert isinstance(stubbed[0], Scheduler)


def test_create_request_shape(stubbed: tuple[EventBridgeScheduler, Stubber]) -> None:
    scheduler, stubber = stubbed
    payload = {"account": "acme", "user": "alice", "role": "user", "session_id": "s1"}
    stubber.add_response(
        "create_schedule",
        {"ScheduleArn": "arn:x"},
        expected_request("skald-idle-1", "at(2031-01-02T03:04:05)", payload),
    )
    scheduler.schedule_once("idle-1", AT, payload)


def test_existing_schedule_is_updated_with_the_same_request(
    stubbed: tuple[EventBridgeScheduler, Stubber],
) -> None:
    scheduler, stubber = stubbed
    request = expected_request("skald-idle-1", "at(2031-01-02T03:04:06)", {"v": 2})
    stubber.add_client_error(
        "create_schedule", **conflict("create", "ConflictException"), expected_params=request
    )
    stubber.add_response("update_schedule", {"ScheduleArn": "arn:x"}, request)
    scheduler.schedule_once("idle-1", AT + 0.2, {"v": 2})  # rounded up: never early


def test_schedule_gone_between_conflict_and_update_is_created_again(
    stubbed: tuple[EventBridgeScheduler, Stubber],
) -> None:
    scheduler, stubber = stubbed
    request = expected_request("skald-t", "at(2031-01-02T03:04:05)", {})
    stubber.add_client_error(
        "create_schedule", **conflict("create", "ConflictException"), expected_params=request
    )
    stubber.add_client_error(
        "update_schedule",
        **conflict("update", "ResourceNotFoundException"),
        expected_params=request,
    )
    stubber.add_response("create_schedule", {"ScheduleArn": "arn:x"}, request)
    scheduler.schedule_once("t", AT, {})


def test_other_errors_propagate(stubbed: tuple[EventBridgeScheduler, Stubber]) -> None:
    scheduler, stubber = stubbed
    stubber.add_client_error(
        "create_schedule", service_error_code="ValidationException", http_status_code=400
    )
    with pytest.raises(ClientError):
        scheduler.schedule_once("t", AT, {})
    stubber.add_client_error(
        "delete_schedule", service_error_code="AccessDeniedException", http_status_code=403
    )
    with pytest.raises(ClientError):
        scheduler.cancel("t")


def test_cancel_request_and_missing_schedule(
    stubbed: tuple[EventBridgeScheduler, Stubber],
) -> None:
    scheduler, stubber = stubbed
    stubber.add_response("delete_schedule", {}, {"Name": "skald-t", "GroupName": "skald"})
    assert scheduler.cancel("t") is True
    stubber.add_client_error("delete_schedule", **conflict("delete", "ResourceNotFoundException"))
    assert scheduler.cancel("t") is False


def test_past_time_fires_soon_and_fifo_targets_get_a_group() -> None:
    scheduler = EventBridgeScheduler(
        object(),
        group="g",
        target_arn=QUEUE_ARN + ".fifo",
        role_arn=ROLE_ARN,
        clock=fixed_clock,
        dead_letter_arn=QUEUE_ARN + "-dlq",
    )
    request = scheduler.request("idle-1", NOW - 3600, {"a": 1})
    assert request["ScheduleExpression"] == at_expression(NOW + 5)
    assert request["Target"]["SqsParameters"] == {"MessageGroupId": "skald-idle-1"}
    assert request["Target"]["DeadLetterConfig"] == {"Arn": QUEUE_ARN + "-dlq"}
    with pytest.raises(ValueError):
        scheduler.request("idle-1", AT, {"big": "x" * 9000})


def test_at_expression_is_utc_and_rounded_up() -> None:
    assert at_expression(AT) == "at(2031-01-02T03:04:05)"
    assert at_expression(AT + 0.001) == "at(2031-01-02T03:04:06)"


def test_names() -> None:
    scheduler = EventBridgeScheduler(object(), group="g", target_arn=QUEUE_ARN, role_arn=ROLE_ARN)
    assert scheduler.schedule_name("idle-0123abc") == "skald-idle-0123abc"
    odd = ["a/b", "a_b", "a b", "a-b/", "日本", "x" * 59, "x" * 58 + "/", "", "acme/alice/s1"]
    names = [scheduler.schedule_name(n) for n in odd]
    assert all(NAME_RE.match(n) for n in names), names
    assert len(set(names)) == len(odd)  # no collisions, not even with "a_b" kept as is
    assert scheduler.schedule_name("a/b") == scheduler.schedule_name("a/b")  # deterministic
    assert len(scheduler.schedule_name("y" * 500)) == 64
    assert scheduler.schedule_name("a/b").startswith("skald-a-b-")
    with pytest.raises(ValueError):
        EventBridgeScheduler(
            object(), group="g", target_arn=QUEUE_ARN, role_arn=ROLE_ARN, name_prefix="bad/"
        )


# --------------------------------------------------------------------------------------------
# against moto


@pytest.fixture
def moto_scheduler() -> Iterator[tuple[EventBridgeScheduler, Any, str]]:
    with mock.patch.dict(os.environ, _DUMMY_AWS_ENV):
        client = moto_client("scheduler", _MotoServer.get().endpoint)
        group = f"skald-{uuid.uuid4().hex[:10]}"
        client.create_schedule_group(Name=group)
        try:
            yield (
                EventBridgeScheduler(client, group=group, target_arn=QUEUE_ARN, role_arn=ROLE_ARN),
                client,
                group,
            )
        finally:
            client.delete_schedule_group(Name=group)


def test_moto_create_move_cancel(moto_scheduler: tuple[EventBridgeScheduler, Any, str]) -> None:
    scheduler, client, group = moto_scheduler
    scheduler.schedule_once("idle-1", AT, {"session_id": "s1"})
    got = client.get_schedule(Name="skald-idle-1", GroupName=group)
    assert got["ScheduleExpression"] == "at(2031-01-02T03:04:05)"
    assert got["ScheduleExpressionTimezone"] == "UTC"
    assert got["ActionAfterCompletion"] == "DELETE"
    assert got["FlexibleTimeWindow"] == {"Mode": "OFF"}
    assert got["State"] == "ENABLED"
    assert got["Target"]["Arn"] == QUEUE_ARN and got["Target"]["RoleArn"] == ROLE_ARN
    assert json.loads(got["Target"]["Input"]) == {"session_id": "s1"}
    # moving the timer keeps one schedule with the new time and payload
    scheduler.schedule_once("idle-1", AT + 600, {"session_id": "s1", "v": 2})
    got = client.get_schedule(Name="skald-idle-1", GroupName=group)
    assert got["ScheduleExpression"] == "at(2031-01-02T03:14:05)"
    assert json.loads(got["Target"]["Input"]) == {"session_id": "s1", "v": 2}
    listed = client.list_schedules(GroupName=group)["Schedules"]
    assert [s["Name"] for s in listed] == ["skald-idle-1"]
    assert scheduler.cancel("idle-1") is True
    assert scheduler.cancel("idle-1") is False
    assert client.list_schedules(GroupName=group)["Schedules"] == []
    with pytest.raises(ClientError) as err:
        client.get_schedule(Name="skald-idle-1", GroupName=group)
    assert err.value.response["Error"]["Code"] == "ResourceNotFoundException"


def test_moto_sanitised_names(moto_scheduler: tuple[EventBridgeScheduler, Any, str]) -> None:
    scheduler, client, group = moto_scheduler
    odd = ["acme/alice/s 1", "z" * 100]
    for i, name in enumerate(odd):
        scheduler.schedule_once(name, AT + i, {"i": i})
    stored = {s["Name"] for s in client.list_schedules(GroupName=group)["Schedules"]}
    assert stored == {scheduler.schedule_name(n) for n in odd}
    for name in odd:
        assert scheduler.cancel(name) is True
    assert client.list_schedules(GroupName=group)["Schedules"] == []
