"""The REST API of the synthesised template: resources, methods, their integrations and
authorizers, and how API Gateway picks the method for a request.

Selection follows API Gateway's rules for REST APIs: the resource is chosen first, segment by
segment, a literal path part before a `{param}` part before a greedy `{proxy+}` (which takes
one or more segments), the longest match winning; then the method on that resource (its own
verb, else ANY). A resource without that method answers 403/404 from the gateway: there is no
fallback to a shorter proxy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tests.contract.cfn import Template, Unresolvable


@dataclass(frozen=True)
class Method:
    logical_id: str
    path: str  # the resource path, e.g. /api/v1/{proxy+}
    verb: str  # GET, POST, ... or ANY
    authorization: str  # NONE, CUSTOM, AWS_IAM, COGNITO_USER_POOLS
    authorizer_function: str | None  # logical id of the authorizer's Lambda function
    function: str | None  # logical id of the integrated Lambda function (AWS_PROXY)


@dataclass
class _Node:
    part: str
    path: str
    children: dict[str, _Node] = field(default_factory=dict)
    methods: dict[str, Method] = field(default_factory=dict)


class RestApi:
    def __init__(self, template: Template) -> None:
        self.template = template
        apis = [lid for lid, _ in template.of_type("AWS::ApiGateway::RestApi")]
        if len(apis) != 1:
            raise Unresolvable(f"expected one REST API, found {apis}")
        self.api_id = apis[0]
        self.root = _Node("", "/")
        nodes: dict[str, _Node] = {}
        resources = dict(template.of_type("AWS::ApiGateway::Resource"))

        def node_of(ref: Any) -> _Node:
            if isinstance(ref, dict) and "Fn::GetAtt" in ref:
                return self.root  # RestApi.RootResourceId
            logical_id = ref["Ref"]
            if logical_id not in nodes:
                props = resources[logical_id]["Properties"]
                parent = node_of(props["ParentId"])
                part = str(props["PathPart"])
                path = f"{parent.path.rstrip('/')}/{part}"
                nodes[logical_id] = parent.children.setdefault(part, _Node(part, path))
            return nodes[logical_id]

        for logical_id in resources:
            node_of({"Ref": logical_id})
        self.methods: list[Method] = []
        for logical_id, resource in template.of_type("AWS::ApiGateway::Method"):
            props = resource["Properties"]
            node = node_of(props["ResourceId"])
            method = Method(
                logical_id=logical_id,
                path=node.path,
                verb=str(props["HttpMethod"]).upper(),
                authorization=str(props.get("AuthorizationType", "NONE")),
                authorizer_function=self._authorizer_function(props.get("AuthorizerId")),
                function=_lambda_of(props.get("Integration", {}).get("Uri")),
            )
            node.methods[method.verb] = method
            self.methods.append(method)

    def _authorizer_function(self, ref: Any) -> str | None:
        if not ref:
            return None
        props = self.template.props(ref["Ref"])
        return _lambda_of(props.get("AuthorizerUri"))

    def select(self, verb: str, path: str) -> Method | None:
        """The method API Gateway runs for `verb path`, or None (a gateway 403/404)."""
        segments = [s for s in path.split("/") if s]
        node = _select(self.root, segments)
        if node is None:
            return None
        return node.methods.get(verb.upper()) or node.methods.get("ANY")


def _select(node: _Node, segments: list[str]) -> _Node | None:
    if not segments:
        return node
    head, rest = segments[0], segments[1:]
    literal = node.children.get(head)
    if literal is not None:
        found = _select(literal, rest)
        if found is not None:
            return found
    for part, child in node.children.items():
        if part.startswith("{") and not part.endswith("+}"):
            found = _select(child, rest)
            if found is not None:
                return found
    for part, child in node.children.items():
        if part.endswith("+}"):
            return child  # greedy: takes every remaining segment
    return None


def _lambda_of(uri: Any) -> str | None:
    """The logical id of the Lambda function an integration or authorizer URI invokes."""
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            getatt = value.get("Fn::GetAtt")
            if isinstance(getatt, list) and getatt[1] == "Arn":
                found.append(str(getatt[0]))
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(uri)
    unique = sorted(set(found))
    if len(unique) > 1:
        raise Unresolvable(f"integration URI names several functions: {unique}")
    return unique[0] if unique else None
