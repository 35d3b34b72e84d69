"""IAM policy evaluation for the contract tests, on moto's policy engine.

moto's `IAMPolicyStatement` decides whether a statement covers an action and a resource
(wildcards, NotAction); its document validator checks each policy's grammar. moto leaves out
what decides real requests here, so this module adds it, following the IAM evaluation logic
for a principal and a resource in one account:

- an explicit Deny in any applicable policy wins; otherwise an Allow in the identity
  policies or in the resource policy (naming the role) allows; otherwise the implicit deny;
- KMS: the key policy must allow the role, or allow the account (which delegates to IAM)
  and then an identity policy must allow too;
- Principal elements of resource policies (AWS ARNs, "*", the account root);
- Condition elements with the operators the templates use (String*, Arn*, Bool, Numeric*,
  with IfExists); a missing key fails a positive operator and satisfies a negated one. Any
  other operator, NotResource or NotPrincipal raises: a statement the evaluator cannot judge
  never counts as allowed.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from moto.iam.access_control import IAMPolicyStatement, PermissionResult
from moto.iam.policy_validation import IAMPolicyDocumentValidator

from tests.contract.cfn import ACCOUNT, Template
from tests.contract.iam_actions import AuthRequest


class Unjudgeable(ValueError):
    """A policy element this evaluator does not implement."""


@dataclass(frozen=True)
class Grant:
    """One (action pattern, resource pattern) an Allow statement gives a principal."""

    source: str  # the policy's logical id
    action: str
    resource: str
    condition: str  # the statement's Condition as JSON ("" when none)


@dataclass
class Decision:
    allowed: bool
    reason: str
    grants: list[Grant] = field(default_factory=list)  # the Allow grants that matched


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def validate_document(document: Mapping[str, Any]) -> None:
    """moto's IAM grammar check (raises on a malformed identity policy)."""
    IAMPolicyDocumentValidator(json.dumps(document)).validate()


class Statement:
    def __init__(self, source: str, raw: Mapping[str, Any], *, resource_policy: bool) -> None:
        for unsupported in ("NotResource", "NotPrincipal"):
            if unsupported in raw:
                raise Unjudgeable(f"{source}: {unsupported} is not supported by the evaluator")
        self.source = source
        self.raw = dict(raw)
        self.effect = raw["Effect"]
        self.principal = raw.get("Principal") if resource_policy else None
        self.condition = raw.get("Condition") or {}
        for operator in self.condition:
            _operator(operator)  # raises on an operator the evaluator cannot judge
        # IAM actions are case-insensitive; moto matches case-sensitively.
        core = {k: v for k, v in raw.items() if k not in ("Principal", "Condition")}
        if "Action" in core:
            core["Action"] = [a.lower() for a in _as_list(core["Action"])]
        if "NotAction" in core:
            core["NotAction"] = [a.lower() for a in _as_list(core["NotAction"])]
        self._moto = IAMPolicyStatement(core)

    def covers(self, request: AuthRequest) -> bool:
        result = self._moto.is_action_permitted(request.action.lower(), request.resource)
        return result in (PermissionResult.PERMITTED, PermissionResult.DENIED)

    def principal_is(self, role_arn: str) -> str | None:
        """'role' (named), 'any' ("*"), 'account' (the account root) or None."""
        principal = self.principal
        if principal is None:
            return "role"  # identity policy: its principal is the role it is attached to
        if principal == "*":
            return "any"
        aws = _as_list(principal.get("AWS", [])) if isinstance(principal, dict) else []
        if "*" in aws:
            return "any"
        if role_arn in aws:
            return "role"
        if f"arn:aws:iam::{ACCOUNT}:root" in aws or ACCOUNT in aws:
            return "account"
        return None

    def conditions_hold(self, context: Mapping[str, str]) -> bool:
        return all(_operator(op)(key, values, context)
                   for op, pairs in self.condition.items()
                   for key, values in pairs.items())

    def grants(self) -> list[Grant]:
        condition = json.dumps(self.condition, sort_keys=True) if self.condition else ""
        return [Grant(self.source, a, r, condition)
                for a in _as_list(self.raw.get("Action", []))
                for r in _as_list(self.raw.get("Resource", "*"))]


def _operator(name: str) -> Any:
    base, if_exists = (name[:-8], True) if name.endswith("IfExists") else (name, False)
    if base.startswith(("ForAnyValue:", "ForAllValues:")):
        raise Unjudgeable(f"condition operator {name} is not supported by the evaluator")
    negated = "Not" in base

    def match_one(policy: Any, actual: str) -> bool:
        text = str(policy).lower() if isinstance(policy, bool) else str(policy)
        if base in ("StringEquals", "StringNotEquals", "ArnEquals", "ArnNotEquals"):
            if base.startswith("Arn"):
                return fnmatch.fnmatchcase(actual, text)
            return actual == text
        if base in ("StringEqualsIgnoreCase", "StringNotEqualsIgnoreCase"):
            return actual.lower() == text.lower()
        if base in ("StringLike", "StringNotLike", "ArnLike", "ArnNotLike"):
            return fnmatch.fnmatchcase(actual, text)
        if base == "Bool":
            return actual.lower() == text.lower()
        if base.startswith("Numeric"):
            a, b = float(actual), float(text)
            return {"NumericEquals": a == b, "NumericNotEquals": a == b,
                    "NumericLessThan": a < b, "NumericLessThanEquals": a <= b,
                    "NumericGreaterThan": a > b, "NumericGreaterThanEquals": a >= b}[base]
        raise Unjudgeable(f"condition operator {name} is not supported by the evaluator")

    match_one("1", "1")  # unknown operators fail here, when the statement is read

    def holds(key: str, values: Any, context: Mapping[str, str]) -> bool:
        actual = context.get(key)
        if actual is None:
            return if_exists or negated
        hit = any(match_one(v, actual) for v in _as_list(values))
        return not hit if negated else hit

    return holds


