"""SearchIndex conformance for visibility: on every adapter (the embedded index, OpenSearch on
osmem-server), a filter whose scopes come from `search_scopes` returns only what the caller's
view allows, whatever target forms it asked for."""

from __future__ import annotations

import pytest

from skald.domain.access.identity import Identity
from skald.domain.access.visibility import search_scopes, view_of
from skald.domain.errors import PermissionDenied
from skald.domain.paths.uri import from_canonical, parse_uri
from skald.ports import IndexFilter, SearchIndex
from tests.conformance.test_searchindex import (  # noqa: F401 - fixtures used by name
    ACCT,
    Env,
    all_modes,
    at_cos,
    index_env,
    rec,
    search_index,
)

RECORDS = [
    "viking://user/alice/memories/preferences/tea.md",
    "viking://user/alice/peers/p2/memories/bio.md",
    "viking://user/alice/sessions/s1/history/archive_001/.abstract.md",
    "viking://user/bob/memories/preferences/coffee.md",
    "viking://user/bob/resources/plans/secret.md",
    "viking://user/bob/sessions/s2/history/archive_001/.abstract.md",
    "viking://user/.abstract.md",
    "viking://resources/guide/readme.md",
    "viking://agent/skills/search/SKILL.md",
    "viking://system/compile/example-skills/x/SKILL.md",
]
FORMS = [
    "viking://",
    "viking://user",
    "viking://user/",
    "viking://~",
    "viking://session",
    "viking://resources",
    "viking://user/alice",
    "viking://user/bob",
]
IDENTITIES = [
    Identity(ACCT, "alice", "user"),
    Identity(ACCT, "alice", "user", actor_peer="p1"),
    Identity(ACCT, "boss", "admin"),
]


@pytest.fixture
def people_index(search_index: SearchIndex) -> SearchIndex:  # noqa: F811
    search_index.upsert(
        [rec(u, text="common words", vector=at_cos(0.5, i)) for i, u in enumerate(RECORDS)]
    )
    search_index.upsert(
        [
            rec(
                "viking://user/alice/memories/preferences/tea.md",
                account="other",
                text="common words",
                vector=at_cos(0.5, 99),
            )
        ]
    )
    return search_index


@pytest.mark.parametrize("identity", IDENTITIES, ids=lambda i: f"{i.role}-{i.actor_peer}")
def test_search_scopes_keep_every_adapter_inside_the_view(
    index_env: Env,  # noqa: F811
    people_index: SearchIndex,
    identity: Identity,
) -> None:
    view = view_of(identity)
    for form in [*FORMS, None]:
        targets = [] if form is None else [parse_uri(form, user_id=identity.user_id)]
        try:
            scopes = search_scopes(identity, targets)
        except PermissionDenied:
            assert form == "viking://user/bob" and identity.role == "user"
            continue
        flt = IndexFilter(scopes=[str(s) for s in scopes])
        for mode, hits in all_modes(
            people_index, index_env.knn, "common", limit=100, scopes=flt.scopes
        ).items():
            got = {h.record.uri for h in hits}
            assert all(h.record.account == ACCT for h in hits)
            # The scopes alone keep to the roots; hidden peers are the post-filter's job.
            assert all(view.within_roots(from_canonical(u)) for u in got), (mode, form, got)
            if identity.role == "user":
                assert not any(u.startswith("viking://user/bob") for u in got), (mode, form)
                assert "viking://user/.abstract.md" not in got
            if form in {"viking://", "viking://user"}:
                assert "viking://user/alice/memories/preferences/tea.md" in got
