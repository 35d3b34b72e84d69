"""Observability: alarms on dead letters, API 5XX rate, throttles and worker crashes, all
notifying one KMS-encrypted SNS topic."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import Duration, Stack
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.settings import DeploySettings
from skald import catalog

PERIOD = Duration.minutes(5)
API_5XX_RATE = 0.05  # 5 % of requests over five minutes


class Observability(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: DeploySettings,
        key: kms.Key,
        api: apigw.RestApi,
        functions: Sequence[lambda_.Function],
        workers: Mapping[str, lambda_.Function],
        dead_letter_queues: Mapping[str, sqs.IQueue],
    ) -> None:
        super().__init__(scope, construct_id)
        # CloudWatch publishes to the encrypted topic with the data key, so it needs the key.
        key.add_to_resource_policy(
            iam.PolicyStatement(
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["kms:Decrypt", "kms:GenerateDataKey"],
                resources=["*"],  # in a key policy "*" means this key
                conditions={"StringEquals": {"aws:SourceAccount": Stack.of(self).account}},
            )
        )
        self.topic = sns.Topic(
            self,
            "Alarms",
            display_name=f"{settings.stack_name} alarms",
            master_key=key,
            enforce_ssl=True,
        )
        if settings.alarm_email:
            self.topic.add_subscription(subscriptions.EmailSubscription(settings.alarm_email))
        self._action = actions.SnsAction(self.topic)
        self.alarms: list[cloudwatch.Alarm] = []

        for queue_name, dlq in dead_letter_queues.items():
            self._alarm(
                f"{queue_name.capitalize()}DeadLetters",
                dlq.metric_approximate_number_of_messages_visible(
                    period=PERIOD, statistic="Maximum"
                ),
                threshold=0,
                description=f"Jobs of the {queue_name} queue failed "
                f"{catalog.queue(queue_name).max_receive_count} times and wait in its DLQ: "
                "inspect, fix, then redrive.",
            )
        # The Average of 5XXError is the share of requests that failed.
        self._alarm(
            "Api5xxRate",
            api.metric_server_error(period=PERIOD, statistic="Average"),
            threshold=API_5XX_RATE,
            description="More than 5 % of API requests answered 5XX.",
        )
        for fn in functions:
            name = fn.node.id
            self._alarm(
                f"{name}Throttles",
                fn.metric_throttles(period=PERIOD, statistic="Sum"),
                threshold=0,
                description=f"{name} invocations were throttled.",
            )
        for queue_name, fn in workers.items():
            self._alarm(
                f"{fn.node.id}Errors",
                fn.metric_errors(period=PERIOD, statistic="Sum"),
                threshold=0,
                description=f"The {queue_name} worker crashed or timed out (not per-item "
                "failures, which go back to the queue).",
            )

    def _alarm(
        self, construct_id: str, metric: cloudwatch.IMetric, *, threshold: float, description: str
    ) -> None:
        alarm = cloudwatch.Alarm(
            self,
            construct_id,
            metric=metric,
            threshold=threshold,
            evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=description,
        )
        alarm.add_alarm_action(self._action)
        alarm.add_ok_action(self._action)
        self.alarms.append(alarm)