class Policies:
    """Every policy of the template that can decide a request of a given role."""

    def __init__(self, template: Template) -> None:
        self.template = template
        self._resource: list[tuple[str, str, list[Statement]]] = []  # (type, id, statements)
        for cfn_type, prop in (("AWS::OpenSearchService::Domain", "AccessPolicies"),
                               ("AWS::S3::BucketPolicy", "PolicyDocument"),
                               ("AWS::SQS::QueuePolicy", "PolicyDocument"),
                               ("AWS::KMS::Key", "KeyPolicy")):
            for logical_id, resource in template.of_type(cfn_type):
                document = resource["Properties"].get(prop)
                if document is not None:
                    resolved = template.resolve(document)
                    self._resource.append((cfn_type, logical_id, [
                        Statement(logical_id, s, resource_policy=True)
                        for s in _as_list(resolved["Statement"])]))

    def identity(self, role_id: str) -> list[Statement]:
        statements = []
        for source, document in self.template.role_policies(role_id):
            validate_document(document)
            statements += [Statement(source, s, resource_policy=False)
                           for s in _as_list(document["Statement"])]
        return statements

    def resource(self, request: AuthRequest) -> tuple[bool, list[Statement]]:
        """(is a KMS key policy, the statements of every resource policy covering it)."""
        out: list[Statement] = []
        kms = False
        for cfn_type, _, statements in self._resource:
            relevant = [s for s in statements if s.covers(request)]
            if relevant:
                out += relevant
                kms = kms or cfn_type == "AWS::KMS::Key"
        return kms, out


class Evaluator:
    def __init__(self, template: Template) -> None:
        self.template = template
        self.policies = Policies(template)
        self._identity: dict[str, list[Statement]] = {}

    def role_arn(self, role_id: str) -> str:
        return str(self.template.attribute(role_id, "Arn"))

    def identity(self, role_id: str) -> list[Statement]:
        if role_id not in self._identity:
            self._identity[role_id] = self.policies.identity(role_id)
        return self._identity[role_id]

    def decide(self, role_id: str, request: AuthRequest) -> Decision:
        role_arn = self.role_arn(role_id)
        context = {"aws:PrincipalArn": role_arn, "aws:PrincipalAccount": ACCOUNT,
                   **request.context}
        identity = [s for s in self.identity(role_id)
                    if s.covers(request) and s.conditions_hold(context)]
        is_key, resource = self.policies.resource(request)
        resource = [s for s in resource
                    if s.principal_is(role_arn) is not None and s.conditions_hold(context)]
        denies = [s for s in (*identity, *resource) if s.effect == "Deny"]
        if denies:
            return Decision(False, f"explicit deny in {denies[0].source}")
        identity_allows = [s for s in identity if s.effect == "Allow"]
        named = [s for s in resource if s.effect == "Allow" and
                 s.principal_is(role_arn) in ("role", "any")]
        delegated = [s for s in resource if s.effect == "Allow" and
                     s.principal_is(role_arn) == "account"]
        grants = [g for s in identity_allows for g in s.grants()
                  if _grant_covers(g, request)] + \
                 [g for s in named for g in s.grants() if _grant_covers(g, request)]
        if is_key:
            if named:
                return Decision(True, "the key policy allows the role", grants)
            if delegated and identity_allows:
                return Decision(True, "the key policy delegates to IAM, which allows", grants)
            return Decision(False, "the key policy does not allow it" if not delegated
                            else "the key policy delegates to IAM, which does not allow it")
        if identity_allows or named:
            return Decision(True, "allowed", grants)
        return Decision(False, "no policy allows it")

    def grants(self, role_id: str) -> list[Grant]:
        """Everything the role is given: its identity policies' Allow statements and the
        resource-policy statements naming it (KMS key policies' account-wide delegation
        excepted: it grants nothing by itself)."""
        role_arn = self.role_arn(role_id)
        out = [g for s in self.identity(role_id) if s.effect == "Allow" for g in s.grants()]
        for _, _, statements in self.policies._resource:
            out += [g for s in statements if s.effect == "Allow" and
                    s.principal_is(role_arn) == "role" for g in s.grants()]
        return out


def _grant_covers(grant: Grant, request: AuthRequest) -> bool:
    statement = IAMPolicyStatement({"Effect": "Allow", "Action": grant.action.lower(),
                                    "Resource": grant.resource})
    result = statement.is_action_permitted(request.action.lower(), request.resource)
    return bool(result == PermissionResult.PERMITTED)
