"""Property: no route answers one identity with another user's private data.

Hypothesis draws an identity (two accounts; admins and users; the same user id in both
accounts; with or without an actor peer), a route (find, search in every search type and in
context mode, grep, glob, ls, tree, stat, read, abstract/overview, attrs, tasks, uploads,
sessions) and a URI form (`viking://`, `viking://user`, another user's space, `~`, short
forms, trailing and doubled slashes, case, `..` and percent-encoded escapes, exact file URIs)
against a live `skald serve` in api_key mode, populated by tests/support/isolation_world.py.
Every response is searched for the markers of data the identity may not see.

It runs against both backends: the local one (every search type) and `skald serve --backend
aws-local` (S3, DynamoDB and SQS on moto, OpenSearch on osmem-server; keyword retrieval only
there, as osmem-server has no k-NN engine). Both answer every route through the same services,
so the same number of examples serves both: on aws-local they are what reaches the AWS
adapters' own request building (keys, prefixes, query filters), and there every request the
server sends is also captured and must name exactly the caller's account
(tests/support/tenancy.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.api.conftest import ROOT_KEY
from tests.support.isolation_world import (
    COMMON_WORDS,
    PEERS,
    Principal,
    World,
    build_world,
    headers,
)
from tests.support.server import SkaldServer
from tests.support.tenancy_capture import check_capture_file

MAX_EXAMPLES = 300
BACKENDS = ["local", "aws-local"]
AWS_ROOT_KEY = "isolation-aws-root-key"


@dataclass(frozen=True)
class Target:
    url: str
    root_key: str
    dense: bool  # dense and hybrid retrieval (and so context mode) available


@pytest.fixture(scope="module", params=BACKENDS)
def target(
    request: pytest.FixtureRequest,
    key_server: SkaldServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Target]:
    if request.param == "local":
        yield Target(key_server.url, ROOT_KEY, dense=True)
        return
    pytest.importorskip("moto")
    pytest.importorskip("osmem_server")
    work = tmp_path_factory.mktemp("isolation-aws")
    server = SkaldServer(
        work / "data",
        root_api_key=AWS_ROOT_KEY,
        env={"SKALD_BACKEND": "aws-local"},
        capture=work / "requests.jsonl",
    )
    server.start(timeout_s=180)
    yield Target(server.url, AWS_ROOT_KEY, dense=False)
    server.stop()
    assert server.capture is not None
    check_capture_file(server.capture, tenants=2)  # the world's two accounts


@pytest.fixture(scope="module")
def world(target: Target) -> World:
    return build_world(target.url, target.root_key)


@pytest.fixture(scope="module")
def http(target: Target) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=target.url, timeout=60) as client:
        yield client


@dataclass
class Call:
    method: str
    path: str
    params: dict[str, Any] | None = None
    body: dict[str, Any] | None = None
    peers_shown: bool = False  # context mode with peer_scope=all sweeps every peer on purpose
    must_be_missing: bool = False  # another user's task / upload / session: 404, nothing else

    def describe(self) -> str:
        return json.dumps([self.method, self.path, self.params, self.body])


def uri_forms(world: World, who: Principal, other: Principal) -> st.SearchStrategy[str]:
    o = other.user
    mine = world.owned[who]
    theirs = world.owned[other]
    fixed = [
        "viking://",
        "viking://user",
        "viking://user/",
        "viking://user//",
        "viking://~",
        "viking://~/",
        "viking://~/memories",
        "viking://~/peers",
        "viking://resources",
        "viking://agent",
        "viking://system",
        "viking://session",
        "viking://user/memories",
        "VIKING://user",
        "viking://User",
        "viking:///user",
        "viking://user/.",
        f"viking://user/{o}",
        f"viking://user/{o}/",
        f"viking://user//{o}",
        f"viking://user/{o}/memories",
        f"viking://user/{o}/peers",
        f"viking://user/{o}/peers/p2",
        f"viking://user/{o}/sessions",
        f"viking://user/{o.upper()}",
        f"viking://USER/{o}",
        f"viking://{o}",
        f"viking://~/../{o}",
        f"viking://user/{who.user}/../{o}",
        f"viking://resources/../user/{o}",
        f"viking://user/%2e%2e/{o}",
        f"viking://user%2f{o}",
        "viking://user/" + "".join(f"%{ord(ch):02x}" for ch in o),
        f"viking://user/{o}%2f",
        f"viking://user/{o}/./memories",
        f"viking://~%2f..%2f{o}",
        f"viking://session/{theirs.session_id}",
        f"viking://user/{o}/sessions/{theirs.session_id}",
    ]
    files = [*theirs.files, *theirs.dirs, *mine.files[:1]]
    return st.sampled_from(fixed) | st.sampled_from(files)


def retrieval_call(data: st.DataObject, uri: str, route: str, dense: bool) -> Call:
    body: dict[str, Any] = {
        "query": data.draw(st.sampled_from([COMMON_WORDS, "zebra", "notes", "prefer report", ""])),
        "limit": 100,
    }
    if data.draw(st.booleans()):
        body["target_uri"] = uri if data.draw(st.booleans()) else [uri, "viking://resources"]
    body["search_type"] = (
        data.draw(st.sampled_from(["hybrid", "semantic", "keywords"])) if dense else "keywords"
    )
    if body["search_type"] == "keywords" and not body["query"]:
        body["query"] = "zebra"
    body["read_content"] = data.draw(st.booleans())
    if route == "search":
        body["include_provenance"] = data.draw(st.booleans())
    return Call("POST", f"/api/v1/search/{route}", body=body)


def context_call(data: st.DataObject, who: Principal) -> Call:
    scope = data.draw(st.sampled_from(["actor", "all"]))
    body: dict[str, Any] = {
        "query": data.draw(st.sampled_from([COMMON_WORDS, "zebra notes"])),
        "mode": "context",
        "peer_scope": scope,
        "max_tokens": 8000,
        "detail": data.draw(st.sampled_from(["full", "abstract", "auto"])),
    }
    return Call("POST", "/api/v1/search/search", body=body, peers_shown=scope == "all")


def draw_call(data: st.DataObject, world: World, who: Principal, dense: bool) -> Call:
    other = data.draw(st.sampled_from(world.principals), label="other")
    uri = data.draw(uri_forms(world, who, other), label="uri")
    theirs = world.owned[other]
    route = data.draw(st.sampled_from(ROUTES), label="route")
    foreign = other != who
    if route == "import" and not foreign:
        route = "sessions"  # importing one's own upload would publish its text account-wide
    if route == "context" and not dense:
        route = "search"
    builders: dict[str, Callable[[], Call]] = {
        "find": lambda: retrieval_call(data, uri, "find", dense),
        "search": lambda: retrieval_call(data, uri, "search", dense),
        "context": lambda: context_call(data, who),
        "grep": lambda: Call(
            "POST",
            "/api/v1/search/grep",
            body={
                "uri": uri,
                "pattern": data.draw(st.sampled_from(["ct[0-9a-f]+", "zebra", "nm"])),
                "case_insensitive": data.draw(st.booleans()),
                "node_limit": 1000,
            },
        ),
        "glob": lambda: Call(
            "POST",
            "/api/v1/search/glob",
            body={
                "uri": uri,
                "pattern": data.draw(st.sampled_from(["**", "**/*.md", "*", "*/*"])),
                "node_limit": 1000,
            },
        ),
        "ls": lambda: Call(
            "GET",
            "/api/v1/fs/ls",
            params={
                "uri": uri,
                "recursive": data.draw(st.booleans()),
                "include_overview": True,
                "show_all_hidden": data.draw(st.booleans()),
            },
        ),
        "tree": lambda: Call(
            "GET",
            "/api/v1/fs/tree",
            params={"uri": uri, "level_limit": 6, "include_overview": True},
        ),
        "stat": lambda: Call("GET", "/api/v1/fs/stat", params={"uri": uri}),
        "attrs": lambda: Call("GET", "/api/v1/fs/attrs", params={"uri": uri}),
        "read": lambda: Call("GET", "/api/v1/content/read", params={"uri": uri}),
        "download": lambda: Call("GET", "/api/v1/content/download", params={"uri": uri}),
        "abstract": lambda: Call("GET", "/api/v1/content/abstract", params={"uri": uri}),
        "overview": lambda: Call("GET", "/api/v1/content/overview", params={"uri": uri}),
        # Tasks belong to a user, not to a peer: the actor peer view does not filter them.
        "tasks": lambda: Call(
            "GET",
            "/api/v1/tasks",
            params={"include_internal": data.draw(st.booleans()), "limit": 200},
            peers_shown=True,
        ),
        "task": lambda: Call(
            "GET",
            f"/api/v1/tasks/{theirs.task_ids[-1]}",
            peers_shown=True,
            must_be_missing=foreign and not world.visible(who, None, _owner_secret(world, other)),
        ),
        "cancel": lambda: Call(
            "POST",
            f"/api/v1/tasks/{theirs.task_ids[0]}/cancel",
            peers_shown=True,
            must_be_missing=foreign and not world.visible(who, None, _owner_secret(world, other)),
        ),
        "import": lambda: Call(
            "POST",
            "/api/v1/resources",
            body={
                "temp_file_id": theirs.upload_id,
                "to": "viking://resources/imported-" + theirs.upload_id[7:23],
            },
            must_be_missing=foreign,
        ),
        "sessions": lambda: Call("GET", "/api/v1/sessions"),
        "session": lambda: Call(
            "GET", f"/api/v1/sessions/{theirs.session_id}", must_be_missing=foreign
        ),
        "archive": lambda: Call(
            "GET",
            f"/api/v1/sessions/{theirs.session_id}/archives/archive_001",
            must_be_missing=foreign,
        ),
        "session_context": lambda: Call(
            "GET", f"/api/v1/sessions/{theirs.session_id}/context", must_be_missing=foreign
        ),
    }
    return builders[route]()


def _owner_secret(world: World, owner: Principal) -> Any:
    """Any secret of `owner` that is not in a peer subtree: stands for 'owner's records'."""
    return next(
        s
        for s in world.secrets
        if s.account == owner.account and s.user == owner.user and s.peer is None
    )


ROUTES = (
    "find",
    "search",
    "context",
    "grep",
    "glob",
    "ls",
    "tree",
    "stat",
    "attrs",
    "read",
    "download",
    "abstract",
    "overview",
    "tasks",
    "task",
    "cancel",
    "import",
    "sessions",
    "session",
    "archive",
    "session_context",
)


@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=False,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_no_route_returns_another_users_private_data(
    target: Target, world: World, http: httpx.Client, data: st.DataObject
) -> None:
    who = data.draw(st.sampled_from(world.principals), label="identity")
    peer = data.draw(st.sampled_from([None, *PEERS]), label="actor_peer")
    call = draw_call(data, world, who, target.dense)
    resp = http.request(
        call.method, call.path, params=call.params, json=call.body, headers=headers(who.key, peer)
    )
    assert resp.status_code < 500, (call.describe(), resp.text[:500])
    if call.must_be_missing:
        assert resp.status_code == 404, (who, call.describe(), resp.status_code, resp.text)
    leaked = world.leaks(who, peer, call.describe(), resp.text, peers_shown=call.peers_shown)
    assert not leaked, (
        who,
        peer,
        call.describe(),
        resp.status_code,
        [s.text for s in leaked],
        resp.text[:2000],
    )
