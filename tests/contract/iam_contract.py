"""The IAM contract as data: each recorded call judged against its function's role (or, when
it went with a tenant's credentials, against the function's tenant role with that session's
tags), and each granted action of both roles checked for use (see test_iam_contract.py for
the assertions)."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tests.contract import seams
from tests.contract.cfn import Template
from tests.contract.iam_actions import AuthRequest, Deployment, describe, requests_for
from tests.contract.iam_eval import Evaluator, Grant
from tests.contract.recorder import AwsCall


@dataclass(frozen=True)
class Allowance:
    """A granted action no recorded call needs, and why it is granted all the same."""

    action: str  # glob over IAM actions
    reason: str
    functions: frozenset[str] | None = None  # None: every function
    condition: str | None = None  # a substring the grant's Condition JSON must contain
    resource: str | None = None  # a substring the grant's resource must contain

    def covers(self, function: str, grant: Grant) -> bool:
        return (
            fnmatch.fnmatchcase(grant.action.lower(), self.action.lower())
            and (self.functions is None or function in self.functions)
            and (self.condition is None or self.condition in grant.condition)
            and (self.resource is None or self.resource in grant.resource)
        )


@dataclass(frozen=True)
class Denial:
    request: AuthRequest
    reason: str
    call: AwsCall

    def describe(self) -> str:
        return f"{describe(self.request)} during {self.call.phase!r}: {self.reason}"


@dataclass
class Judgement:
    requests: int = 0
    denials: list[Denial] = field(default_factory=list)
    used: set[Grant] = field(default_factory=set)


def roles(
    template: Template, function_ids: Mapping[str, str], principals: Mapping[str, str]
) -> dict[str, str]:
    """Recorded principal (function key, or "scheduler") -> logical id of its role."""
    out = {f: seams.role_of(template, function_ids[f]) for f in seams.FUNCTIONS}
    out.update(principals)
    return out


def tenant_roles(template: Template, function_ids: Mapping[str, str]) -> dict[str, str]:
    """Function key -> logical id of its tenant role (data-plane functions only)."""
    out = {}
    for function in seams.FUNCTIONS:
        role = seams.tenant_role_of(template, function_ids[function])
        if role is not None:
            out[function] = role
    return out


def role_for(template: Template, call: AwsCall, role_of: Mapping[str, str]) -> str:
    """The role a call went as: its function's, or the one its session assumed."""
    if call.session is None:
        return role_of[call.function]
    for logical_id, _ in template.of_type("AWS::IAM::Role"):
        if template.attribute(logical_id, "Arn") == call.session.role_arn:
            return logical_id
    raise LookupError(f"{call.describe()} went as {call.session.role_arn}, not in the template")


def judge(
    template: Template, calls: Iterable[AwsCall], role_of: Mapping[str, str]
) -> dict[str, Judgement]:
    deployment = Deployment(template)
    evaluator = Evaluator(template)
    out: dict[str, Judgement] = {name: Judgement() for name in role_of}
    for call in calls:
        verdict = out[call.function]
        role = role_for(template, call, role_of)
        tags = dict(call.session.tags) if call.session is not None else None
        for request in requests_for(call, deployment):
            decision = evaluator.decide(role, request, tags)
            verdict.requests += 1
            verdict.used.update(decision.grants)
            if not decision.allowed:
                verdict.denials.append(Denial(request, decision.reason, call))
    return out


def unexplained_unused(
    template: Template,
    role_id: str | Iterable[str],
    function: str,
    used: set[Grant],
    allowances: Iterable[Allowance],
) -> list[Grant]:
    """Grants (action on resource pattern, under its condition) of the role(s) no recorded
    call used, minus those an allowance explains: every grant, not every action, so an
    action granted on more resources than the calls need (an index, another queue, another
    model) is reported too."""
    evaluator = Evaluator(template)
    allowances = list(allowances)
    role_ids = [role_id] if isinstance(role_id, str) else list(role_id)
    granted = {g for r in role_ids for g in evaluator.grants(r)}
    return sorted(
        {
            grant
            for grant in granted
            if grant not in used and not any(a.covers(function, grant) for a in allowances)
        },
        key=lambda g: (g.action, g.resource, g.source),
    )


def describe_grant(grant: Grant) -> str:
    condition = f" if {grant.condition}" if grant.condition else ""
    return f"{grant.action} on {grant.resource}{condition} ({grant.source})"
