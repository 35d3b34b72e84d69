"""Fairness between accounts: whose job a job is, the SQS message group it is sent in, how
many jobs of one account a worker fleet runs at once, and the day buckets the per-account
job counts are kept in on AWS.

One account's backlog must neither block another account's writes (admission counts each
account's own jobs) nor delay another account's jobs by more than a bound: workers take jobs
round robin across accounts (`skald serve`), SQS fair queues group messages by account, each
account may hold only part of a queue's workers, and a long job yields between slices of its
work (`job_slice_s`), so the job ahead of another account's is at most one slice long.
"""

from __future__ import annotations

from typing import Any

# The message group of jobs that belong to no account (sweeps, schedules without a payload).
SYSTEM_GROUP = "_system"
DAY_S = 86_400


def job_account(payload: dict[str, Any]) -> str | None:
    """The account a job works for: its payload's `account`; None for a system job."""
    account = payload.get("account")
    return account if isinstance(account, str) and account else None


def message_group(payload: dict[str, Any]) -> str:
    """The SQS MessageGroupId of a job: its account (fair queues), or SYSTEM_GROUP."""
    return job_account(payload) or SYSTEM_GROUP


def account_concurrency(setting: int | None, max_concurrency: int) -> int:
    """Jobs of one account a queue's workers run at once: the setting, else half the queue's
    workers (at least one), so one account leaves the other half to the others."""
    if setting is not None and setting > 0:
        return setting
    return max(1, max_concurrency // 2)


def count_day(now: float) -> int:
    """The bucket a job is counted in when it is queued (a day number)."""
    return int(now // DAY_S)


def bucket_expiry(day: int, retention_days: int) -> int:
    """When a day's bucket stops counting (epoch seconds): no job queued that day can still
    wait or run once the queues' retention (and a day more) has passed, so a count that
    drifted (a lost decrement) heals then."""
    return (day + 1 + retention_days + 1) * DAY_S
