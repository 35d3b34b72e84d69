"""cdk-nag helpers: every suppression names one rule (and, for IAM5, one exact resource) and
says why it is acceptable; nothing is suppressed stack-wide."""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from cdk_nag import NagPackSuppression, NagSuppressions
from constructs import Construct, IConstruct


def suppress(construct: IConstruct, rule: str, reason: str, *, children: bool = False) -> None:
    NagSuppressions.add_resource_suppressions(
        construct,
        [NagPackSuppression(id=f"AwsSolutions-{rule}", reason=reason)],
        apply_to_children=children,
    )


def allow_wildcard_resource(grantee: iam.IGrantable, resource: str, reason: str) -> None:
    """Accept AwsSolutions-IAM5 for exactly one wildcard resource in the grantee's policy.

    `resource` is written the way cdk-nag prints it, e.g. `<BucketLogicalId.Arn>/*`.
    """
    principal = grantee.grant_principal
    if not isinstance(principal, Construct):
        return  # nothing rendered into this stack, so nothing to report on
    NagSuppressions.add_resource_suppressions(
        principal,
        [
            NagPackSuppression(
                id="AwsSolutions-IAM5", applies_to=[f"Resource::{resource}"], reason=reason
            )
        ],
        apply_to_children=True,
    )


def arn_token(construct: IConstruct) -> str:
    """How cdk-nag renders `Fn::GetAtt <construct>.Arn` in a finding."""
    stack = Stack.of(construct)
    default_child = construct.node.default_child
    assert default_child is not None
    return f"<{stack.get_logical_id(default_child)}.Arn>"  # type: ignore[arg-type]
