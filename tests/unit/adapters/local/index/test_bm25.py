"""The embedded index's BM25: tokenizer and scores equal SQLite FTS5's (porter unicode61
remove_diacritics 2, bm25()), statistics per account."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import pytest

from skald.adapters.local.index import bm25
from skald.adapters.local.index.searchindex import LocalSearchIndex
from skald.domain.retrieval.scores import bm25_idf
from skald.ports import IndexFilter, IndexQuery, IndexRecord

FTS5_TOKENIZER = "porter unicode61 remove_diacritics 2"

DOCS = [
    "Every request must carry an API key in the X-API-Key header or a Bearer token.",
    "Users sign in through the OAuth 2.0 authorization code flow with PKCE.",
    "The database is snapshotted every night at 02:00 UTC; snapshots are kept 30 days.",
    "When production is down, page the on-call engineer and open an incident channel.",
    "Releases ship through a blue/green deployment; rollback switches traffic back.",
    "Employees get 25 days of paid holiday per year (request leave two weeks ahead).",
    "Crème brûlée: caramelised sugar over vanilla custard — a café classic.",
    "Naïve résumé parsing fails on ÜBER-long hyphenated-words and snake_case_names.",
    "Tokenization, tokenizers and tokenized tokens: stemming conflates them all.",
    "東京 is Tokyo; Ελληνικά has a final sigma ς; µ is the micro sign.",
    "Generalizations about relational conditional rationality are hopeful.",
    "caresses ponies ties cats feed agreed plastered motoring sing conflated",
    "",
    "a a a a a a a a a a a a a key",
    "The authentication service validates API keys and OAuth tokens on every call.",
]


def fts5_terms(texts: list[str]) -> list[list[str]]:
    conn = sqlite3.connect(":memory:")
    conn.execute(f"CREATE VIRTUAL TABLE f USING fts5(x, tokenize='{FTS5_TOKENIZER}')")
    conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(f, instance)")
    conn.executemany(
        "INSERT INTO f(rowid, x) VALUES (?, ?)", [(i + 1, t) for i, t in enumerate(texts)]
    )
    out: list[list[str]] = [[] for _ in texts]
    for term, doc in conn.execute("SELECT term, doc FROM v ORDER BY doc, offset"):
        out[doc - 1].append(term)
    return out


@pytest.mark.parametrize(
    "word,stem",
    [
        ("caresses", "caress"),
        ("ponies", "poni"),
        ("ties", "ti"),
        ("cats", "cat"),
        ("agreed", "agre"),
        ("plastered", "plaster"),
        ("motoring", "motor"),
        ("sing", "sing"),
        ("conflated", "conflat"),
        ("hopping", "hop"),
        ("falling", "fall"),
        ("filing", "file"),
        ("happy", "happi"),
        ("relational", "relat"),
        ("generalizations", "gener"),
        ("oscillators", "oscil"),
        ("electrical", "electr"),
        ("adjustment", "adjust"),
        ("controll", "control"),
        ("ies", "ie"),
        ("eed", "e"),
        ("at", "at"),
    ],
)
def test_porter_stems(word: str, stem: str) -> None:
    assert bm25.porter_stem(word) == stem


def test_tokens_equal_fts5_tokens() -> None:
    words = " ".join(DOCS).split()
    texts = DOCS + words
    expected = fts5_terms(texts)
    got = [bm25.term_counts(t)[0] for t in texts]
    # term_counts lists distinct terms in first-occurrence order.
    assert got == [list(dict.fromkeys(terms)) for terms in expected]
    assert [bm25.term_counts(t)[2] for t in texts] == [len(terms) for terms in expected]


def test_query_terms_are_distinct_and_capped() -> None:
    assert bm25.query_terms("Tokens TOKEN tokenize the the") == ["token", "the"]
    assert len(bm25.query_terms(" ".join(f"w{i}" for i in range(500)))) == bm25.MAX_QUERY_TERMS
    assert bm25.query_terms('" * NEAR( AND OR ) (') == ["near", "and", "or"]


@pytest.mark.parametrize(
    "query",
    [
        "api key",
        "oauth tokens",
        "tokenization",
        "crème brulee cafe",
        "naive resume",
        "days",
        "ελληνικα σ",
        "the every key",
        "generalization relations",
        "zzz nothing",
    ],
)
def test_scores_equal_fts5_bm25(tmp_path: Path, query: str) -> None:
    """FTS5's bm25 with our idf: each term's FTS5 score divided by FTS5's idf is the term's
    tf part, which our score weights by bm25_idf (FTS5 sums terms the same way)."""
    conn = sqlite3.connect(":memory:")
    conn.execute(f"CREATE VIRTUAL TABLE f USING fts5(x, tokenize='{FTS5_TOKENIZER}')")
    conn.executemany(
        "INSERT INTO f(rowid, x) VALUES (?, ?)", [(i + 1, t) for i, t in enumerate(DOCS)]
    )
    expected: dict[str, float] = {}
    for term in dict.fromkeys(bm25.raw_tokens(query)):
        rows = conn.execute(
            "SELECT rowid, bm25(f) FROM f WHERE f MATCH ?", (f'"{term}"',)
        ).fetchall()
        if not rows:
            continue
        df, n = len(rows), len(DOCS)
        fts5_idf = max(math.log((n - df + 0.5) / (df + 0.5)), 1e-6)
        for rowid, score in rows:
            uri = f"viking://resources/d{rowid - 1}.md"
            expected[uri] = expected.get(uri, 0.0) + -score / fts5_idf * bm25_idf(n, df)
    index = LocalSearchIndex(tmp_path / "i.db", 4)
    index.upsert(
        [
            IndexRecord(
                account="a",
                uri=f"viking://resources/d{i}.md",
                level=2,
                context_type="resource",
                parent="viking://resources",
                ancestors=["viking://resources"],
                text=t,
            )
            for i, t in enumerate(DOCS)
        ]
    )
    hits = index.search(IndexQuery(account="a", mode="lexical", limit=100, text=query))
    got = {h.record.uri: h.score / (1.0 - h.score) for h in hits}  # undo bm25/(bm25+1)
    assert got.keys() == expected.keys()
    for uri, score in expected.items():
        assert got[uri] == pytest.approx(score, rel=1e-6, abs=1e-9)
    index.close()


def test_an_exact_rare_term_scores_high_in_a_tiny_corpus(tmp_path: Path) -> None:
    index = LocalSearchIndex(tmp_path / "t.db", 4)
    index.upsert(
        [
            IndexRecord(
                account="a",
                uri="viking://resources/one.md",
                level=2,
                context_type="resource",
                parent="viking://resources",
                ancestors=["viking://resources"],
                text="Project BLUEBIRD ships in March.",
            )
        ]
    )
    hits = index.search(IndexQuery(account="a", mode="lexical", limit=5, text="BLUEBIRD"))
    assert len(hits) == 1 and hits[0].score > 0.8
    index.close()


def test_statistics_are_per_account(tmp_path: Path) -> None:
    """Another tenant's documents never change a tenant's lexical scores."""

    def scores(extra_accounts: int) -> list[tuple[str, float]]:
        index = LocalSearchIndex(tmp_path / f"s{extra_accounts}.db", 4)
        records = [
            IndexRecord(
                account="a",
                uri=f"viking://resources/d{i}.md",
                level=2,
                context_type="resource",
                parent="viking://resources",
                ancestors=["viking://resources"],
                text=t,
            )
            for i, t in enumerate(DOCS)
        ]
        for k in range(extra_accounts):
            records += [
                IndexRecord(
                    account=f"noise{k}",
                    uri=f"viking://resources/n{i}.md",
                    level=2,
                    context_type="resource",
                    parent="viking://resources",
                    ancestors=["viking://resources"],
                    text="api key " * i,
                )
                for i in range(30)
            ]
        index.upsert(records)
        hits = index.search(IndexQuery(account="a", mode="lexical", limit=20, text="api key"))
        index.close()
        return [(h.record.uri, round(h.score, 9)) for h in hits]

    assert scores(0) == scores(3)


def test_filters_do_not_change_statistics(tmp_path: Path) -> None:
    """Scores of the records a filter keeps equal their unfiltered scores."""
    index = LocalSearchIndex(tmp_path / "f.db", 4)
    index.upsert(
        [
            IndexRecord(
                account="a",
                uri=f"viking://resources/d{i}.md",
                level=2,
                context_type="resource",
                parent="viking://resources",
                ancestors=["viking://resources"],
                text=t,
                tags=["even"] if i % 2 == 0 else [],
            )
            for i, t in enumerate(DOCS)
        ]
    )
    query = IndexQuery(account="a", mode="lexical", limit=100, text="api key tokens")
    full = {h.record.uri: h.score for h in index.search(query)}
    query.filter = IndexFilter(tags_all=["even"])
    part = {h.record.uri: h.score for h in index.search(query)}
    assert part and all(full[u] == pytest.approx(s) for u, s in part.items())
    index.close()


def test_tokenizer_change_retokenises_on_open(tmp_path: Path) -> None:
    record = IndexRecord(
        account="a",
        uri="viking://resources/x.md",
        level=2,
        context_type="resource",
        parent="viking://resources",
        ancestors=["viking://resources"],
        text="running runners",
    )
    index = LocalSearchIndex(tmp_path / "t.db", 4, stemming=True)
    index.upsert([record])
    index.close()

    def hits(stemming: bool, text: str) -> int:
        idx = LocalSearchIndex(tmp_path / "t.db", 4, stemming=stemming)
        n = len(idx.search(IndexQuery(account="a", mode="lexical", limit=5, text=text)))
        idx.close()
        return n

    assert hits(True, "run") == 1
    assert hits(False, "run") == 0 and hits(False, "running") == 1
    assert hits(True, "runner") == 1


def test_stem_cache_rolls_over_without_losing_terms(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bm25, "_STEM_CACHE_MAX", 50)
    monkeypatch.setattr(bm25, "_stems", {})
    words = [f"running{i} jumps{i} tokens{i}" for i in range(100)]
    expected = [[bm25.porter_stem(w) for w in text.split()] for text in words]
    assert [bm25.term_counts(text)[0] for text in words] == expected
    assert len(bm25._stems) <= 50 + 3


def test_directory_summaries_do_not_change_the_statistics_of_files(tmp_path: Path) -> None:
    """A directory's L0/L1 summaries restate its files: they are not counted as documents, so
    files score the same with summaries as without, and a summary's own words still match."""

    def files(index: LocalSearchIndex) -> None:
        index.upsert(
            [
                IndexRecord(
                    account="a",
                    uri=f"viking://resources/docs/d{i}.md",
                    level=2,
                    context_type="resource",
                    parent="viking://resources/docs",
                    ancestors=["viking://resources", "viking://resources/docs"],
                    text=t,
                )
                for i, t in enumerate(DOCS)
            ]
        )

    plain = LocalSearchIndex(tmp_path / "plain.db", 4)
    files(plain)
    summarised = LocalSearchIndex(tmp_path / "summarised.db", 4)
    files(summarised)
    summarised.upsert(
        [
            IndexRecord(
                account="a",
                uri=f"viking://resources/docs/{name}",
                level=level,
                context_type="resource",
                parent="viking://resources/docs",
                ancestors=["viking://resources", "viking://resources/docs"],
                text="API key and OAuth tokens for every request; an ORCHID overview. "
                * (level + 1),
            )
            for level, name in ((0, ".abstract.md"), (1, ".overview.md"))
        ]
    )
    query = IndexQuery(account="a", mode="lexical", limit=50, text="api key tokens request")
    without = {h.record.uri: h.score for h in plain.search(query)}
    with_summaries = {
        h.record.uri: h.score for h in summarised.search(query) if h.record.level == 2
    }
    assert without and with_summaries == pytest.approx(without)
    only_in_summaries = summarised.search(
        IndexQuery(account="a", mode="lexical", limit=5, text="orchid")
    )
    assert {h.record.level for h in only_in_summaries} == {0, 1}
    plain.close()
    summarised.close()
