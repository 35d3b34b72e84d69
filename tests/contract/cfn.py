"""The synthesised CloudFormation template as the contract tests read it.

Intrinsic functions (Ref, Fn::GetAtt, Fn::Join, Fn::Sub, Fn::Select, Fn::Split) resolve to
concrete values. A resource's physical name comes, in this order, from a binding (the name the
emulated deployment really uses, e.g. aws-local's bucket, bound through the function
environment that references it), from its own name property, or from its logical id; its ARN
is derived from that name the way the service forms it. So a policy's `Fn::GetAtt` and a
recorded call's parameters meet on the same string.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

REGION = "us-east-1"
ACCOUNT = "123456789012"  # moto's default account: the ARNs moto returns carry it
PARTITION = "aws"

PSEUDO = {
    "AWS::Region": REGION,
    "AWS::AccountId": ACCOUNT,
    "AWS::Partition": PARTITION,
    "AWS::URLSuffix": "amazonaws.com",
    "AWS::NoValue": None,
}

# CloudFormation property that names each kind of resource, when the template sets it.
_NAME_PROPERTY = {
    "AWS::S3::Bucket": "BucketName",
    "AWS::DynamoDB::Table": "TableName",
    "AWS::SQS::Queue": "QueueName",
    "AWS::IAM::Role": "RoleName",
    "AWS::Logs::LogGroup": "LogGroupName",
    "AWS::Scheduler::ScheduleGroup": "Name",
    "AWS::OpenSearchService::Domain": "DomainName",
    "AWS::OpenSearchServerless::Collection": "Name",
    "AWS::SecretsManager::Secret": "Name",
    "AWS::Lambda::Function": "FunctionName",
    "AWS::SNS::Topic": "TopicName",
}


class Unresolvable(ValueError):
    """A template value the contract tests cannot turn into a concrete string."""


@dataclass
class Template:
    doc: dict[str, Any]
    # logical id -> attribute ("Ref", "Arn", "DomainEndpoint", ...) -> concrete value
    bound: dict[str, dict[str, str]] = field(default_factory=dict)

    @classmethod
    def of(cls, doc: Mapping[str, Any]) -> Template:
        return cls(copy.deepcopy(dict(doc)))

    def copy(self) -> Template:
        return Template(copy.deepcopy(self.doc), copy.deepcopy(self.bound))

    @property
    def resources(self) -> dict[str, dict[str, Any]]:
        resources: dict[str, dict[str, Any]] = self.doc["Resources"]
        return resources

    def of_type(self, cfn_type: str) -> Iterator[tuple[str, dict[str, Any]]]:
        for logical_id, resource in self.resources.items():
            if resource["Type"] == cfn_type:
                yield logical_id, resource

    def props(self, logical_id: str) -> dict[str, Any]:
        props: dict[str, Any] = self.resources[logical_id].get("Properties", {})
        return props

    # -- binding -------------------------------------------------------------------------

    def bind(self, expression: Any, value: str) -> None:
        """Record that `expression` (a Ref or Fn::GetAtt) denotes `value` in the emulation."""
        if isinstance(expression, dict) and "Ref" in expression:
            self.bound.setdefault(expression["Ref"], {})["Ref"] = value
        elif isinstance(expression, dict) and "Fn::GetAtt" in expression:
            logical_id, attribute = _getatt(expression["Fn::GetAtt"])
            self.bound.setdefault(logical_id, {})[attribute] = value
        else:
            raise Unresolvable(f"cannot bind {json.dumps(expression)} to a resource")

    # -- resolution ----------------------------------------------------------------------

    def resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, arg),) = value.items()
            intrinsic = _INTRINSICS.get(key)
            if intrinsic is not None:
                return intrinsic(self, arg)
            if key.startswith("Fn::") or key == "Condition":
                raise Unresolvable(f"unsupported intrinsic {key}")
        return {k: self.resolve(v) for k, v in value.items()}

    def _ref(self, arg: Any) -> Any:
        return self.attribute(arg, "Ref")

    def _get_att(self, arg: Any) -> Any:
        return self.attribute(*_getatt(arg))

    def _join(self, arg: Any) -> str:
        sep, parts = arg
        return str(sep).join(str(self.resolve(p)) for p in self.resolve(parts))

    def _select(self, arg: Any) -> Any:
        index, items = arg
        return self.resolve(items)[int(self.resolve(index))]

    def _split(self, arg: Any) -> list[str]:
        sep, text = arg
        return str(self.resolve(text)).split(sep)

    def _sub(self, arg: Any) -> str:
        text, variables = (arg, {}) if isinstance(arg, str) else (arg[0], arg[1])

        def one(match: re.Match[str]) -> str:
            name = match.group(1)
            if name in variables:
                return str(self.resolve(variables[name]))
            if name in PSEUDO:
                return str(PSEUDO[name])
            logical_id, _, attribute = name.partition(".")
            return str(self.attribute(logical_id, attribute or "Ref"))

        return re.sub(r"\$\{([^}!][^}]*)\}", one, str(text))

    def attribute(self, logical_id: str, attribute: str) -> Any:
        if logical_id in PSEUDO:
            return PSEUDO[logical_id]
        if logical_id in self.bound and attribute in self.bound[logical_id]:
            return self.bound[logical_id][attribute]
        if logical_id not in self.resources:
            raise Unresolvable(f"no resource {logical_id} in the template")
        derived = self._derived(logical_id)
        if attribute not in derived:
            raise Unresolvable(
                f"{logical_id}.{attribute} has no contract value "
                f"({self.resources[logical_id]['Type']})"
            )
        return derived[attribute]

    def name(self, logical_id: str) -> str:
        """The physical name of a resource (see the module notes)."""
        bound = self.bound.get(logical_id, {})
        cfn_type = self.resources[logical_id]["Type"]
        if "Ref" in bound:
            ref = bound["Ref"]
            if cfn_type == "AWS::SQS::Queue":
                return ref.rstrip("/").rsplit("/", 1)[-1]
            if ref.startswith("arn:"):
                return _arn_name(ref)
            return ref
        if "Arn" in bound:
            return _arn_name(bound["Arn"])
        prop = _NAME_PROPERTY.get(cfn_type)
        explicit = self.props(logical_id).get(prop) if prop else None
        return str(self.resolve(explicit)) if explicit is not None else logical_id

    def _derived(self, logical_id: str) -> dict[str, str]:
        cfn_type = self.resources[logical_id]["Type"]
        name = self.name(logical_id)
        derive = _DERIVED.get(cfn_type)
        if derive is None:
            return {"Ref": logical_id}
        return derive(logical_id, name, self.bound.get(logical_id, {}))

    # -- policies ------------------------------------------------------------------------

    def role_policies(self, role_id: str) -> list[tuple[str, dict[str, Any]]]:
        """Every identity policy of a role, resolved: (source, document)."""
        docs: list[tuple[str, dict[str, Any]]] = []
        for policy_id, policy in self.of_type("AWS::IAM::Policy"):
            roles = policy["Properties"].get("Roles", [])
            if any(r == {"Ref": role_id} for r in roles):
                docs.append((policy_id, self.resolve(policy["Properties"]["PolicyDocument"])))
        role = self.props(role_id)
        for inline in role.get("Policies", []):
            docs.append(
                (f"{role_id}/{inline['PolicyName']}", self.resolve(inline["PolicyDocument"]))
            )
        for managed in role.get("ManagedPolicyArns", []):
            docs.append(self._managed(managed))
        return docs

    def _managed(self, expression: Any) -> tuple[str, dict[str, Any]]:
        if (
            isinstance(expression, dict)
            and "Ref" in expression
            and self.resources.get(expression["Ref"], {}).get("Type") == "AWS::IAM::ManagedPolicy"
        ):
            logical_id = expression["Ref"]
            return logical_id, self.resolve(self.props(logical_id)["PolicyDocument"])
        arn = str(self.resolve(expression))
        from moto.iam.aws_managed_policies import aws_managed_policies_data

        name = arn.rsplit("/", 1)[-1]
        managed = json.loads(aws_managed_policies_data).get(name)
        if managed is None:
            raise Unresolvable(f"managed policy {arn} is unknown to the evaluator")
        return arn, managed["Document"]


# Intrinsic function -> how a template resolves its argument.
_INTRINSICS: dict[str, Callable[[Template, Any], Any]] = {
    "Ref": Template._ref,
    "Fn::GetAtt": Template._get_att,
    "Fn::Join": Template._join,
    "Fn::Select": Template._select,
    "Fn::Split": Template._split,
    "Fn::Sub": Template._sub,
}

# -- derived attributes: (logical id, physical name, bound attributes) -> attribute values ----

_Derive = Callable[[str, str, Mapping[str, str]], dict[str, str]]
_R, _A = REGION, ACCOUNT


def _bucket(logical_id: str, name: str, bound: Mapping[str, str]) -> dict[str, str]:
    return {"Ref": name, "Arn": f"arn:aws:s3:::{name}"}


def _table(logical_id: str, name: str, bound: Mapping[str, str]) -> dict[str, str]:
    return {"Ref": name, "Arn": f"arn:aws:dynamodb:{_R}:{_A}:table/{name}"}


def _queue(logical_id: str, name: str, bound: Mapping[str, str]) -> dict[str, str]:
    url = bound.get("Ref") or f"https://sqs.{_R}.amazonaws.com/{_A}/{name}"
    return {"Ref": url, "QueueUrl": url, "QueueName": name, "Arn": f"arn:aws:sqs:{_R}:{_A}:{name}"}


def _role(logical_id: str, name: str, bound: Mapping[str, str]) -> dict[str, str]:
    return {"Ref": name, "Arn": f"arn:aws:iam::{_A}:role/{name}", "RoleId": f"AROA{_digits(name)}"}


def _key(logical_id: str, name: str, bound: Mapping[str, str]) -> dict[str, str]:
    key_id = _uuid(logical_id)
    return {"Ref": key_id, "KeyId": key_id, "Arn": f"arn:aws:kms:{_R}:{_A}:key/{key_id}"}


def _secret(logical_id: str, name: str, bound: Mapping[str, str]) -> dict[str, str]:
    arn = bound.get("Ref") or f"arn:aws:secretsmanager:{_R}:{_A}:secret:{name}-AbCdEf"
    return {"Ref": arn, "Id": arn}


def _log_group(logical_id: str, name: str, bound: Mapping[str, str]) -> dict[str, str]:
    return {"Ref": name, "Arn": f"arn:aws:logs:{_R}:{_A}:log-group:{name}:*"}


def _schedule_group(logical_id: str, name: str, bound: Mapping[str, str]) -> dict[str, str]:
    return {"Ref": name, "Arn": f"arn:aws:scheduler:{_R}:{_A}:schedule-group/{name}"}


def _domain(logical_id: str, name: str, bound: Mapping[str, str]) -> dict[str, str]:
    return {
        "Ref": name,
        "Arn": f"arn:aws:es:{_R}:{_A}:domain/{name}",
        "DomainArn": f"arn:aws:es:{_R}:{_A}:domain/{name}",
        "DomainEndpoint": f"search-{name}.{_R}.es.amazonaws.com",
    }


def _collection(logical_id: str, name: str, bound: Mapping[str, str]) -> dict[str, str]:
    collection_id = _digits(name)[:20].lower()
    return {
        "Ref": collection_id,
        "Id": collection_id,
        "Arn": f"arn:aws:aoss:{_R}:{_A}:collection/{collection_id}",
        "CollectionEndpoint": f"https://{collection_id}.{_R}.aoss.amazonaws.com",
    }


def _function(logical_id: str, name: str, bound: Mapping[str, str]) -> dict[str, str]:
    return {"Ref": name, "Arn": f"arn:aws:lambda:{_R}:{_A}:function:{name}"}


def _topic(logical_id: str, name: str, bound: Mapping[str, str]) -> dict[str, str]:
    arn = f"arn:aws:sns:{_R}:{_A}:{name}"
    return {"Ref": arn, "TopicArn": arn}


def _rest_api(logical_id: str, name: str, bound: Mapping[str, str]) -> dict[str, str]:
    return {"Ref": logical_id, "RootResourceId": f"{logical_id}/"}


# Resource type -> its attributes as the service forms them (other types: only Ref).
_DERIVED: dict[str, _Derive] = {
    "AWS::S3::Bucket": _bucket,
    "AWS::DynamoDB::Table": _table,
    "AWS::SQS::Queue": _queue,
    "AWS::IAM::Role": _role,
    "AWS::KMS::Key": _key,
    "AWS::SecretsManager::Secret": _secret,
    "AWS::Logs::LogGroup": _log_group,
    "AWS::Scheduler::ScheduleGroup": _schedule_group,
    "AWS::OpenSearchService::Domain": _domain,
    "AWS::OpenSearchServerless::Collection": _collection,
    "AWS::Lambda::Function": _function,
    "AWS::SNS::Topic": _topic,
    "AWS::ApiGateway::RestApi": _rest_api,
}


def _getatt(arg: Any) -> tuple[str, str]:
    if isinstance(arg, str):
        logical_id, _, attribute = arg.partition(".")
        return logical_id, attribute
    return str(arg[0]), str(arg[1])


def _arn_name(arn: str) -> str:
    tail = arn.split(":", 5)[-1]
    return tail.rsplit("/", 1)[-1].rsplit(":", 1)[-1]


def _digits(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest().upper()[:21]


def _uuid(text: str) -> str:
    h = hashlib.sha256(text.encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
