"""Visibility rules (domain/access/visibility.py), and the property that the index scopes built for
a user, spelled as OpenSearch clauses, never reach into another user's space."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skald.adapters.aws.opensearch.filters import filter_clauses
from skald.domain.access.identity import Identity
from skald.domain.access.visibility import (
    check_access,
    manages_account,
    search_scopes,
    sees_user,
    spans_owners,
    view_of,
)
from skald.domain.errors import InvalidURI, PermissionDenied
from skald.domain.paths.uri import VikingURI, parse_uri
from skald.ports import IndexFilter

USERS = ("alice", "bob", "carol")
SEGMENT = st.sampled_from(
    [
        "memories",
        "resources",
        "peers",
        "p1",
        "p2",
        "sessions",
        "x.md",
        "skills",
        "notes",
        "alice",
        "bob",
    ]
)


def ident(user: str = "alice", role: str = "user", peer: str | None = None) -> Identity:
    return Identity("acme", user, role, actor_peer=peer)


identities = st.builds(
    ident,
    st.sampled_from(USERS),
    st.sampled_from(["user", "admin", "root"]),
    st.sampled_from([None, "p1", "p2"]),
)
uris = st.one_of(
    st.just(VikingURI(None)),
    st.builds(
        lambda scope, rest: VikingURI(scope, tuple(rest)),
        st.sampled_from(["resources", "agent", "system", "user"]),
        st.lists(SEGMENT, max_size=5),
    ),
    st.builds(
        lambda user, rest: VikingURI("user", (user, *rest)),
        st.sampled_from(USERS),
        st.lists(SEGMENT, max_size=5),
    ),
)


def test_visible_roots_by_role() -> None:
    assert [str(r) for r in view_of(ident()).roots] == [
        "viking://agent",
        "viking://resources",
        "viking://system",
        "viking://user/alice",
    ]
    assert [str(r) for r in view_of(ident(role="admin")).roots] == [
        "viking://agent",
        "viking://resources",
        "viking://system",
        "viking://user",
    ]
    assert manages_account(ident(role="root")) and not manages_account(ident())


def u(raw: str, user: str = "alice") -> VikingURI:
    return parse_uri(raw, user_id=user)


def test_wide_scopes_are_narrowed_to_the_view() -> None:
    alice = view_of(ident())
    assert [str(s) for s in alice.narrow(u("viking://user"))] == ["viking://user/alice"]
    assert [str(s) for s in alice.narrow(u("viking://"))] == [
        "viking://agent",
        "viking://resources",
        "viking://system",
        "viking://user/alice",
    ]
    assert [str(s) for s in alice.narrow(u("viking://~/memories"))] == [
        "viking://user/alice/memories"
    ]
    assert alice.narrow(u("viking://user/bob")) == ()
    with pytest.raises(PermissionDenied):
        alice.scopes([u("viking://user/bob/memories")])
    assert [
        str(s)
        for s in alice.scopes(
            [u("viking://user"), u("viking://~/memories"), u("viking://resources")]
        )
    ] == ["viking://user/alice", "viking://user/alice/memories", "viking://resources"]
    admin = view_of(ident(role="admin"))
    assert [str(s) for s in admin.narrow(u("viking://user"))] == ["viking://user"]
    assert [str(s) for s in search_scopes(ident(), [])] == [
        "viking://user/alice",
        "viking://resources",
        "viking://agent/skills",
    ]


def test_reads_listings_and_peers() -> None:
    alice = view_of(ident(peer="p1"))
    assert alice.reaches(u("viking://")) and alice.reaches(u("viking://user"))
    assert not alice.reaches(u("viking://user/bob"))
    assert not alice.shows(u("viking://user/bob")) and alice.shows(u("viking://user/alice"))
    assert alice.reaches(u("viking://~/peers/p2"))  # named, but hidden: a 404 upstream
    assert not alice.shows(u("viking://~/peers/p2")) and alice.shows(u("viking://~/peers/p1"))
    assert not alice.allows(u("viking://~/peers/p2/memories/x.md"))
    assert not alice.allows(VikingURI("upload", ("upload_x.md",)))  # internal scopes
    with pytest.raises(PermissionDenied):
        check_access(ident(), u("viking://user/bob/x.md"), write=False)
    check_access(ident(), u("viking://user"), write=False)


def test_tasks_and_sessions_owners() -> None:
    assert sees_user(ident(), "acme", "alice") and not sees_user(ident(), "acme", "bob")
    assert sees_user(ident(role="admin"), "acme", "bob")
    assert not sees_user(ident(role="admin"), "other", "bob")
    assert sees_user(Identity("_system", "root", "root"), "other", "bob")
    dev = Identity("acme", "default", "root", dev_mode=True)
    assert sees_user(dev, "acme", "bob") and not sees_user(dev, "other", "bob")


def test_directories_spanning_owners() -> None:
    for raw in ("viking://", "viking://user", "viking://user/alice/peers"):
        assert spans_owners(u(raw))
    for raw in ("viking://user/alice", "viking://user/alice/peers/p1", "viking://resources"):
        assert not spans_owners(u(raw))


@settings(max_examples=200, deadline=None)
@given(identities, st.lists(uris, max_size=3))
def test_narrowed_scopes_cover_exactly_the_visible_part(
    identity: Identity, targets: list[VikingURI]
) -> None:
    view = view_of(identity)
    try:
        scopes = search_scopes(identity, targets)
    except PermissionDenied:
        assert targets and any(not view.reaches(t) for t in targets)
        return
    assert scopes and all(view.within_roots(s) for s in scopes)
    wanted = targets or search_scopes(identity, [])
    # A record is in some scope iff it is in some target and visible.
    for probe in [
        *scopes,
        *targets,
        VikingURI("user", ("bob", "memories", "x.md")),
        VikingURI("user", ("alice", "notes", "y.md")),
        VikingURI("resources", ("doc.md",)),
        VikingURI("system", ("a",)),
    ]:
        for record in (probe, probe.child("leaf.md")):
            in_scope = any(record.is_within(s) for s in scopes)
            expected = view.within_roots(record) and any(record.is_within(t) for t in wanted)
            assert in_scope == expected, (record, scopes, targets)


def _scope_terms(clauses: list[dict[str, Any]]) -> list[str]:
    """The URIs of the scope clause (uri or ancestors terms) of an OpenSearch filter."""
    out: list[str] = []
    for clause in clauses:
        should = clause.get("bool", {}).get("should", [])
        for cond in should:
            terms = cond.get("terms", {})
            out.extend(terms.get("uri", []) + terms.get("ancestors", []))
    return out


def _matches(clauses: list[dict[str, Any]], uri: VikingURI) -> bool:
    """Evaluates the account and scope clauses for a record at `uri` (ancestors as indexed)."""
    fields = {"uri": [str(uri)], "ancestors": uri.ancestors()}
    for clause in clauses:
        if "term" in clause:
            continue  # the account term: same account here
        should = clause["bool"]["should"]
        if not any(set(fields[f]) & set(v) for cond in should for f, v in cond["terms"].items()):
            return False
    return True


FORMS = [
    "viking://",
    "viking://user",
    "viking://user/",
    "viking://~",
    "viking://~/memories",
    "viking://resources",
    "viking://agent",
    "viking://system",
    "viking://session",
    "viking://user/alice",
    "viking://user/bob",
    "viking://user/bob/memories",
]


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(USERS),
    st.sampled_from([None, "p1"]),
    st.lists(st.sampled_from(FORMS), max_size=3),
)
def test_opensearch_filter_of_a_user_never_spans_another_user(
    user: str, peer: str | None, forms: list[str]
) -> None:
    identity = ident(user, "user", peer)
    try:
        targets = [parse_uri(f, user_id=user) for f in forms]
        scopes = search_scopes(identity, targets)
    except (PermissionDenied, InvalidURI):
        assert any(
            f.startswith("viking://user/") and f.split("/")[3] not in ("", user) for f in forms
        )
        return
    clauses = filter_clauses("acme", IndexFilter(scopes=[str(s) for s in scopes]))
    terms = _scope_terms(clauses)
    assert terms, clauses  # a scope clause is always there: never the whole account
    assert "viking://" not in terms and "viking://user" not in terms
    for other in USERS:
        record = VikingURI("user", (other, "memories", "preferences", "x.md"))
        assert _matches(clauses, record) == (
            other == user
            and any(record.is_within(t) for t in targets or [VikingURI("user", (user,))])
        )
    assert not _matches(clauses, VikingURI("upload", ("upload_1.md",)))
