"""BM25 for the embedded index: an FTS5-compatible tokenizer and in-memory numpy postings.

Why not SQLite FTS5's bm25(): FTS5 evaluates it once per *matching* row, so a natural-language
query whose common words match most documents slows down in step with the index. Scoring
postings with numpy is far cheaper per posting.

The tokenizer mirrors FTS5's `porter unicode61 remove_diacritics 2` (lower-case, diacritics
folded, runs of letters/digits, Porter stemming of tokens of 3..64 characters) and the score is
FTS5's bm25 formula (k1 = 1.2, b = 0.75) with the idf of skald.domain.retrieval.scores.bm25_idf in
place of FTS5's; tests/unit/adapters/local/index/test_bm25.py checks both against a real FTS5 table.
Statistics (N, document frequency, average length) are per account, so one tenant's documents never
influence another tenant's scores.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from itertools import chain
from typing import cast

import numpy as np
import numpy.typing as npt

from skald.domain.retrieval.scores import bm25_idf

K1 = 1.2
B = 0.75
MAX_QUERY_TERMS = 64
_MAX_STEM_LEN = 64
_STEM_CACHE_MAX = 500_000

_TOKEN_RE = re.compile(r"[^\W_]+")
# Case folds unicode61 makes beyond str.lower().
_EXTRA_FOLDS = str.maketrans({"\u03c2": "\u03c3", "\u00b5": "\u03bc"})  # final sigma, micro
_ASCII_SEPARATORS = str.maketrans(
    {c: " " for c in map(chr, range(128)) if not (c.isascii() and c.isalnum())}
)
# Combining marks that follow a Latin letter: remove_diacritics folds Latin script only.
_LATIN_MARKS_RE = re.compile(
    "(?<=[A-Za-z\u00c0-\u024f\u1e00-\u1eff])[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff]+"
)

Int32Array = npt.NDArray[np.int32]
Float32Array = npt.NDArray[np.float32]


# --------------------------------------------------------------------------------------------
# Porter stemmer (M.F. Porter, "An algorithm for suffix stripping", 1980, with the two
# amendments of his reference C implementation that SQLite also carries: bli->ble, logi->log).


def _cons(w: str, i: int) -> bool:
    c = w[i]
    if c in "aeiou":
        return False
    if c == "y":
        # y is a vowel after a consonant, a consonant at the start or after a vowel.
        return i == 0 or not _cons(w, i - 1)
    return True


def _measure(w: str) -> int:
    """m in [C](VC)^m[V]."""
    n, i, size = 0, 0, len(w)
    while i < size and _cons(w, i):
        i += 1
    while i < size:
        while i < size and not _cons(w, i):
            i += 1
        if i >= size:
            break
        while i < size and _cons(w, i):
            i += 1
        n += 1
    return n


def _has_vowel(w: str) -> bool:
    return any(not _cons(w, i) for i in range(len(w)))


def _double_cons(w: str) -> bool:
    return len(w) >= 2 and w[-1] == w[-2] and _cons(w, len(w) - 1)


def _cvc(w: str) -> bool:
    n = len(w)
    return (
        n >= 3
        and _cons(w, n - 3)
        and not _cons(w, n - 2)
        and _cons(w, n - 1)
        and w[-1] not in "wxy"
    )


_STEP2 = sorted(
    [
        ("ational", "ate"),
        ("tional", "tion"),
        ("enci", "ence"),
        ("anci", "ance"),
        ("izer", "ize"),
        ("bli", "ble"),
        ("alli", "al"),
        ("entli", "ent"),
        ("eli", "e"),
        ("ousli", "ous"),
        ("ization", "ize"),
        ("ation", "ate"),
        ("ator", "ate"),
        ("alism", "al"),
        ("iveness", "ive"),
        ("fulness", "ful"),
        ("ousness", "ous"),
        ("aliti", "al"),
        ("iviti", "ive"),
        ("biliti", "ble"),
        ("logi", "log"),
    ],
    key=lambda p: -len(p[0]),
)
_STEP3 = sorted(
    [
        ("icate", "ic"),
        ("ative", ""),
        ("alize", "al"),
        ("iciti", "ic"),
        ("ical", "ic"),
        ("ful", ""),
        ("ness", ""),
    ],
    key=lambda p: -len(p[0]),
)
_STEP4 = sorted(
    [
        "al",
        "ance",
        "ence",
        "er",
        "ic",
        "able",
        "ible",
        "ant",
        "ement",
        "ment",
        "ent",
        "ion",
        "ou",
        "ism",
        "ate",
        "iti",
        "ous",
        "ive",
        "ize",
    ],
    key=lambda s: -len(s),
)


def _replace_longest(w: str, rules: Sequence[tuple[str, str]], min_m: int) -> str:
    # Only the longest matching suffix is considered, whether or not its condition holds.
    for suffix, repl in rules:
        if w.endswith(suffix):
            stem = w[: -len(suffix)]
            return stem + repl if _measure(stem) > min_m else w
    return w


def porter_stem(w: str) -> str:  # noqa: C901 - Porter's published steps, kept in one piece
    if len(w) < 3 or len(w) > _MAX_STEM_LEN:
        return w
    # Step 1a. As SQLite's implementation, a suffix only counts when something precedes it
    # ("ies" -> "ie", "eed" -> "e"), which matters for 3-4 letter words only.
    if (w.endswith("sses") and len(w) > 4) or (w.endswith("ies") and len(w) > 3):
        w = w[:-2]
    elif w.endswith("s") and not w.endswith("ss"):
        w = w[:-1]
    # Step 1b
    if w.endswith("eed") and len(w) > 3:
        if _measure(w[:-3]) > 0:
            w = w[:-1]
    else:
        for suffix in ("ed", "ing"):
            if w.endswith(suffix) and _has_vowel(w[: -len(suffix)]):
                w = w[: -len(suffix)]
                if w.endswith(("at", "bl", "iz")):
                    w += "e"
                elif _double_cons(w) and w[-1] not in "lsz":
                    w = w[:-1]
                elif _measure(w) == 1 and _cvc(w):
                    w += "e"
                break
    # Step 1c
    if w.endswith("y") and _has_vowel(w[:-1]):
        w = w[:-1] + "i"
    w = _replace_longest(w, _STEP2, 0)
    w = _replace_longest(w, _STEP3, 0)
    # Step 4
    for suffix in _STEP4:
        if w.endswith(suffix):
            stem = w[: -len(suffix)]
            if _measure(stem) > 1 and (suffix != "ion" or stem.endswith(("s", "t"))):
                w = stem
            break
    # Step 5a
    if w.endswith("e"):
        m = _measure(w[:-1])
        if m > 1 or (m == 1 and not _cvc(w[:-1])):
            w = w[:-1]
    # Step 5b
    if w.endswith("ll") and _measure(w) > 1:
        w = w[:-1]
    return w


# --------------------------------------------------------------------------------------------
# Tokenizer.

_stems: dict[str, str] = {}


def _stemmed(tokens: list[str], stemming: bool) -> list[str]:
    global _stems
    if not stemming:
        return tokens
    stems = _stems
    distinct = set(tokens)
    missing = distinct.difference(stems)
    if missing:
        fresh = {t: porter_stem(t) for t in missing}
        if len(stems) + len(fresh) > _STEM_CACHE_MAX:
            # A new generation instead of clear(): dicts only ever grow, so a thread still
            # mapping through the old one never misses a key.
            fresh.update((t, stems[t]) for t in distinct - missing)
            _stems = stems = fresh
        else:
            stems.update(fresh)
    return list(map(stems.__getitem__, tokens))


def _fold(text: str) -> str:
    if text.isascii():
        return text.lower()
    # Canonical decomposition only (as unicode61: no compatibility folding of "½" or "ᵃ"),
    # Latin diacritics dropped, the rest recomposed, then lower-cased.
    stripped = _LATIN_MARKS_RE.sub("", unicodedata.normalize("NFD", text))
    return unicodedata.normalize("NFC", stripped).lower().translate(_EXTRA_FOLDS)


def raw_tokens(text: str) -> list[str]:
    if text.isascii():
        # Same tokens as the regex, faster: separators to spaces, then split.
        return text.lower().translate(_ASCII_SEPARATORS).split()
    return _TOKEN_RE.findall(_fold(text))


def tokenizer_id(stemming: bool) -> str:
    """Names the tokenization: persisted term counts are recomputed when it changes."""
    return f"unicode61-rd2{'-porter' if stemming else ''}-v1"


def term_counts(text: str, stemming: bool = True) -> tuple[list[str], bytes, int]:
    """Distinct terms, their frequencies in the same order (little-endian uint16 bytes, the
    stored form) and the document length in tokens."""
    tokens = _stemmed(raw_tokens(text), stemming)
    counts = Counter(tokens)
    tfs = np.fromiter(counts.values(), dtype=np.int64, count=len(counts))
    return list(counts), np.minimum(tfs, 65535).astype("<u2").tobytes(), len(tokens)


def query_terms(text: str, stemming: bool = True) -> list[str]:
    """Distinct terms of a query, in order, at most MAX_QUERY_TERMS."""
    # dict.fromkeys keeps the first occurrence order.
    return list(dict.fromkeys(_stemmed(raw_tokens(text), stemming)))[:MAX_QUERY_TERMS]


# --------------------------------------------------------------------------------------------
# Postings: an immutable CSR "base" (postings sorted by term) plus an append-only "delta",
# merged by compacted(). Rows are never edited in place (an update is delete + append), so
# postings of deleted rows are simply masked out by the caller.


class Postings:
    def __init__(self) -> None:
        self.terms: dict[str, int] = {}
        self.n_base_terms = 0
        self.b_off = np.zeros(1, dtype=np.int64)
        self.b_row = np.zeros(0, dtype=np.int32)
        self.b_tf = np.zeros(0, dtype=np.float32)
        self.d_n = 0
        self.d_term = np.zeros(1024, dtype=np.int32)
        self.d_row = np.zeros(1024, dtype=np.int32)
        self.d_tf = np.zeros(1024, dtype=np.float32)

    @property
    def size(self) -> int:
        return int(self.b_row.size) + self.d_n

    def needs_merge(self) -> bool:
        # The delta is scanned linearly per query term: keep it small next to the base.
        return self.d_n > max(100_000, self.b_row.size // 4)

    def add(
        self, rows: Sequence[int], doc_terms: Sequence[list[str]], doc_tfs: Sequence[bytes]
    ) -> None:
        """Appends the postings of documents (rows), each given as its distinct terms and
        their frequencies (uint16 bytes, as term_counts returns them)."""
        terms = self.terms
        flat_terms = list(chain.from_iterable(doc_terms))
        for term in set(flat_terms).difference(terms):
            terms[term] = len(terms)
        t_ids = np.fromiter(map(terms.__getitem__, flat_terms), np.int32, len(flat_terms))
        # One join and one frombuffer for the whole batch, not an array per document.
        tfs = np.frombuffer(b"".join(doc_tfs), dtype="<u2").astype(np.float32)
        r_ids = np.repeat(np.asarray(rows, dtype=np.int32), [len(t) for t in doc_terms])
        need = self.d_n + len(t_ids)
        if need > self.d_term.size:
            cap = max(need, self.d_term.size * 2)
            for name in ("d_term", "d_row", "d_tf"):
                old = getattr(self, name)
                new = np.zeros(cap, dtype=old.dtype)
                new[: self.d_n] = old[: self.d_n]
                setattr(self, name, new)
        s, e = self.d_n, need
        self.d_term[s:e] = t_ids
        self.d_row[s:e] = r_ids
        self.d_tf[s:e] = tfs
        self.d_n = e

    def get(self, term: str) -> tuple[Int32Array, Float32Array]:
        tid = self.terms.get(term)
        if tid is None:
            return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.float32)
        rows: list[Int32Array] = []
        tfs: list[Float32Array] = []
        if tid < self.n_base_terms:
            s, e = int(self.b_off[tid]), int(self.b_off[tid + 1])
            rows.append(self.b_row[s:e])
            tfs.append(self.b_tf[s:e])
        if self.d_n:
            sel = np.flatnonzero(self.d_term[: self.d_n] == tid)
            rows.append(self.d_row[sel])
            tfs.append(self.d_tf[sel])
        if len(rows) == 1:
            return rows[0], tfs[0]
        return np.concatenate(rows), np.concatenate(tfs)

    def compacted(self, row_map: npt.NDArray[np.int64] | None = None) -> Postings:
        """A merged copy (no delta) with rows renumbered by `row_map` (-1 = dropped; None
        keeps every row as is) and terms left without postings forgotten."""
        base_terms = np.repeat(
            np.arange(self.n_base_terms, dtype=np.int32), np.diff(self.b_off).astype(np.int64)
        )
        t = np.concatenate([base_terms, self.d_term[: self.d_n]])
        r = np.concatenate([self.b_row, self.d_row[: self.d_n]]).astype(np.int64)
        f = np.concatenate([self.b_tf, self.d_tf[: self.d_n]])
        if row_map is not None:
            r = row_map[r]
            keep = r >= 0
            if not keep.all():
                t, r, f = t[keep], r[keep], f[keep]
        # Renumber the terms still used, in id order: a lookup table, no sort needed.
        used = np.bincount(t, minlength=len(self.terms)) > 0
        new = Postings()
        if used.all():
            new.terms = dict(self.terms)
        else:
            remap = (np.cumsum(used) - 1).astype(np.int32)
            t = remap[t]
            new.terms = {term: int(remap[i]) for term, i in self.terms.items() if used[i]}
        n_terms = len(new.terms)
        # Group by term; the order of rows within a term does not matter to scoring.
        order = np.argsort(t)
        new.n_base_terms = n_terms
        new.b_off = np.zeros(n_terms + 1, dtype=np.int64)
        np.cumsum(np.bincount(t, minlength=n_terms), out=new.b_off[1:])
        new.b_row = r[order].astype(np.int32)
        new.b_tf = f[order]
        return new


def bm25_scores(
    postings: Postings,
    terms: Sequence[str],
    doclen: Float32Array,
    stats_mask: npt.NDArray[np.bool_],
    mask: npt.NDArray[np.bool_],
) -> npt.NDArray[np.float64]:
    """BM25 of every row (0 where no term matches); statistics over `stats_mask` (the live rows
    of the account), scores only for rows in `mask`.

    Vectorised over all query terms at once: every term's kept postings are concatenated
    (in query term order) and their contributions computed in one pass, then summed per row
    by np.bincount, which adds in input order, as a per-term `acc[r] += ...` loop would: the
    scores are bitwise those of that loop (tests/unit/adapters/local/index/test_bm25_scores.py holds
    the loop as the reference)."""
    n = mask.size
    n_docs = int(np.count_nonzero(stats_mask))
    if n_docs == 0:
        return np.zeros(n, dtype=np.float64)
    # Every row counting (one account, no tombstones) needs no gather for df: a term's
    # postings are all counted. The sum is over the same values in the same order.
    every = n_docs == n
    avgdl = max(float((doclen[:n] if every else doclen[:n][stats_mask]).sum()) / n_docs, 1e-9)
    # A filter that keeps every row of the account (the common find) needs one gather per
    # term, not two: the rows that count for df are then exactly the rows scored.
    same = mask is stats_mask or np.array_equal(mask, stats_mask)
    kept_rows: list[Int32Array] = []
    kept_tfs: list[Float32Array] = []
    idfs: list[float] = []
    for term in terms:
        rows, tf = postings.get(term)
        if rows.size == 0:
            continue
        counted = None if every else stats_mask[rows]
        counted_n = rows.size if counted is None else int(np.count_nonzero(counted))
        if same and counted_n == rows.size:
            kept_rows.append(rows)  # every posting counts and is scored: nothing to select
            kept_tfs.append(tf)
        else:
            sel = counted if same and counted is not None else mask[rows]
            kept_rows.append(rows[sel])
            kept_tfs.append(tf[sel])
        # At least 1: a term of rows outside the statistics (summaries) still scores, as a
        # rare one; rows outside `mask` (dead ones among them) get nothing anyway.
        idfs.append(bm25_idf(n_docs, max(counted_n, 1)))
    counts = [r.size for r in kept_rows]
    if not sum(counts):
        return np.zeros(n, dtype=np.float64)  # (bincount of nothing would be int64)
    r = np.concatenate(kept_rows) if len(kept_rows) > 1 else kept_rows[0]
    f = (np.concatenate(kept_tfs) if len(kept_tfs) > 1 else kept_tfs[0]).astype(np.float64)
    # The per-term loop's expression, with its dtypes (the length part is float32 up to the
    # sum with f) and its order of operations, so each contribution is bitwise the same;
    # in place, to allocate less.
    if r.size > n:
        # More postings than rows: the length part once per row, then gathered.
        norm = K1 * (1.0 - B + B * doclen[:n] / avgdl)
        denom = f + norm[r]
    else:
        denom = f + K1 * (1.0 - B + B * doclen[r] / avgdl)
    contrib = np.repeat(np.asarray(idfs, dtype=np.float64), counts)
    contrib *= f
    contrib *= K1 + 1.0
    contrib /= denom
    # With weights, bincount sums float64 (its stubs only know the counting form).
    return cast(npt.NDArray[np.float64], np.bincount(r, weights=contrib, minlength=n))
