"""Routes contract: what the functions serve against what the REST API sends them."""

from __future__ import annotations

from collections.abc import Mapping

from skald import catalog
from tests.contract.apigateway import Method, RestApi
from tests.contract.cfn import Template
from tests.contract.seams import AUTHORIZER, HTTP_FUNCTIONS, Route, routes_of


def all_routes() -> list[Route]:
    return [route for function in HTTP_FUNCTIONS for route in routes_of(function)]


def route_problems(
    template: Template, function_ids: Mapping[str, str], routes: list[Route] | None = None
) -> list[str]:
    """Everything wrong between the routes and the gateway; empty when the contract holds."""
    api = RestApi(template)
    routes = all_routes() if routes is None else routes
    names = {logical_id: function for function, logical_id in function_ids.items()}
    authorizer = function_ids[AUTHORIZER]
    problems: list[str] = []
    reached: dict[str, list[Route]] = {}
    for route in routes:
        where = f"{route.verb} {route.path} ({route.function})"
        method = api.select(route.verb, route.sample_path())
        if method is None:
            problems.append(f"{where}: no API Gateway method reaches it")
            continue
        reached.setdefault(method.logical_id, []).append(route)
        target = names.get(method.function or "", method.function)
        if target != route.function:
            problems.append(
                f"{where}: the gateway sends it to {target} (method {method.verb} {method.path})"
            )
        problems += _auth_problems(
            where, catalog.is_public(route.sample_path()), method, authorizer
        )
    for method in api.methods:
        served = [
            r
            for r in reached.get(method.logical_id, [])
            if names.get(method.function or "") == r.function
        ]
        if not served:
            target = names.get(method.function or "", method.function)
            problems.append(
                f"API Gateway {method.verb} {method.path} -> {target}: "
                "that function serves no route reached through this method"
            )
    return problems


def _auth_problems(where: str, public: bool, method: Method, authorizer: str) -> list[str]:
    if public:
        if method.authorization != "NONE":
            return [f"{where}: a public path, but the method needs {method.authorization}"]
        return []
    if method.authorization != "CUSTOM":
        return [
            f"{where}: method {method.verb} {method.path} has authorization "
            f"{method.authorization}, not the API key authorizer"
        ]
    if method.authorizer_function != authorizer:
        return [
            f"{where}: method {method.verb} {method.path} uses authorizer function "
            f"{method.authorizer_function}, not {authorizer}"
        ]
    return []
