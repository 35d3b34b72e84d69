"""Routes contract: every FastAPI route of each HTTP function is reachable through the
synthesised API Gateway resources and methods, reaches that very function, and carries the API
key authorizer (only /health and /ready are public); no gateway method leads to a function
that serves nothing under it. The last tests break a copy of the template and see the check
fail, so it cannot pass vacuously."""

from __future__ import annotations

import pytest

from tests.contract.apigateway import RestApi
from tests.contract.cfn import Template
from tests.contract.conftest import Synthesised
from tests.contract.routes import all_routes, route_problems
from tests.contract.seams import HTTP_FUNCTIONS, Route

pytestmark = pytest.mark.contract


def test_every_function_serves_routes() -> None:
    routes = all_routes()
    for function in HTTP_FUNCTIONS:
        assert [r for r in routes if r.function == function], function
    # No route is claimed by two functions: the gateway can only send it to one.
    keys = [(r.verb, r.path) for r in routes]
    assert len(keys) == len(set(keys))


def test_routes_and_gateway_agree(template: Template, synthesised: Synthesised) -> None:
    assert route_problems(template, synthesised.function_ids) == []


def test_selection_follows_api_gateway_rules(template: Template, synthesised: Synthesised) -> None:
    api = RestApi(template)
    ids = synthesised.function_ids

    def target(verb: str, path: str) -> str | None:
        method = api.select(verb, path)
        return None if method is None else method.function

    assert target("POST", "/api/v1/search/find") == ids["search"]
    assert target("GET", "/api/v1/sessions") == ids["sessions"]  # the literal resource
    assert target("POST", "/api/v1/sessions/s1/messages/batch") == ids["sessions"]
    assert target("GET", "/api/v1/fs/ls") == ids["content"]  # the /api/v1 proxy
    assert target("GET", "/health") == ids["content"]
    assert target("POST", "/health") is None  # the probe resource has GET only
    assert target("GET", "/api/v1/search") is None  # a resource without a method
    assert target("GET", "/elsewhere") is None


def test_a_misrouted_template_fails(template: Template, synthesised: Synthesised) -> None:
    ids = synthesised.function_ids
    broken = template.copy()
    # Send the sessions proxy to the search function.
    for logical_id, method in broken.of_type("AWS::ApiGateway::Method"):
        if "proxy" in logical_id and "sessions" in logical_id:
            _replace_function(method, ids["sessions"], ids["search"])
    problems = route_problems(broken, ids)
    assert any(
        "POST /api/v1/sessions/{session_id}/commit (sessions): the gateway sends it to search" in p
        for p in problems
    ), problems
    assert any("-> search: that function serves no route" in p for p in problems), problems


def test_a_method_without_the_authorizer_fails(
    template: Template, synthesised: Synthesised
) -> None:
    broken = template.copy()
    for logical_id, method in broken.of_type("AWS::ApiGateway::Method"):
        if "searchproxy" in logical_id:
            method["Properties"]["AuthorizationType"] = "NONE"
            method["Properties"].pop("AuthorizerId", None)
    problems = route_problems(broken, synthesised.function_ids)
    assert any(
        p.startswith(
            "POST /api/v1/search/find (search): method ANY "
            "/api/v1/search/{proxy+} has authorization NONE"
        )
        for p in problems
    )


def test_a_route_without_a_gateway_path_fails(template: Template, synthesised: Synthesised) -> None:
    stray = Route("content", "GET", "/api/v2/fs/ls")
    problems = route_problems(template, synthesised.function_ids, [*all_routes(), stray])
    assert problems == ["GET /api/v2/fs/ls (content): no API Gateway method reaches it"]


def _replace_function(method: dict[str, object], old: str, new: str) -> None:
    def walk(value: object) -> object:
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return new if value == old else value

    method["Properties"] = walk(method["Properties"])
