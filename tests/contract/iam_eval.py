"""IAM policy evaluation for the contract tests, on moto's policy engine.

moto's `IAMPolicyStatement` decides whether a statement covers an action and a resource
(wildcards, NotAction); its document validator checks each policy's grammar. moto leaves out
what decides real requests here, so this module adds it, following the IAM evaluation logic
for a principal and a resource in one account:

- an explicit Deny in any applicable policy wins; otherwise an Allow in the identity
  policies or in the resource policy (naming the role) allows; otherwise the implicit deny;
- KMS: the key policy must allow the role, or allow the account (which delegates to IAM)
  and then an identity policy must allow too;
- Principal elements of resource policies (AWS ARNs, "*", the account root); a role's trust
  policy is the resource policy of sts:AssumeRole / sts:TagSession on that role;
- Condition elements with the operators the templates use (String*, Arn*, Bool, Numeric*,
  with IfExists; Null; the ForAllValues: / ForAnyValue: set operators over multivalued keys
  such as dynamodb:LeadingKeys and aws:TagKeys); a missing key fails a positive operator and
  satisfies a negated one, ForAllValues holds over no value at all (hence the `Null` checks
  beside it in the templates). Any other operator, NotResource or NotPrincipal raises: a
  statement the evaluator cannot judge never counts as allowed;
- policy variables (`${aws:PrincipalTag/skald_account}`) in Resource and condition values,
  from the request context (a tenant session's tags are its principal tags); a variable the
  context lacks matches nothing.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from operator import eq, ge, gt, le, lt
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
        self._core = core
        self._variables = "${" in json.dumps(core.get("Resource", ""))
        self._moto = IAMPolicyStatement(core)

    def covers(self, request: AuthRequest, context: Mapping[str, Any] | None = None) -> bool:
        statement = self._moto
        if self._variables:
            resources = [substitute(r, context or {}) for r in _as_list(self._core["Resource"])]
            kept = [r for r in resources if r is not None]
            if not kept:
                return False
            statement = IAMPolicyStatement({**self._core, "Resource": kept})
        result = statement.is_action_permitted(request.action.lower(), request.resource)
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

    def conditions_hold(self, context: Mapping[str, Any]) -> bool:
        return all(
            _operator(op)(key, values, context)
            for op, pairs in self.condition.items()
            for key, values in pairs.items()
        )

    def grants(self) -> list[Grant]:
        condition = json.dumps(self.condition, sort_keys=True) if self.condition else ""
        return [
            Grant(self.source, a, r, condition)
            for a in _as_list(self.raw.get("Action", []))
            for r in _as_list(self.raw.get("Resource", "*"))
        ]


_VARIABLE = re.compile(r"\$\{([^}]+)\}")


def substitute(text: str, context: Mapping[str, Any]) -> str | None:
    """`text` with its policy variables replaced from `context` (None: one is missing)."""
    missing = False

    def one(match: re.Match[str]) -> str:
        nonlocal missing
        value = context.get(match.group(1))
        if not isinstance(value, str):
            missing = True
            return ""
        return value

    out = _VARIABLE.sub(one, text)
    return None if missing else out


# A condition operator applied: (condition key, the policy's values, request context) -> holds.
_Holds = Callable[[str, Any, Mapping[str, Any]], bool]


def _numeric(compare: Callable[[float, float], bool]) -> Callable[[str, str], bool]:
    return lambda actual, text: compare(float(actual), float(text))


def _equals(actual: str, text: str) -> bool:
    return actual == text


def _equals_ignore_case(actual: str, text: str) -> bool:
    return actual.lower() == text.lower()


# Operator (without IfExists or a set quantifier) -> whether one request value matches one
# policy value; a Not operator matches as its positive form and is negated by the caller.
_MATCHERS: dict[str, Callable[[str, str], bool]] = {
    "StringEquals": _equals,
    "StringNotEquals": _equals,
    "ArnEquals": fnmatch.fnmatchcase,
    "ArnNotEquals": fnmatch.fnmatchcase,
    "StringEqualsIgnoreCase": _equals_ignore_case,
    "StringNotEqualsIgnoreCase": _equals_ignore_case,
    "StringLike": fnmatch.fnmatchcase,
    "StringNotLike": fnmatch.fnmatchcase,
    "ArnLike": fnmatch.fnmatchcase,
    "ArnNotLike": fnmatch.fnmatchcase,
    "Bool": _equals_ignore_case,
    "NumericEquals": _numeric(eq),
    "NumericNotEquals": _numeric(eq),
    "NumericLessThan": _numeric(lt),
    "NumericLessThanEquals": _numeric(le),
    "NumericGreaterThan": _numeric(gt),
    "NumericGreaterThanEquals": _numeric(ge),
}


def _unsupported(name: str) -> Unjudgeable:
    return Unjudgeable(f"condition operator {name} is not supported by the evaluator")


def _operator(name: str) -> _Holds:
    """The test an operator name stands for; raises, when the statement is read, on an
    operator the evaluator cannot judge."""
    quantifier, _, rest = name.rpartition(":") if name.startswith("For") else ("", "", name)
    if quantifier and quantifier not in ("ForAnyValue", "ForAllValues"):
        raise _unsupported(name)
    base, if_exists = (rest[:-8], True) if rest.endswith("IfExists") else (rest, False)
    if base == "Null":
        if quantifier or if_exists:
            raise _unsupported(name)
        return _null
    match = _MATCHERS.get(base)
    if match is None:
        raise _unsupported(name)
    return _Condition(name, quantifier, if_exists, "Not" in base, match).holds


def _null(key: str, values: Any, context: Mapping[str, Any]) -> bool:
    actual = context.get(key)
    absent = actual is None or actual == () or actual == []
    return any(str(v).lower() == ("true" if absent else "false") for v in _as_list(values))


@dataclass(frozen=True)
class _Condition:
    """One operator other than Null, with its quantifier and IfExists read off its name."""

    name: str
    quantifier: str  # "", "ForAnyValue" or "ForAllValues"
    if_exists: bool
    negated: bool
    match: Callable[[str, str], bool]  # (request value, policy value as text)

    def matches(self, values: Any, actual: str, context: Mapping[str, Any]) -> bool:
        policy = [substitute(v, context) if isinstance(v, str) else v for v in _as_list(values)]
        hit = any(self.match(actual, _policy_text(v)) for v in policy if v is not None)
        return not hit if self.negated else hit

    def holds(self, key: str, values: Any, context: Mapping[str, Any]) -> bool:
        actual = context.get(key)
        if self.quantifier:
            return self._holds_over_set(values, actual, context)
        if actual is None:
            return self.if_exists or self.negated
        if not isinstance(actual, str):
            raise Unjudgeable(f"{key} is multivalued: {self.name} needs ForAllValues/ForAnyValue")
        return self.matches(values, actual, context)

    def _holds_over_set(self, values: Any, actual: Any, context: Mapping[str, Any]) -> bool:
        many = [] if actual is None else [actual] if isinstance(actual, str) else list(actual)
        if self.quantifier == "ForAllValues":  # vacuously true over no value
            return all(self.matches(values, a, context) for a in many)
        return any(self.matches(values, a, context) for a in many)


def _policy_text(value: Any) -> str:
    # JSON booleans in a policy compare as IAM writes them: "true" / "false".
    return str(value).lower() if isinstance(value, bool) else str(value)


class Policies:
    """Every policy of the template that can decide a request of a given role."""

    def __init__(self, template: Template) -> None:
        self.template = template
        self._resource: list[tuple[str, str, list[Statement]]] = []  # (type, id, statements)
        for cfn_type, prop in (
            ("AWS::OpenSearchService::Domain", "AccessPolicies"),
            ("AWS::S3::BucketPolicy", "PolicyDocument"),
            ("AWS::SQS::QueuePolicy", "PolicyDocument"),
            ("AWS::KMS::Key", "KeyPolicy"),
        ):
            for logical_id, resource in template.of_type(cfn_type):
                document = resource["Properties"].get(prop)
                if document is not None:
                    resolved = template.resolve(document)
                    self._resource.append(
                        (
                            cfn_type,
                            logical_id,
                            [
                                Statement(logical_id, s, resource_policy=True)
                                for s in _as_list(resolved["Statement"])
                            ],
                        )
                    )
        # A role's trust policy: the resource policy of assuming it (the role is its resource).
        for logical_id, role in template.of_type("AWS::IAM::Role"):
            document = role["Properties"].get("AssumeRolePolicyDocument")
            if document is not None:
                arn = str(template.attribute(logical_id, "Arn"))
                self._resource.append(
                    (
                        "AWS::IAM::Role",
                        logical_id,
                        [
                            Statement(
                                f"{logical_id}/trust", {**s, "Resource": arn}, resource_policy=True
                            )
                            for s in _as_list(template.resolve(document)["Statement"])
                        ],
                    )
                )

    def identity(self, role_id: str) -> list[Statement]:
        statements = []
        for source, document in self.template.role_policies(role_id):
            validate_document(document)
            statements += [
                Statement(source, s, resource_policy=False) for s in _as_list(document["Statement"])
            ]
        return statements

    def resource(
        self, request: AuthRequest, context: Mapping[str, Any]
    ) -> tuple[str | None, list[Statement]]:
        """(the kind of policy that must allow: "key" for a KMS key policy, "trust" for a
        role's trust policy, None; the statements of every resource policy covering it)."""
        out: list[Statement] = []
        kind: str | None = None
        for cfn_type, _, statements in self._resource:
            relevant = [s for s in statements if s.covers(request, context)]
            if relevant:
                out += relevant
                if cfn_type == "AWS::KMS::Key":
                    kind = "key"
                elif cfn_type == "AWS::IAM::Role":
                    kind = "trust"
        return kind, out


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

    def decide(
        self, role_id: str, request: AuthRequest, principal_tags: Mapping[str, str] | None = None
    ) -> Decision:
        """Whether `role_id` may make `request`; `principal_tags` are a role session's tags
        (a tenant session's account)."""
        role_arn = self.role_arn(role_id)
        context: dict[str, Any] = {
            "aws:PrincipalArn": role_arn,
            "aws:PrincipalAccount": ACCOUNT,
            **{f"aws:PrincipalTag/{k}": v for k, v in (principal_tags or {}).items()},
            **request.context,
        }
        identity = [
            s
            for s in self.identity(role_id)
            if s.covers(request, context) and s.conditions_hold(context)
        ]
        must, resource = self.policies.resource(request, context)
        resource = [
            s
            for s in resource
            if s.principal_is(role_arn) is not None and s.conditions_hold(context)
        ]
        denies = [s for s in (*identity, *resource) if s.effect == "Deny"]
        if denies:
            return Decision(False, f"explicit deny in {denies[0].source}")
        identity_allows = [s for s in identity if s.effect == "Allow"]
        named = [
            s
            for s in resource
            if s.effect == "Allow" and s.principal_is(role_arn) in ("role", "any")
        ]
        delegated = [
            s for s in resource if s.effect == "Allow" and s.principal_is(role_arn) == "account"
        ]
        grants = [
            g for s in identity_allows for g in s.grants() if _grant_covers(g, request, context)
        ] + [g for s in named for g in s.grants() if _grant_covers(g, request, context)]
        if must is not None:  # a key policy or a trust policy must allow, itself or by IAM
            policy = "the key policy" if must == "key" else "the role's trust policy"
            if named:
                return Decision(True, f"{policy} allows the role", grants)
            if delegated and identity_allows:
                return Decision(True, f"{policy} delegates to IAM, which allows", grants)
            return Decision(
                False,
                f"{policy} does not allow it"
                if not delegated
                else f"{policy} delegates to IAM, which does not allow it",
            )
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
            out += [
                g
                for s in statements
                if s.effect == "Allow" and s.principal_is(role_arn) == "role"
                for g in s.grants()
            ]
        return out


def _grant_covers(grant: Grant, request: AuthRequest, context: Mapping[str, Any]) -> bool:
    resource = substitute(grant.resource, context)
    if resource is None:
        return False
    statement = IAMPolicyStatement(
        {"Effect": "Allow", "Action": grant.action.lower(), "Resource": resource}
    )
    result = statement.is_action_permitted(request.action.lower(), request.resource)
    return bool(result == PermissionResult.PERMITTED)
