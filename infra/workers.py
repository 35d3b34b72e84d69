"""Workers: the job queues of the catalogue (each with a DLQ), the idle auto-commit schedule
group and the role its schedules run as, the commit sweeper's rate schedule, and the SQS
subscriptions of the worker functions."""

from __future__ import annotations

import json
from collections.abc import Mapping

from aws_cdk import ArnFormat, Duration, Names, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.nag import allow_wildcard_resource
from infra.settings import DeploySettings
from skald import catalog

_QUEUE_STATS = ["sqs:GetQueueAttributes"]
# Queue status counts the dead letters and peeks the newest (receive with a short visibility
# timeout, then make them visible again): nothing is deleted or sent there.
_PEEK = ["sqs:GetQueueAttributes", "sqs:ReceiveMessage", "sqs:ChangeMessageVisibility"]
_CONSUME = ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"]
# A worker puts a job over its account's running cap back on its own queue as a copy
# (skald/jobs/account_cap.py).
_DEFER = ["sqs:SendMessage"]
# The sweeper of half-done commits: a recover job on the auto-commit queue every few minutes.
# It finishes commits older than the grace period (SKALD_COMMIT_RECOVERY_GRACE_S) that a
# function left half-way (timeout, crash).
SWEEPER_RATE = "rate(5 minutes)"
# The watch sweep: queues the re-fetch of due watches (their interval is in minutes).
WATCH_SWEEP_RATE = "rate(1 minute)"


