"""SearchIndex conformance: every adapter, through the port only.

To run the suite against another backend, write a factory (a context manager taking pytest's
tmp_path and the vector dimension, setting the backing service up, yielding an opener and tearing
it down) and add one entry to INDEX_BACKENDS, e.g. `"opensearch": IndexBackend(os_index,
knn=bool(os.environ.get("SKALD_TEST_OPENSEARCH_URL")))`. Tests that need k-NN (dense and
hybrid search) take the `knn_index` fixture: they are skipped on a backend without k-NN.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from skald.adapters.local.index.searchindex import LocalSearchIndex
from skald.domain.retrieval.index_filter import MalformedFilter
from skald.ports import (
    IndexFilter,
    IndexHit,
    IndexQuery,
    IndexRecord,
    IndexVectorMismatch,
    SearchIndex,
)
from tests.conformance.conftest import OSMEM_INDEX_FACTORIES

DIM = 384
ACCT = "acme"
T0 = 1_700_000_000.0

IndexOpener = Callable[[], SearchIndex]


@dataclass(frozen=True)
class IndexBackend:
    factory: Callable[[Path, int], AbstractContextManager[IndexOpener]]
    knn: bool  # dense / hybrid supported


@contextmanager
def local_index(tmp_path: Path, dimension: int) -> Iterator[IndexOpener]:
    path = tmp_path / "index.db"
    yield lambda: LocalSearchIndex(path, dimension)


@contextmanager
def local_compact_index(tmp_path: Path, dimension: int) -> Iterator[IndexOpener]:
    # Every vector held as 8-bit codes with float32 re-scoring, however small the index.
    path = tmp_path / "index.db"
    yield lambda: LocalSearchIndex(path, dimension, exact_rows=0)


INDEX_BACKENDS: dict[str, IndexBackend] = {
    "local": IndexBackend(local_index, knn=True),
    "local-compact": IndexBackend(local_compact_index, knn=True),
}
# OpenSearch on osmem-server (conftest.py): no k-NN there, the real cluster suite is
# test_searchindex_real.py.
INDEX_BACKENDS.update(
    {name: IndexBackend(factory, knn=False) for name, factory in OSMEM_INDEX_FACTORIES.items()}
)


@dataclass
class Env:
    name: str
    knn: bool
    open: IndexOpener  # a new client on the same storage (persistence tests)
    # A client with the write policy deployments use (OpenSearch: refresh=False), where it
    # differs from `open`'s (which makes every write searchable at once).
    open_production: IndexOpener | None = None


@pytest.fixture(params=sorted(INDEX_BACKENDS))
def index_env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    backend = INDEX_BACKENDS[request.param]
    opened: list[SearchIndex] = []
    with backend.factory(tmp_path, DIM) as opener:

        def open_tracked(**kw: Any) -> SearchIndex:
            client = opener(**kw)
            opened.append(client)
            return client

        production = (
            (lambda: open_tracked(production=True))
            if request.param in OSMEM_INDEX_FACTORIES
            else None
        )
        yield Env(request.param, backend.knn, open_tracked, production)
        for client in reversed(opened):
            close = getattr(client, "close", None)
            if callable(close):
                close()


@pytest.fixture
def search_index(index_env: Env) -> SearchIndex:
    return index_env.open()


@pytest.fixture
def knn_index(index_env: Env, search_index: SearchIndex) -> SearchIndex:
    if not index_env.knn:
        pytest.skip(f"{index_env.name}: no k-NN on this backend")
    return search_index


# --------------------------------------------------------------------------------------------
# Helpers: records, deterministic vectors with a chosen cosine to a query vector.


def unit(seed: int) -> list[float]:
    v = np.random.default_rng(seed).standard_normal(DIM)
    return (v / np.linalg.norm(v)).tolist()  # type: ignore[no-any-return]


Q = unit(1)


def at_cos(cos: float, seed: int, base: list[float] = Q) -> list[float]:
    """A unit vector whose cosine with `base` is exactly `cos`."""
    b = np.asarray(base)
    r = np.random.default_rng(seed + 10_000).standard_normal(DIM)
    r -= (r @ b) * b
    r /= np.linalg.norm(r)
    return (cos * b + math.sqrt(max(0.0, 1 - cos * cos)) * r).tolist()  # type: ignore[no-any-return]


def ancestors_of(uri: str) -> list[str]:
    scheme, rest = uri.split("://", 1)
    parts = rest.split("/")
    return [f"{scheme}://" + "/".join(parts[:i]) for i in range(1, len(parts))]


def rec(
    uri: str, *, account: str = ACCT, text: str = "", vector: list[float] | None = None, **kw: Any
) -> IndexRecord:
    anc = ancestors_of(uri)
    fields: dict[str, Any] = {
        "account": account,
        "uri": uri,
        "level": 2,
        "context_type": "resource",
        "parent": anc[-1] if anc else uri,
        "ancestors": anc,
        "text": text,
        "abstract": f"about {uri}",
        "vector": vector,
        "created_at": T0,
        "updated_at": T0,
    }
    fields.update(kw)
    return IndexRecord(**fields)


def q(
    mode: str,
    *,
    text: str | None = None,
    vector: list[float] | None = None,
    limit: int = 10,
    account: str = ACCT,
    **flt: Any,
) -> IndexQuery:
    return IndexQuery(
        account=account, mode=mode, limit=limit, text=text, vector=vector, filter=IndexFilter(**flt)
    )


def uris(hits: list[IndexHit]) -> list[str]:
    return [h.record.uri for h in hits]


def all_modes(
    index: SearchIndex, knn: bool, text: str, vector: list[float] = Q, **kw: Any
) -> dict[str, list[IndexHit]]:
    out = {"lexical": index.search(q("lexical", text=text, **kw))}
    if knn:
        out["dense"] = index.search(q("dense", vector=vector, **kw))
        out["hybrid"] = index.search(q("hybrid", text=text, vector=vector, **kw))
    return out


# --------------------------------------------------------------------------------------------
# Writes: upsert, get, replace, deletes leave no stale hits.


def test_upsert_then_get_round_trips_every_field(search_index: SearchIndex) -> None:
    r = rec(
        "viking://resources/docs/a.md",
        text="alpha beta",
        vector=unit(5),
        section=0,
        line_start=3,
        line_end=9,
        tags=["lang=en", "kind=doc"],
        memory_type="preferences",
        owner="alice",
        peer="bob",
        created_at=T0 + 1,
        updated_at=T0 + 2,
        level=2,
    )
    search_index.upsert([r])
    [got] = search_index.get(ACCT, r.uri)
    assert got.vector is not None
    np.testing.assert_allclose(np.asarray(got.vector), np.asarray(r.vector), atol=1e-6)
    assert replace(got, vector=None) == replace(r, vector=None)
    assert search_index.get(ACCT, "viking://resources/docs/missing.md") == []
    assert search_index.get("other", r.uri) == []


def test_levels_and_sections_are_separate_records(search_index: SearchIndex) -> None:
    uri = "viking://resources/docs/big.md"
    search_index.upsert(
        [
            rec(uri, level=2, section=0, text="whole"),
            rec(uri, level=2, section=1, text="part one"),
            rec(uri, level=2, section=2, text="part two"),
            rec(uri, level=1, text="overview"),
        ]
    )
    got = search_index.get(ACCT, uri)
    assert sorted((r.level, r.section) for r in got) == [(1, 0), (2, 0), (2, 1), (2, 2)]
    assert search_index.count(ACCT) == 4


def test_head_is_the_first_record_without_its_vector(search_index: SearchIndex) -> None:
    uri = "viking://resources/docs/manual.md"
    search_index.upsert(
        [
            rec(uri, section=s, text=f"part {s}", vector=unit(s), abstract="the manual")
            for s in (3, 1, 2)
        ]
    )
    head = search_index.head(ACCT, uri)
    assert head is not None and head.vector is None
    assert (head.level, head.section, head.text, head.abstract) == (2, 1, "part 1", "the manual")
    search_index.upsert([rec(uri, level=1, text="overview")])
    head = search_index.head(ACCT, uri)
    assert head is not None and (head.level, head.text) == (1, "overview")
    search_index.delete_uris(ACCT, [uri])
    search_index.replace_sections(
        ACCT, uri, 2, [rec(uri, section=7, text="rewritten", vector=unit(7))]
    )
    head = search_index.head(ACCT, uri)
    assert head is not None and (head.section, head.text) == (7, "rewritten")
    assert search_index.head(ACCT, "viking://resources/docs/missing.md") is None
    assert search_index.head("other", uri) is None


def test_heads_and_get_many_answer_as_head_and_get_of_each_uri(search_index: SearchIndex) -> None:
    manual, notes, missing = (
        f"viking://resources/docs/{n}.md" for n in ("manual", "notes", "missing")
    )
    search_index.upsert(
        [
            rec(manual, section=s, text=f"part {s}", vector=unit(s), abstract="the manual")
            for s in (3, 1, 2)
        ]
    )
    search_index.upsert(
        [
            rec(notes, level=1, text="overview", vector=unit(4)),
            rec(notes, text="body", vector=unit(5), abstract="notes"),
        ]
    )
    search_index.upsert([rec(missing, text="another account's", account="other")])
    asked = [notes, missing, manual, notes]
    heads = search_index.heads(ACCT, asked)
    assert sorted(heads) == [manual, notes]
    for uri, head in heads.items():
        assert head == search_index.head(ACCT, uri) and head.vector is None
    assert (heads[manual].section, heads[notes].level) == (1, 1)
    many = search_index.get_many(ACCT, asked)
    assert sorted(many) == [manual, missing, notes] and many[missing] == []
    for uri in (manual, notes):
        got, one = many[uri], search_index.get(ACCT, uri)
        assert [(r.level, r.section, r.text) for r in got] == [
            (r.level, r.section, r.text) for r in one
        ]
        assert all(r.vector is not None for r in got)
    assert [r.section for r in many[manual]] == [1, 2, 3]
    assert search_index.heads(ACCT, []) == {} and search_index.get_many(ACCT, []) == {}
    assert search_index.heads("other", [manual]) == {}
    # More URIs than a remote engine's request carries: the answer is whole all the same.
    many_uris = [f"viking://resources/many/f{i:03d}.md" for i in range(70)]
    search_index.upsert(
        [rec(u, text=u, vector=unit(i), abstract=f"file {i}") for i, u in enumerate(many_uris)]
    )
    heads = search_index.heads(ACCT, many_uris)
    assert [heads[u].abstract for u in many_uris] == [f"file {i}" for i in range(70)]
    by_uri = search_index.get_many(ACCT, many_uris)
    assert [[r.text for r in by_uri[u]] for u in many_uris] == [[u] for u in many_uris]


def test_upsert_replaces_the_same_key_without_stale_hits(
    index_env: Env, search_index: SearchIndex
) -> None:
    uri = "viking://resources/docs/a.md"
    search_index.upsert([rec(uri, text="zebra stripes", vector=at_cos(0.99, 1))])
    search_index.upsert([rec(uri, text="penguin tuxedo", vector=at_cos(-0.5, 2))])
    [got] = search_index.get(ACCT, uri)
    assert got.text == "penguin tuxedo"
    assert search_index.count(ACCT) == 1
    assert search_index.search(q("lexical", text="zebra")) == []
    assert uris(search_index.search(q("lexical", text="penguin"))) == [uri]
    if index_env.knn:
        [hit] = search_index.search(q("dense", vector=Q))
        assert hit.score == pytest.approx(-0.5, abs=1e-5)


def test_last_record_of_a_key_wins_within_one_batch(search_index: SearchIndex) -> None:
    uri = "viking://resources/docs/a.md"
    search_index.upsert([rec(uri, text="first"), rec(uri, text="second")])
    assert [r.text for r in search_index.get(ACCT, uri)] == ["second"]


def test_delete_uris_removes_every_level_and_section(
    index_env: Env, search_index: SearchIndex
) -> None:
    a, b = "viking://resources/docs/a.md", "viking://resources/docs/b.md"
    search_index.upsert(
        [
            rec(a, level=2, section=0, text="kiwi", vector=at_cos(0.9, 1)),
            rec(a, level=2, section=1, text="kiwi", vector=at_cos(0.9, 2)),
            rec(a, level=1, text="kiwi", vector=at_cos(0.9, 3)),
            rec(b, text="kiwi", vector=at_cos(0.1, 4)),
        ]
    )
    assert search_index.delete_uris(ACCT, [a, "viking://resources/docs/none.md"]) == 3
    assert search_index.get(ACCT, a) == []
    for hits in all_modes(search_index, index_env.knn, "kiwi").values():
        assert uris(hits) == [b]
    assert search_index.delete_uris(ACCT, []) == 0
    assert search_index.delete_uris("other", [b]) == 0
    assert search_index.count(ACCT) == 1


def test_delete_prefix_removes_the_prefix_and_everything_below(
    index_env: Env, search_index: SearchIndex
) -> None:
    keep = ["viking://resources/projab/x.md", "viking://resources/other/y.md"]
    gone = [
        "viking://resources/proj/a.md",
        "viking://resources/proj/sub/b.md",
        "viking://resources/proj/sub/deeper/c.md",
    ]
    search_index.upsert(
        [rec(u, text="mango", vector=at_cos(0.5, i)) for i, u in enumerate(keep + gone)]
    )
    # The directory's own L0/L1 records live at the directory URI itself.
    search_index.upsert(
        [rec("viking://resources/proj", level=0, text="mango", vector=at_cos(0.5, 99))]
    )
    assert search_index.delete_prefix(ACCT, "viking://resources/proj/") == 4
    for hits in all_modes(search_index, index_env.knn, "mango").values():
        assert sorted(uris(hits)) == sorted(keep)
    assert search_index.delete_prefix(ACCT, "viking://resources/nothing") == 0


def test_deletes_are_seen_by_the_next_search_whatever_the_write_policy(index_env: Env) -> None:
    """Read your deletes: once delete_uris or delete_prefix returns, no search finds what it
    deleted, also where writes become searchable only later (OpenSearch's refresh=False): a
    removal answers after its records are gone."""
    index = (index_env.open_production or index_env.open)()
    gone = [
        "viking://resources/p/a.md",
        "viking://resources/q/x.md",
        "viking://resources/q/sub/y.md",
    ]
    index.upsert([rec(u, text="papaya", vector=at_cos(0.8, i)) for i, u in enumerate(gone)])
    index.upsert([rec("viking://resources/p/b.md", text="papaya", vector=at_cos(0.7, 9))])
    assert index.delete_uris(ACCT, gone[:1]) == 1
    assert index.delete_prefix(ACCT, "viking://resources/q") == 2
    for mode, hits in all_modes(index, index_env.knn, "papaya").items():
        assert not set(uris(hits)) & set(gone), mode
    assert index.count(ACCT) == 1


def test_delete_prefix_stays_inside_the_account(search_index: SearchIndex) -> None:
    search_index.upsert(
        [rec("viking://resources/p/a.md", account=acct, text="x") for acct in (ACCT, "other")]
    )
    assert search_index.delete_prefix(ACCT, "viking://resources") == 1
    assert search_index.count("other") == 1


def test_replace_sections_swaps_the_whole_section_set(
    index_env: Env, search_index: SearchIndex
) -> None:
    uri = "viking://resources/docs/long.md"
    search_index.upsert(
        [rec(uri, section=s, text=f"oldword s{s}", vector=at_cos(0.8, s)) for s in (1, 2, 3)]
    )
    search_index.upsert([rec(uri, level=1, text="oldword overview")])
    search_index.replace_sections(
        ACCT,
        uri,
        2,
        [
            rec(uri, section=1, text="newword s1", vector=at_cos(0.7, 11)),
            rec(uri, section=2, text="newword s2", vector=at_cos(0.6, 12)),
        ],
    )
    got = search_index.get(ACCT, uri)
    assert sorted((r.level, r.section, r.text) for r in got) == [
        (1, 0, "oldword overview"),
        (2, 1, "newword s1"),
        (2, 2, "newword s2"),
    ]
    assert [h.record.level for h in search_index.search(q("lexical", text="oldword"))] == [1]
    if index_env.knn:
        dense = search_index.search(q("dense", vector=Q, levels=[2]))
        assert sorted(h.record.section for h in dense) == [1, 2]
    # An empty set removes every section of (uri, level).
    search_index.replace_sections(ACCT, uri, 2, [])
    assert [r.level for r in search_index.get(ACCT, uri)] == [1]
    with pytest.raises(ValueError):
        search_index.replace_sections(ACCT, uri, 2, [rec("viking://resources/docs/x.md")])


def test_replace_many_swaps_each_section_set_in_one_call(search_index: SearchIndex) -> None:
    a, b, c = (f"viking://resources/batch/{n}.md" for n in "abc")
    search_index.upsert([rec(a, section=s, text=f"oldword a{s}") for s in (1, 2, 3)])
    search_index.upsert(
        [
            rec(b, text="oldword b"),
            rec(b, level=1, text="oldword b overview"),
            rec(c, text="untouched c"),
        ]
    )
    search_index.replace_many(
        ACCT,
        {
            (a, 2): [rec(a, section=1, text="newword a1")],
            (b, 2): [rec(b, section=1, text="newword b1"), rec(b, section=2, text="newword b2")],
            (b, 1): [rec(b, level=1, text="newword b overview")],
        },
    )
    assert sorted((r.level, r.section, r.text) for r in search_index.get(ACCT, a)) == [
        (2, 1, "newword a1")
    ]
    assert sorted((r.level, r.section, r.text) for r in search_index.get(ACCT, b)) == [
        (1, 0, "newword b overview"),
        (2, 1, "newword b1"),
        (2, 2, "newword b2"),
    ]
    assert [r.text for r in search_index.get(ACCT, c)] == ["untouched c"]
    assert search_index.search(q("lexical", text="oldword")) == []
    # An empty set removes that (uri, level) only; a record of another key writes nothing.
    search_index.replace_many(ACCT, {(a, 2): []})
    assert search_index.get(ACCT, a) == []
    with pytest.raises(ValueError):
        search_index.replace_many(
            ACCT, {(b, 2): [rec(b, section=3, text="newer b3")], (c, 2): [rec(a, text="wrong uri")]}
        )
    assert sorted(r.text for r in search_index.get(ACCT, b) if r.level == 2) == [
        "newword b1",
        "newword b2",
    ]
    assert [r.text for r in search_index.get(ACCT, c)] == ["untouched c"]


# --------------------------------------------------------------------------------------------
# Filters.


@pytest.fixture
def filtered(search_index: SearchIndex) -> SearchIndex:
    """Twelve records across scopes, types, levels, tags, owners and times; every one holds
    the word "common" and a vector at cosine 0.5 to Q."""
    specs: list[tuple[str, dict[str, Any]]] = [
        ("viking://resources/proj/readme.md", {"tags": ["lang=en", "kind=doc"]}),
        ("viking://resources/proj/src/main.py", {"tags": ["lang=py", "kind=code"]}),
        ("viking://resources/proj/src/util.py", {"tags": ["lang=py"], "updated_at": T0 + 50}),
        ("viking://resources/proj", {"level": 0}),
        ("viking://resources/proj", {"level": 1}),
        ("viking://resources/project2/notes.md", {"tags": ["lang=en"], "created_at": T0 - 10}),
        (
            "viking://user/alice/memories/preferences/tea.md",
            {
                "context_type": "memory",
                "memory_type": "preferences",
                "owner": "alice",
                "updated_at": T0 + 100,
            },
        ),
        (
            "viking://user/alice/memories/events/trip.md",
            {
                "context_type": "memory",
                "memory_type": "events",
                "owner": "alice",
                "created_at": T0 + 200,
                "updated_at": T0 + 200,
            },
        ),
        (
            "viking://user/bob/memories/preferences/coffee.md",
            {
                "context_type": "memory",
                "memory_type": "preferences",
                "owner": "bob",
                "peer": "carol",
            },
        ),
        ("viking://agent/skills/search/SKILL.md", {"context_type": "skill"}),
        ("viking://agent/skills/search/.abstract.md", {"context_type": "skill", "level": 0}),
        ("viking://resources/proj/src/deep/x.md", {"tags": ["kind=doc"], "section": 2}),
    ]
    search_index.upsert(
        [
            rec(u, text="common words here", vector=at_cos(0.5, i), **kw)
            for i, (u, kw) in enumerate(specs)
        ]
    )
    return search_index


def matching(index: SearchIndex, knn: bool, **flt: Any) -> set[str]:
    """URIs (with level) matching the filter, checked identically through every mode."""
    results = {
        mode: {(h.record.uri, h.record.level) for h in hits}
        for mode, hits in all_modes(index, knn, "common", limit=100, **flt).items()
    }
    first = next(iter(results.values()))
    assert all(r == first for r in results.values()), results
    assert index.count(ACCT, IndexFilter(**flt)) == len(first)
    return {f"{u}@{lv}" if lv != 2 else u for u, lv in first}


def test_scope_matches_the_uri_itself_and_everything_below(
    index_env: Env, filtered: SearchIndex
) -> None:
    got = matching(filtered, index_env.knn, scopes=["viking://resources/proj/"])
    assert got == {
        "viking://resources/proj/readme.md",
        "viking://resources/proj/src/main.py",
        "viking://resources/proj/src/util.py",
        "viking://resources/proj@0",
        "viking://resources/proj@1",
        "viking://resources/proj/src/deep/x.md",
    }
    # A string prefix is not a scope: project2 is not under proj.
    assert "viking://resources/project2/notes.md" not in got
    assert matching(filtered, index_env.knn, scopes=["viking://resources/proj/src/util.py"]) == {
        "viking://resources/proj/src/util.py"
    }
    both = matching(filtered, index_env.knn, scopes=["viking://agent/skills", "viking://user/bob"])
    assert both == {
        "viking://agent/skills/search/SKILL.md",
        "viking://agent/skills/search/.abstract.md@0",
        "viking://user/bob/memories/preferences/coffee.md",
    }
    assert matching(filtered, index_env.knn, scopes=["viking://nowhere"]) == set()


def test_exclude_scopes(index_env: Env, filtered: SearchIndex) -> None:
    got = matching(
        filtered,
        index_env.knn,
        scopes=["viking://resources"],
        exclude_scopes=["viking://resources/proj/src"],
    )
    assert got == {
        "viking://resources/proj/readme.md",
        "viking://resources/proj@0",
        "viking://resources/proj@1",
        "viking://resources/project2/notes.md",
    }


def test_context_types_levels_and_tags(index_env: Env, filtered: SearchIndex) -> None:
    knn = index_env.knn
    assert matching(filtered, knn, context_types=["skill"]) == {
        "viking://agent/skills/search/SKILL.md",
        "viking://agent/skills/search/.abstract.md@0",
    }
    assert len(matching(filtered, knn, context_types=["memory", "skill"])) == 5
    assert matching(filtered, knn, context_types=[]) == set()
    assert matching(filtered, knn, levels=[0]) == {
        "viking://resources/proj@0",
        "viking://agent/skills/search/.abstract.md@0",
    }
    assert len(matching(filtered, knn, levels=[0, 1])) == 3
    assert matching(filtered, knn, tags_all=["lang=py"]) == {
        "viking://resources/proj/src/main.py",
        "viking://resources/proj/src/util.py",
    }
    assert matching(filtered, knn, tags_all=["lang=py", "kind=code"]) == {
        "viking://resources/proj/src/main.py"
    }
    assert matching(filtered, knn, tags_all=["lang=py", "kind=doc"]) == set()


def test_time_window_is_inclusive_on_the_chosen_field(
    index_env: Env, filtered: SearchIndex
) -> None:
    knn = index_env.knn
    assert matching(filtered, knn, since=T0 + 50) == {
        "viking://resources/proj/src/util.py",
        "viking://user/alice/memories/preferences/tea.md",
        "viking://user/alice/memories/events/trip.md",
    }
    assert matching(filtered, knn, since=T0 + 50, until=T0 + 100) == {
        "viking://resources/proj/src/util.py",
        "viking://user/alice/memories/preferences/tea.md",
    }
    assert matching(filtered, knn, time_field="created_at", since=T0 + 200) == {
        "viking://user/alice/memories/events/trip.md"
    }
    assert matching(filtered, knn, time_field="created_at", until=T0 - 10) == {
        "viking://resources/project2/notes.md"
    }
    with pytest.raises(ValueError):
        filtered.count(ACCT, IndexFilter(time_field="deleted_at"))


def test_filter_tree(index_env: Env, filtered: SearchIndex) -> None:
    knn = index_env.knn

    def tree(t: dict[str, Any]) -> set[str]:
        return matching(filtered, knn, tree=t)

    prefs = {
        "viking://user/alice/memories/preferences/tea.md",
        "viking://user/bob/memories/preferences/coffee.md",
    }
    assert tree({"op": "must", "field": "memory_type", "conds": ["preferences"]}) == prefs
    assert tree(
        {
            "op": "and",
            "conds": [
                {"op": "must", "field": "context_type", "conds": ["memory"]},
                {"op": "must_not", "field": "owner", "conds": ["bob"]},
            ],
        }
    ) == {
        "viking://user/alice/memories/preferences/tea.md",
        "viking://user/alice/memories/events/trip.md",
    }
    assert tree(
        {
            "op": "or",
            "conds": [
                {"op": "must", "field": "peer", "conds": ["carol"]},
                {"op": "must", "field": "level", "conds": [1]},
            ],
        }
    ) == {"viking://user/bob/memories/preferences/coffee.md", "viking://resources/proj@1"}
    assert tree({"op": "range", "field": "updated_at", "gt": T0, "lte": T0 + 100}) == {
        "viking://resources/proj/src/util.py",
        "viking://user/alice/memories/preferences/tea.md",
    }
    assert tree({"op": "range", "field": "level", "lt": 1}) == {
        "viking://resources/proj@0",
        "viking://agent/skills/search/.abstract.md@0",
    }
    assert tree({"op": "prefix", "field": "uri", "prefix": "viking://resources/proj/src/"}) == {
        "viking://resources/proj/src/main.py",
        "viking://resources/proj/src/util.py",
        "viking://resources/proj/src/deep/x.md",
    }
    assert tree({"op": "prefix", "field": "tags", "prefix": "kind="}) == {
        "viking://resources/proj/readme.md",
        "viking://resources/proj/src/main.py",
        "viking://resources/proj/src/deep/x.md",
    }
    assert tree({"op": "must", "field": "tags", "conds": ["lang=en", "kind=code"]}) == {
        "viking://resources/proj/readme.md",
        "viking://resources/proj/src/main.py",
        "viking://resources/project2/notes.md",
    }
    assert tree(
        {"op": "must", "field": "uri", "conds": ["viking://resources/proj/src/main.py"]}
    ) == {"viking://resources/proj/src/main.py"}
    assert tree({"op": "must", "field": "parent", "conds": ["viking://resources/proj/src"]}) == {
        "viking://resources/proj/src/main.py",
        "viking://resources/proj/src/util.py",
    }
    # The tree combines with the other filters (AND).
    assert matching(
        filtered,
        knn,
        scopes=["viking://user/alice"],
        tree={"op": "must", "field": "memory_type", "conds": ["preferences"]},
    ) == {"viking://user/alice/memories/preferences/tea.md"}


@pytest.mark.parametrize(
    "bad",
    [
        {"op": "xor", "conds": []},
        {"op": "must", "field": "colour", "conds": ["red"]},
        {"op": "range", "field": "updated_at", "around": 5},
        {"op": "range", "field": "uri", "gte": 1},
        {"op": "prefix", "field": "level", "prefix": "1"},
        {"op": "must", "field": "level", "conds": ["high"]},
        {"op": "and", "conds": [{"op": "nope"}]},
        {"op": "and", "conds": []},
        {"field": "uri"},
        ["not", "an", "object"],
    ],
)
def test_invalid_filter_tree_raises_value_error(
    index_env: Env, filtered: SearchIndex, bad: Any
) -> None:
    with pytest.raises(ValueError):
        filtered.count(ACCT, IndexFilter(tree=bad))
    with pytest.raises(ValueError):
        filtered.search(q("lexical", text="common", tree=bad))
    # Even when the account has no records at all.
    with pytest.raises(ValueError):
        filtered.search(q("lexical", text="common", account="empty", tree=bad))
    if index_env.knn:
        with pytest.raises(ValueError):
            filtered.search(q("dense", vector=Q, tree=bad))


@pytest.mark.parametrize(
    "flt",
    [
        {"tree": {"op": "nope"}},
        {"tree": {"op": "must", "field": "level", "conds": [2**64]}},
        {"levels": [2**63]},  # beyond what an index's integer column holds
        {"levels": ["2"]},
        {"time_field": "deleted_at", "since": T0},
    ],
)
def test_a_filter_no_index_can_apply_is_malformed_filter(
    filtered: SearchIndex, flt: dict[str, Any]
) -> None:
    # The caller's mistake, told apart from the server's (the API answers 400 for it).
    with pytest.raises(MalformedFilter):
        filtered.search(q("lexical", text="common", **flt))
    with pytest.raises(MalformedFilter):
        filtered.count(ACCT, IndexFilter(**flt))


def test_a_query_vector_of_another_size_is_a_vector_mismatch_not_a_bad_filter(
    search_index: SearchIndex,
) -> None:
    # The embedder and the index disagree: a deployment's mistake, never a bad filter. Every
    # adapter checks the size before asking its engine, k-NN or not.
    search_index.upsert([rec("viking://resources/a.md", text="x", vector=Q)])
    for mode in ("dense", "hybrid"):
        with pytest.raises(IndexVectorMismatch) as info:
            search_index.search(q(mode, text="x", vector=[1.0, 0.0]))
        assert not isinstance(info.value, MalformedFilter)
    with pytest.raises(IndexVectorMismatch):
        search_index.upsert([rec("viking://resources/b.md", text="y", vector=[1.0, 0.0])])


# --------------------------------------------------------------------------------------------
# Filters apply before ranking.


def test_filtered_records_come_back_even_when_they_rank_last(knn_index: SearchIndex) -> None:
    records = [
        rec(
            f"viking://resources/bulk/f{i:03d}.md",
            text="needle " * 5,
            vector=at_cos(0.9 - i * 0.001, i),
        )
        for i in range(497)
    ]
    # The three filtered records are the least similar and the weakest lexical matches.
    records += [
        rec(
            f"viking://resources/rare/r{i}.md",
            text="needle " + "hay " * 40,
            vector=at_cos(-0.9 + i * 0.01, 900 + i),
            tags=["pick=yes"],
        )
        for i in range(3)
    ]
    knn_index.upsert(records)
    expected = {f"viking://resources/rare/r{i}.md" for i in range(3)}
    filters: list[dict[str, Any]] = [
        {"tags_all": ["pick=yes"]},
        {"scopes": ["viking://resources/rare"]},
    ]
    for flt in filters:
        for hits in all_modes(knn_index, True, "needle", **flt).values():
            assert set(uris(hits)) == expected


def test_a_filter_never_returns_fewer_hits_than_it_could(knn_index: SearchIndex) -> None:
    knn_index.upsert(
        [
            rec(
                f"viking://resources/d/f{i:03d}.md",
                text=f"lemon w{i}",
                vector=at_cos(0.99 - i * 0.004, i),
                tags=["even=yes" if i % 4 == 0 else "even=no"],
            )
            for i in range(200)
        ]
    )
    for mode, hits in all_modes(knn_index, True, "lemon", limit=20, tags_all=["even=yes"]).items():
        assert len(hits) == 20, mode
        assert all("even=yes" in h.record.tags for h in hits)


# --------------------------------------------------------------------------------------------
# Scores and ranking.


def test_dense_scores_are_cosines_best_first(knn_index: SearchIndex) -> None:
    cosines = [0.95, 0.5, 0.0, -0.3, -0.99]
    knn_index.upsert(
        [rec(f"viking://resources/c/{i}.md", vector=at_cos(c, i)) for i, c in enumerate(cosines)]
    )
    hits = knn_index.search(q("dense", vector=Q))
    assert [h.score for h in hits] == pytest.approx(cosines, abs=1e-5)
    assert all(h.dense_score == h.score and h.lexical_score is None for h in hits)
    # A query vector that is not normalised gives the same cosines.
    scaled = knn_index.search(q("dense", vector=[x * 7.5 for x in Q]))
    assert [h.score for h in scaled] == pytest.approx(cosines, abs=1e-5)
    assert [h.score for h in knn_index.search(q("dense", vector=Q, limit=2))] == pytest.approx(
        cosines[:2], abs=1e-5
    )


def test_lexical_scores_are_in_0_1_and_favour_better_matches(search_index: SearchIndex) -> None:
    search_index.upsert(
        [
            rec("viking://resources/t/strong.md", text="authentication token authentication"),
            rec("viking://resources/t/weak.md", text="authentication " + "filler " * 30),
            rec("viking://resources/t/none.md", text="something else entirely"),
            *[
                rec(f"viking://resources/t/pad{i}.md", text=f"padding document {i}")
                for i in range(20)
            ],
        ]
    )
    hits = search_index.search(q("lexical", text="authentication token"))
    assert uris(hits) == ["viking://resources/t/strong.md", "viking://resources/t/weak.md"]
    assert all(0.0 < h.score < 1.0 for h in hits)
    assert hits[0].score > hits[1].score
    assert all(h.lexical_score == h.score and h.dense_score is None for h in hits)
    # Word forms match (stemming), case and accents do not matter.
    assert uris(search_index.search(q("lexical", text="AUTHENTICATIONS tokens")))[:1] == [
        "viking://resources/t/strong.md"
    ]
    assert search_index.search(q("lexical", text="")) == []
    assert search_index.search(q("lexical", text="  ...  ")) == []


def test_a_vector_source_is_asked_once_and_ranks_as_the_vector(knn_index: SearchIndex) -> None:
    knn_index.upsert(
        [
            rec(
                f"viking://resources/vs/d{i}.md",
                text=f"quantum note {i}" if i % 2 else "other",
                vector=at_cos(0.9 - i / 50, 40 + i),
            )
            for i in range(20)
        ]
    )
    expected = knn_index.search(q("hybrid", text="quantum note", vector=Q))
    calls: list[int] = []

    def source() -> list[float]:
        calls.append(1)
        return Q

    for mode in ("hybrid", "dense"):
        query = q(mode, text="quantum note")
        query.vector_source = source
        got = knn_index.search(query)
        if mode == "hybrid":
            assert [(h.record.uri, h.score) for h in got] == [
                (h.record.uri, h.score) for h in expected
            ]
        else:
            assert got and got[0].record.uri == "viking://resources/vs/d0.md"
    assert calls == [1, 1]


def test_hybrid_ranks_the_same_while_its_vector_is_still_coming(knn_index: SearchIndex) -> None:
    # The keyword side runs while the vector is still being made: every word of the query
    # still counts, every score is the same as with the vector given.
    words = ["amber", "basalt", "cobalt", "dune"]
    knn_index.upsert(
        [
            rec(
                f"viking://resources/late/d{i}.md",
                text=" ".join(w for j, w in enumerate(words) if (i >> j) & 1) or "none",
                vector=at_cos(0.95 - i / 40, 70 + i),
            )
            for i in range(16)
        ]
    )
    for text in ("dune cobalt", "basalt amber dune", "cobalt"):
        given = knn_index.search(q("hybrid", text=text, vector=Q))
        query = q("hybrid", text=text)
        query.vector_source = lambda: Q
        late = knn_index.search(query)
        assert [(h.record.uri, h.score, h.dense_score, h.lexical_score) for h in late] == [
            (h.record.uri, h.score, h.dense_score, h.lexical_score) for h in given
        ]
        assert {h.record.uri for h in given[:1]} != {"viking://resources/late/d0.md"}


def test_a_failing_vector_source_fails_the_search(knn_index: SearchIndex) -> None:
    knn_index.upsert([rec("viking://resources/vf/a.md", text="quantum", vector=Q)])

    def broken() -> list[float]:
        raise ConnectionError("embedding service down")

    query = q("hybrid", text="quantum")
    query.vector_source = broken
    with pytest.raises(ConnectionError):
        knn_index.search(query)


def test_hybrid_fuses_both_rankings(knn_index: SearchIndex) -> None:
    knn_index.upsert(
        [
            rec("viking://resources/h/both.md", text="quantum entanglement", vector=at_cos(0.9, 1)),
            rec("viking://resources/h/dense.md", text="unrelated words", vector=at_cos(0.8, 2)),
            rec(
                "viking://resources/h/lex.md",
                text="quantum entanglement quantum",
                vector=at_cos(-0.2, 3),
            ),
            rec("viking://resources/h/novec.md", text="quantum physics"),
            *[
                rec(f"viking://resources/h/pad{i}.md", text=f"pad {i}", vector=at_cos(0.1, 10 + i))
                for i in range(30)
            ],
        ]
    )
    hits = knn_index.search(q("hybrid", text="quantum entanglement", vector=Q))
    by_uri = {h.record.uri: h for h in hits}
    top = hits[0]
    assert top.record.uri == "viking://resources/h/both.md"
    assert top.dense_score == pytest.approx(0.9, abs=1e-5)
    assert top.lexical_score is not None and top.lexical_score > 0
    assert all(0.0 < h.score <= 1.0 for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    # Dense scores are known for every fused hit that has a vector, lexical-only ones too.
    assert by_uri["viking://resources/h/lex.md"].dense_score == pytest.approx(-0.2, abs=1e-5)
    assert by_uri["viking://resources/h/novec.md"].dense_score is None
    assert by_uri["viking://resources/h/dense.md"].lexical_score is None
    # Rank 1 in both lists scores exactly 1.
    knn_index.upsert(
        [rec("viking://resources/h/best.md", text="quantum entanglement " * 3, vector=Q)]
    )
    best = knn_index.search(q("hybrid", text="quantum entanglement", vector=Q))[0]
    assert best.record.uri == "viking://resources/h/best.md"
    assert best.score == pytest.approx(1.0)


def test_a_hybrid_hit_below_the_dense_depth_keeps_its_dense_score(knn_index: SearchIndex) -> None:
    # 80 records closer to the query than the keyword match: the dense side's ranking (50
    # deep for 5 hits) stops above it, the keyword side ranks it first, and the fused hit
    # still carries its own cosine.
    knn_index.upsert(
        [
            rec("viking://resources/deep/lex.md", text="zeppelin hangar", vector=at_cos(-0.3, 1)),
            *[
                rec(
                    f"viking://resources/deep/pad{i}.md",
                    text=f"pad {i}",
                    vector=at_cos(0.2 + i / 1000, 10 + i),
                )
                for i in range(80)
            ],
        ]
    )
    hits = knn_index.search(q("hybrid", text="zeppelin hangar", vector=Q, limit=5))
    lex = [h for h in hits if h.record.uri == "viking://resources/deep/lex.md"]
    assert lex and lex[0].dense_score == pytest.approx(-0.3, abs=1e-5)
    assert all(h.dense_score is not None for h in hits)


def test_directory_summaries_do_not_push_files_down_in_hybrid(knn_index: SearchIndex) -> None:
    files = [
        rec("viking://resources/d/a.md", text="harbour ferry timetable", vector=at_cos(0.8, 1)),
        rec("viking://resources/d/b.md", text="ferry", vector=at_cos(0.5, 2)),
        *[
            rec(f"viking://resources/d/pad{i}.md", text=f"pad {i}", vector=at_cos(0.1, 10 + i))
            for i in range(10)
        ],
    ]
    knn_index.upsert(files)
    query = q("hybrid", text="harbour ferry timetable", vector=Q)
    alone = {h.record.uri: h.score for h in knn_index.search(query)}
    # The directory's summaries rank above both files in both lists.
    knn_index.upsert(
        [
            rec(
                f"viking://resources/d/{name}",
                level=level,
                text="harbour ferry timetable " * 3,
                vector=at_cos(0.95, 50 + level),
            )
            for level, name in ((0, ".abstract.md"), (1, ".overview.md"))
        ]
    )
    hits = knn_index.search(query)
    assert {0, 1} <= {h.record.level for h in hits}
    with_summaries = {h.record.uri: h.score for h in hits}
    for uri in ("viking://resources/d/a.md", "viking://resources/d/b.md"):
        assert with_summaries[uri] == pytest.approx(alone[uri]), uri


def test_records_without_vectors_are_lexical_only(
    index_env: Env, search_index: SearchIndex
) -> None:
    search_index.upsert([rec("viking://resources/v/none.md", text="walrus")])
    assert uris(search_index.search(q("lexical", text="walrus"))) == [
        "viking://resources/v/none.md"
    ]
    if index_env.knn:
        assert search_index.search(q("dense", vector=Q)) == []


def test_score_threshold_drops_hits_below_it(knn_index: SearchIndex) -> None:
    knn_index.upsert(
        [
            rec(f"viking://resources/s/{i}.md", text="otter " * (i + 1), vector=at_cos(c, i))
            for i, c in enumerate([0.9, 0.6, 0.3, 0.1])
        ]
    )
    dense = knn_index.search(replace(q("dense", vector=Q), score_threshold=0.5))
    assert [round(h.score, 3) for h in dense] == [0.9, 0.6]
    lexical = knn_index.search(q("lexical", text="otter"))
    cut = lexical[1].score
    kept = knn_index.search(replace(q("lexical", text="otter"), score_threshold=cut))
    assert uris(kept) == uris(lexical[:2])
    hybrid = knn_index.search(q("hybrid", text="otter", vector=Q))
    high = knn_index.search(replace(q("hybrid", text="otter", vector=Q), score_threshold=0.99))
    assert all(h.score >= 0.99 for h in high) and len(high) < len(hybrid)


def test_ties_are_broken_by_uri_level_section(knn_index: SearchIndex) -> None:
    v = at_cos(0.7, 1)
    names = ["viking://resources/z.md", "viking://resources/a.md", "viking://resources/m.md"]
    knn_index.upsert([rec(u, text="same text", vector=v, section=s) for u in names for s in (2, 1)])
    expected = [(u, s) for u in sorted(names) for s in (1, 2)]
    for mode in ("dense", "lexical", "hybrid"):
        for limit in (6, 3):
            hits = knn_index.search(q(mode, text="same", vector=Q, limit=limit))
            assert [(h.record.uri, h.record.section) for h in hits] == expected[:limit], mode


def test_limit_zero_and_bad_queries(index_env: Env, search_index: SearchIndex) -> None:
    search_index.upsert([rec("viking://resources/a.md", text="x", vector=Q)])
    assert search_index.search(q("lexical", text="x", limit=0)) == []
    with pytest.raises(ValueError):
        search_index.search(q("fuzzy", text="x"))
    with pytest.raises(ValueError):
        search_index.search(q("lexical"))
    if index_env.knn:
        with pytest.raises(ValueError):
            search_index.search(q("dense"))
        with pytest.raises(ValueError):
            search_index.search(q("dense", vector=[1.0, 0.0]))


def test_recent_lists_every_filtered_record_newest_first_scored_zero(
    search_index: SearchIndex,
) -> None:
    search_index.upsert(
        [
            rec("viking://resources/r/old.md", text="a", updated_at=T0, created_at=T0 + 30),
            rec("viking://resources/r/new.md", text="b", updated_at=T0 + 20, created_at=T0),
            rec("viking://resources/r/mid.md", text="c", updated_at=T0 + 10, created_at=T0 + 10),
            rec("viking://resources/r/tie.md", text="d", updated_at=T0 + 10, created_at=T0),
            rec("viking://resources/r/.abstract.md", text="e", level=0, updated_at=T0 + 40),
            rec("viking://resources/s/out.md", text="f", updated_at=T0 + 50),
        ]
    )
    hits = search_index.search(q("recent", scopes=["viking://resources/r"], levels=[2]))
    assert uris(hits) == [
        "viking://resources/r/new.md",
        "viking://resources/r/mid.md",
        "viking://resources/r/tie.md",
        "viking://resources/r/old.md",
    ]
    assert {h.score for h in hits} == {0.0}
    by_created = search_index.search(
        q("recent", scopes=["viking://resources/r"], levels=[2], time_field="created_at", limit=2)
    )
    assert uris(by_created) == ["viking://resources/r/old.md", "viking://resources/r/mid.md"]


@pytest.mark.parametrize(
    "text",
    [
        '"',
        '""',
        "*",
        "NEAR(",
        "NEAR(a b, 3)",
        "AND OR",
        "OR",
        "NOT",
        "(((",
        ")",
        "a) OR (b",
        "text:abc",
        "{text}: x",
        "^start",
        "col - minus",
        "'quoted'",
        "\x00",
        "\\",
        "a + b",
        'unbalanced " quote',
        "🙂 émoji ünïcode 東京",
    ],
)
def test_lexical_query_syntax_is_never_interpreted(
    index_env: Env, search_index: SearchIndex, text: str
) -> None:
    search_index.upsert(
        [rec("viking://resources/inj.md", text="near and or not text abc", vector=Q)]
    )
    for hits in all_modes(search_index, index_env.knn, text).values():
        assert isinstance(hits, list)
    # A real word next to the junk still matches.
    hits = search_index.search(q("lexical", text=f"{text} abc"))
    assert uris(hits) == ["viking://resources/inj.md"]


# --------------------------------------------------------------------------------------------
# Isolation, persistence, concurrency, churn.


def test_accounts_are_isolated(index_env: Env, search_index: SearchIndex) -> None:
    uri = "viking://resources/shared/name.md"
    search_index.upsert(
        [
            rec(uri, account="a1", text="secret alpha", vector=at_cos(0.9, 1)),
            rec(uri, account="a2", text="secret beta", vector=at_cos(0.8, 2)),
        ]
    )
    for acct, word in (("a1", "alpha"), ("a2", "beta")):
        for hits in all_modes(search_index, index_env.knn, "secret", account=acct).values():
            assert [(h.record.account, h.record.text) for h in hits] == [(acct, f"secret {word}")]
    assert search_index.search(q("lexical", text="beta", account="a1")) == []
    assert search_index.search(q("lexical", text="secret", account="a3")) == []
    assert search_index.count("a1") == 1 and search_index.count("a3") == 0
    assert [r.text for r in search_index.get("a2", uri)] == ["secret beta"]
    assert search_index.delete_uris("a1", [uri]) == 1
    assert search_index.count("a2") == 1


def test_persists_across_reopen(index_env: Env) -> None:
    first = index_env.open()
    first.upsert(
        [
            rec(
                f"viking://resources/p/{i}.md",
                text=f"persist w{i}",
                vector=at_cos(0.9 - i * 0.1, i),
                tags=[f"i={i}"],
            )
            for i in range(5)
        ]
    )
    first.delete_uris(ACCT, ["viking://resources/p/4.md"])
    first.replace_sections(
        ACCT,
        "viking://resources/p/0.md",
        2,
        [rec("viking://resources/p/0.md", section=1, text="persist new", vector=at_cos(0.95, 50))],
    )
    before = all_modes(first, index_env.knn, "persist")
    close = getattr(first, "close", None)
    if callable(close):
        close()
    second = index_env.open()
    after = all_modes(second, index_env.knn, "persist")
    for mode in before:
        assert [(h.record.uri, h.record.section, round(h.score, 6)) for h in after[mode]] == [
            (h.record.uri, h.record.section, round(h.score, 6)) for h in before[mode]
        ], mode
    assert second.count(ACCT, IndexFilter(tags_all=["i=2"])) == 1
    # Writing after a reopen keeps working (and never resurrects deleted records).
    second.upsert([rec("viking://resources/p/9.md", text="persist nine")])
    assert second.count(ACCT) == 5
    assert second.get(ACCT, "viking://resources/p/4.md") == []


def test_concurrent_searches_during_writes(index_env: Env, search_index: SearchIndex) -> None:
    search_index.upsert(
        [
            rec(f"viking://resources/c/{i}.md", text=f"steady w{i}", vector=at_cos(0.5, i))
            for i in range(50)
        ]
    )
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        try:
            while not stop.is_set():
                for hits in all_modes(search_index, index_env.knn, "steady").values():
                    assert len(hits) == 10
                assert search_index.count(ACCT, IndexFilter(scopes=["viking://resources/c"])) >= 50
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        for i in range(30):
            search_index.upsert(
                [
                    rec(
                        f"viking://resources/w/{i}.md",
                        text=f"writes w{i}",
                        vector=at_cos(0.2, 100 + i),
                    )
                ]
            )
            search_index.upsert(
                [
                    rec(
                        f"viking://resources/c/{i}.md",
                        text=f"steady again {i}",
                        vector=at_cos(0.4, 200 + i),
                    )
                ]
            )
            search_index.delete_uris(ACCT, [f"viking://resources/w/{i}.md"])
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors[0]
    assert search_index.count(ACCT) == 50


def test_heavy_churn_keeps_results_exact(index_env: Env, search_index: SearchIndex) -> None:
    """Thousands of writes and deletes (the local adapter compacts along the way)."""
    n = 2500
    search_index.upsert(
        [
            rec(
                f"viking://resources/churn/{i:04d}.md",
                text=f"churn t{i % 7}",
                vector=unit(i),
                tags=[f"m={i % 5}"],
            )
            for i in range(n)
        ]
    )
    search_index.delete_prefix(ACCT, "viking://resources/churn")
    survivors = [
        rec(
            f"viking://resources/churn/{i:04d}.md",
            text=f"churn t{i % 7} again",
            vector=unit(i),
            tags=[f"m={i % 5}"],
        )
        for i in range(0, n, 10)
    ]
    search_index.upsert(survivors)
    for i in range(0, n, 20):
        search_index.upsert([replace(survivors[i // 10], text="churn replaced", tags=["m=x"])])
    assert search_index.count(ACCT) == len(survivors)
    assert search_index.count(ACCT, IndexFilter(tags_all=["m=x"])) == n // 20
    lexical = search_index.search(q("lexical", text="replaced", limit=1000))
    assert len(lexical) == n // 20
    if index_env.knn:
        target = survivors[17]
        assert target.vector is not None
        [hit] = search_index.search(q("dense", vector=target.vector, limit=1))
        assert hit.record.uri == target.uri and hit.score == pytest.approx(1.0, abs=1e-5)


def test_scroll_pages_through_every_matching_record_once(filtered: SearchIndex) -> None:
    scope = IndexFilter(scopes=["viking://resources"])
    seen: list[tuple[str, int, int]] = []
    cursor: str | None = None
    pages = 0
    while True:
        page, cursor = filtered.scroll(ACCT, scope, limit=2, cursor=cursor)
        pages += 1
        assert len(page) <= 2 and all(r.vector is None for r in page)
        seen += [(r.uri, r.level, r.section) for r in page]
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) == filtered.count(ACCT, scope) == 7
    assert pages >= 4
    assert filtered.scroll("other-account", None, limit=5) == ([], None)
    everything, last = filtered.scroll(ACCT, None, limit=100)
    assert len(everything) == 12 and last is None


@pytest.mark.parametrize("cursor", ["not-a-cursor", "-1", "eyJhIjoxfQ=="])
def test_scroll_rejects_a_foreign_cursor_and_a_bad_limit(
    filtered: SearchIndex, cursor: str
) -> None:
    with pytest.raises(ValueError):
        filtered.scroll(ACCT, None, limit=2, cursor=cursor)
    with pytest.raises(ValueError):
        filtered.scroll(ACCT, None, limit=0)
