"""Workers: the three job queues (each with a DLQ), the idle auto-commit schedule group and
the role its schedules run as, the commit sweeper's rate schedule, and the SQS-driven worker
functions."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from aws_cdk import ArnFormat, Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.nag import allow_wildcard_resource
from infra.settings import DeploySettings

BATCH_SIZE = 10
MAX_RECEIVE_COUNT = 5
# The sweeper of half-done commits: a job of this kind (skald's JOB_RECOVER_COMMITS) on the
# auto-commit queue, every few minutes. It finishes commits older than the grace period
# (SKALD_COMMIT_RECOVERY_GRACE_S) that a function left half-way (timeout, crash).
SWEEPER_JOB_KIND = "session.recover_commits"
SWEEPER_RATE = "rate(5 minutes)"


@dataclass(frozen=True)
class WorkerSpec:
    queue: str  # "semantic" | "memory" | "autocommit"
    construct_id: str
    handler: str  # module.function inside functions/workers
    timeout: Duration
    memory_mb: int


WORKERS = (
    # L0/L1 summaries call the LLM once per directory level, then embed: minutes, not seconds.
    WorkerSpec("semantic", "SummarizeIndex", "summarize_index.handler", Duration.minutes(5), 1024),
    # Extraction may retry the LLM up to four times on unparsable output.
    WorkerSpec("memory", "ExtractMemories", "extract_memories.handler", Duration.minutes(10), 1024),
    # Phase 1 of a commit only: archive + enqueue the extraction job.
    WorkerSpec("autocommit", "AutoCommit", "auto_commit.handler", Duration.minutes(2), 512),
)


class Workers(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, settings: DeploySettings) -> None:
        super().__init__(scope, construct_id)
        self._settings = settings
        self.queues: dict[str, sqs.Queue] = {}
        self.dead_letter_queues: dict[str, sqs.Queue] = {}
        self.functions: dict[str, lambda_.Function] = {}
        for spec in WORKERS:
            self._add_queue(spec)

        # Schedules in this group are created at runtime by the sessions function, one per
        # idle session; they are transient (re-armed on activity), so the group goes with the
        # stack and a redeploy under the same name never collides with a leftover.
        self.schedule_group = scheduler.ScheduleGroup(
            self,
            "IdleCommitGroup",
            schedule_group_name=settings.scheduler_group,
            removal_policy=RemovalPolicy.DESTROY,
        )
        stack = Stack.of(self)
        self.scheduler_role = iam.Role(
            self,
            "SchedulerRole",
            description="EventBridge Scheduler: deliver idle auto-commit messages",
            assumed_by=iam.ServicePrincipal(
                "scheduler.amazonaws.com",
                # Confused-deputy guard: only schedules of our group in our account.
                conditions={
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnEquals": {"aws:SourceArn": self.schedule_group.schedule_group_arn},
                },
            ),
        )
        self.scheduler_role.add_to_policy(
            iam.PolicyStatement(
                actions=["sqs:SendMessage"], resources=[self.queues["autocommit"].queue_arn]
            )
        )
        # In the same group as the idle timers, so the same role (and its confused-deputy
        # guard) delivers it; the auto-commit worker reads the kind from the envelope.
        self.commit_sweeper = scheduler.CfnSchedule(
            self,
            "CommitSweeper",
            description="Skald: finish or roll back commits left half-done",
            group_name=self.schedule_group.schedule_group_name,
            schedule_expression=SWEEPER_RATE,
            flexible_time_window=scheduler.CfnSchedule.FlexibleTimeWindowProperty(mode="OFF"),
            target=scheduler.CfnSchedule.TargetProperty(
                arn=self.queues["autocommit"].queue_arn,
                role_arn=self.scheduler_role.role_arn,
                input=json.dumps({"kind": SWEEPER_JOB_KIND, "payload": {}}),
                # a missed run is not worth retrying: the next one comes in minutes
                retry_policy=scheduler.CfnSchedule.RetryPolicyProperty(
                    maximum_retry_attempts=0),
            ),
        )
        # The group is named by a plain string: without this, CloudFormation could create
        # the schedule before its group.
        self.commit_sweeper.node.add_dependency(self.schedule_group)

    def _add_queue(self, spec: WorkerSpec) -> None:
        name = spec.queue.capitalize()
        dlq = sqs.Queue(
            self,
            f"{name}Dlq",
            # SQS-managed keys: messages carry ids and URIs only (content lives in the KMS
            # bucket), and it keeps the scheduler role to sqs:SendMessage alone.
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=Duration.days(14),
        )
        self.dead_letter_queues[spec.queue] = dlq
        self.queues[spec.queue] = sqs.Queue(
            self,
            f"{name}Queue",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            # AWS guidance for Lambda consumers: six times the function timeout, so throttled
            # retries of a batch do not surface the messages again too early.
            visibility_timeout=Duration.seconds(spec.timeout.to_seconds() * 6),
            retention_period=Duration.days(4),
            dead_letter_queue=sqs.DeadLetterQueue(queue=dlq, max_receive_count=MAX_RECEIVE_COUNT),
        )

    # -- consumers and grants ---------------------------------------------------------------

    def add_consumers(
        self, make_function: Callable[[WorkerSpec], lambda_.Function]
    ) -> dict[str, lambda_.Function]:
        """Create one function per queue and subscribe it with partial-batch failure reports."""
        for spec in WORKERS:
            fn = make_function(spec)
            fn.add_event_source(
                sources.SqsEventSource(
                    self.queues[spec.queue],
                    batch_size=BATCH_SIZE,
                    report_batch_item_failures=True,
                    # Bounds the fan-out against Bedrock quotas and the search cluster.
                    max_concurrency=self._settings.worker_max_concurrency,
                )
            )
            self.functions[spec.queue] = fn
        return self.functions

    def grant_send(self, grantee: iam.IGrantable, *queues: str) -> None:
        grantee.grant_principal.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["sqs:SendMessage"],
                resources=[self.queues[name].queue_arn for name in queues],
            )
        )

    def grant_scheduling(self, grantee: iam.IGrantable) -> None:
        """Create/update/delete one-shot schedules in our group and hand them our role."""
        schedules = Stack.of(self).format_arn(
            service="scheduler",
            resource="schedule",
            resource_name=f"{self.schedule_group.schedule_group_name}/*",
            arn_format=ArnFormat.SLASH_RESOURCE_NAME,
        )
        principal = grantee.grant_principal
        allow_wildcard_resource(
            grantee,
            "arn:<AWS::Partition>:scheduler:<AWS::Region>:<AWS::AccountId>:schedule/"
            f"{self._settings.scheduler_group}/*",
            "One schedule per idle session, named at runtime; limited to Skald's group.",
        )
        principal.add_to_principal_policy(
            iam.PolicyStatement(
                actions=[
                    "scheduler:CreateSchedule",
                    "scheduler:UpdateSchedule",
                    "scheduler:DeleteSchedule",
                ],
                resources=[schedules],
            )
        )
        principal.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["iam:PassRole"],
                resources=[self.scheduler_role.role_arn],
                conditions={"StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}},
            )
        )
