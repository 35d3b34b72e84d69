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
from collections.abc import Iterator, Mapping
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
            if key == "Ref":
                return self.attribute(arg, "Ref")
            if key == "Fn::GetAtt":
                return self.attribute(*_getatt(arg))
            if key == "Fn::Join":
                sep, parts = arg
                return str(sep).join(str(self.resolve(p)) for p in self.resolve(parts))
            if key == "Fn::Select":
                index, items = arg
                return self.resolve(items)[int(self.resolve(index))]
            if key == "Fn::Split":
                sep, text = arg
                return str(self.resolve(text)).split(sep)
            if key == "Fn::Sub":
                return self._sub(arg)
            if key.startswith("Fn::") or key == "Condition":
                raise Unresolvable(f"unsupported intrinsic {key}")
        return {k: self.resolve(v) for k, v in value.items()}

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
        r, a = REGION, ACCOUNT
        bound = self.bound.get(logical_id, {})
        if cfn_type == "AWS::S3::Bucket":
            return {"Ref": name, "Arn": f"arn:aws:s3:::{name}"}
        if cfn_type == "AWS::DynamoDB::Table":
            return {"Ref": name, "Arn": f"arn:aws:dynamodb:{r}:{a}:table/{name}"}
        if cfn_type == "AWS::SQS::Queue":
            url = bound.get("Ref") or f"https://sqs.{r}.amazonaws.com/{a}/{name}"
            return {
                "Ref": url,
                "QueueUrl": url,
                "QueueName": name,
                "Arn": f"arn:aws:sqs:{r}:{a}:{name}",
            }
        if cfn_type == "AWS::IAM::Role":
            return {
                "Ref": name,
                "Arn": f"arn:aws:iam::{a}:role/{name}",
                "RoleId": f"AROA{_digits(name)}",
            }
        if cfn_type == "AWS::KMS::Key":
            key_id = _uuid(logical_id)
            return {"Ref": key_id, "KeyId": key_id, "Arn": f"arn:aws:kms:{r}:{a}:key/{key_id}"}
        if cfn_type == "AWS::SecretsManager::Secret":
            arn = bound.get("Ref") or f"arn:aws:secretsmanager:{r}:{a}:secret:{name}-AbCdEf"
            return {"Ref": arn, "Id": arn}
        if cfn_type == "AWS::Logs::LogGroup":
            return {"Ref": name, "Arn": f"arn:aws:logs:{r}:{a}:log-group:{name}:*"}
        if cfn_type == "AWS::Scheduler::ScheduleGroup":
            return {"Ref": name, "Arn": f"arn:aws:scheduler:{r}:{a}:schedule-group/{name}"}
        if cfn_type == "AWS::OpenSearchService::Domain":
            return {
                "Ref": name,
                "Arn": f"arn:aws:es:{r}:{a}:domain/{name}",
                "DomainArn": f"arn:aws:es:{r}:{a}:domain/{name}",
                "DomainEndpoint": f"search-{name}.{r}.es.amazonaws.com",
            }
        if cfn_type == "AWS::OpenSearchServerless::Collection":
            collection_id = _digits(name)[:20].lower()
            return {
                "Ref": collection_id,
                "Id": collection_id,
                "Arn": f"arn:aws:aoss:{r}:{a}:collection/{collection_id}",
                "CollectionEndpoint": f"https://{collection_id}.{r}.aoss.amazonaws.com",
            }
        if cfn_type == "AWS::Lambda::Function":
            return {"Ref": name, "Arn": f"arn:aws:lambda:{r}:{a}:function:{name}"}
        if cfn_type == "AWS::SNS::Topic":
            arn = f"arn:aws:sns:{r}:{a}:{name}"
            return {"Ref": arn, "TopicArn": arn}
        if cfn_type == "AWS::ApiGateway::RestApi":
            return {"Ref": logical_id, "RootResourceId": f"{logical_id}/"}
        return {"Ref": logical_id}

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