class Workers(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, settings: DeploySettings) -> None:
        super().__init__(scope, construct_id)
        self._settings = settings
        self.queues: dict[str, sqs.Queue] = {}
        self.dead_letter_queues: dict[str, sqs.Queue] = {}
        self.functions: dict[str, lambda_.Function] = {}
        for queue in catalog.QUEUES:
            self._add_queue(queue)

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
                actions=["sqs:SendMessage"],
                resources=[
                    self.queues[catalog.QUEUE_AUTOCOMMIT].queue_arn,
                    self.queues[catalog.QUEUE_FETCH].queue_arn,
                    self.queues[catalog.QUEUE_PURGE].queue_arn,
                ],
            )
        )
        # In the same group as the idle timers, so the same role (and its confused-deputy
        # guard) delivers them; the worker reads the kind from the envelope.
        self.commit_sweeper = self._rate_schedule(
            "CommitSweeper",
            "Skald: finish or roll back commits left half-done",
            SWEEPER_RATE,
            catalog.QUEUE_AUTOCOMMIT,
            catalog.JOB_RECOVER_COMMITS,
        )
        self.watch_sweeper = self._rate_schedule(
            "WatchSweeper",
            "Skald: queue the re-fetch of due watches",
            WATCH_SWEEP_RATE,
            catalog.QUEUE_FETCH,
            catalog.JOB_WATCHES_DUE,
        )
        self.purge_sweeper = self._rate_schedule(
            "PurgeSweeper",
            "Skald: re-queue the purges of removed users and accounts whose job was lost",
            SWEEPER_RATE,
            catalog.QUEUE_PURGE,
            catalog.JOB_RESUME_PURGES,
        )

    def _rate_schedule(
        self, construct_id: str, description: str, rate: str, queue: str, kind: str
    ) -> scheduler.CfnSchedule:
        """A job of `kind` sent to `queue` at `rate` by the scheduler role."""
        schedule = scheduler.CfnSchedule(
            self,
            construct_id,
            description=description,
            group_name=self.schedule_group.schedule_group_name,
            schedule_expression=rate,
            flexible_time_window=scheduler.CfnSchedule.FlexibleTimeWindowProperty(mode="OFF"),
            target=scheduler.CfnSchedule.TargetProperty(
                arn=self.queues[queue].queue_arn,
                role_arn=self.scheduler_role.role_arn,
                input=json.dumps({"kind": kind, "payload": {}}),
                # a missed run is not worth retrying: the next one comes in minutes
                retry_policy=scheduler.CfnSchedule.RetryPolicyProperty(maximum_retry_attempts=0),
            ),
        )
        # The group is named by a plain string: without this, CloudFormation could create
        # the schedule before its group.
        schedule.node.add_dependency(self.schedule_group)
        return schedule

    def _add_queue(self, queue: catalog.Queue) -> None:
        name = queue.construct_id
        dlq = sqs.Queue(
            self,
            f"{name}Dlq",
            # SQS-managed keys: messages carry ids and URIs only (content lives in the KMS
            # bucket), and it keeps the scheduler role to sqs:SendMessage alone.
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=Duration.days(queue.dlq_retention_days),
        )
        self.dead_letter_queues[queue.name] = dlq
        self.queues[queue.name] = sqs.Queue(
            self,
            f"{name}Queue",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            visibility_timeout=Duration.seconds(catalog.visibility_timeout_s(queue)),
            retention_period=Duration.days(queue.retention_days),
            dead_letter_queue=sqs.DeadLetterQueue(
                queue=dlq, max_receive_count=queue.max_receive_count
            ),
        )

    # -- consumers and grants ---------------------------------------------------------------

    def add_consumers(self, functions: Mapping[str, lambda_.Function]) -> None:
        """Subscribe each queue's worker function, with partial-batch failure reports. The
        mapping polls with the function's role: receive, delete, read the queue's attributes,
        what Lambda documents for an SQS event source (CDK's SqsEventSource would also grant
        ChangeMessageVisibility and GetQueueUrl, which nothing sends)."""
        for queue in catalog.QUEUES:
            fn = functions[queue.worker]
            source = self.queues[queue.name]
            fn.add_to_role_policy(
                iam.PolicyStatement(actions=[*_CONSUME, *_DEFER], resources=[source.queue_arn])
            )
            fn.add_event_source_mapping(
                # SqsEventSource's id: the same logical id, so an update keeps the mapping
                # (a second mapping of the same queue and function would be refused).
                f"SqsEventSource:{Names.node_unique_id(source.node)}",
                event_source_arn=source.queue_arn,
                batch_size=queue.batch_size,
                report_batch_item_failures=True,
                # Bounds the fan-out against Bedrock quotas and the search cluster.
                max_concurrency=self._settings.worker_max_concurrency,
            )
            self.functions[queue.name] = fn

    def grant_observe(self, grantee: iam.IGrantable, *queues: str) -> None:
        """Queue depths (queue status, readiness, setup's existence check). The DLQs are
        `grant_inspect`'s: only the functions that report dead letters are told their URLs."""
        arns = [self.queues[name].queue_arn for name in queues]
        grantee.grant_principal.add_to_principal_policy(
            iam.PolicyStatement(actions=_QUEUE_STATS, resources=arns)
        )

    def grant_inspect(self, grantee: iam.IGrantable, *queues: str) -> None:
        """Count and peek the dead letters of `queues` (queue status, the console's DLQ)."""
        arns = [self.dead_letter_queues[name].queue_arn for name in queues]
        grantee.grant_principal.add_to_principal_policy(
            iam.PolicyStatement(actions=_PEEK, resources=arns)
        )

    def grant_sweep(self, grantee: iam.IGrantable, *queues: str) -> None:
        """Delete a removed tenant's dead letters of `queues` (peeked first, the others put
        back)."""
        arns = [self.dead_letter_queues[name].queue_arn for name in queues]
        grantee.grant_principal.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["sqs:ReceiveMessage", "sqs:ChangeMessageVisibility", "sqs:DeleteMessage"],
                resources=arns,
            )
        )

    def grant_send(self, grantee: iam.IGrantable, *queues: str) -> None:
        grantee.grant_principal.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["sqs:SendMessage"],
                resources=[self.queues[name].queue_arn for name in queues],
            )
        )

    def grant_scheduling(self, grantee: iam.IGrantable, level: str = catalog.USE) -> None:
        """Create and move one-shot schedules in our group and hand them our role (USE); or
        delete them (PURGE: the idle timers of a removed user's sessions)."""
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
        if level == catalog.PURGE:
            principal.add_to_principal_policy(
                iam.PolicyStatement(actions=["scheduler:DeleteSchedule"], resources=[schedules])
            )
            return
        # No DeleteSchedule: a timer is moved on every message and deletes itself once it has
        # fired (ActionAfterCompletion); one left behind by a deleted or committed session
        # fires once and the auto-commit finds nothing due.
        principal.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["scheduler:CreateSchedule", "scheduler:UpdateSchedule"],
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
