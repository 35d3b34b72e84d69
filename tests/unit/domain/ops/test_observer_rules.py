"""The consistency rule, memory statistics, route totals and the observer's tables."""

from __future__ import annotations

import pytest

from skald.domain.errors import InvalidArgument
from skald.domain.memory.stats import DAY_S, category_of, check_category, hotness, memory_stats
from skald.domain.ops.consistency import MAX_LISTED, MissingRecord, check
from skald.domain.ops.route_stats import RouteTally, under
from skald.domain.ops.status_tables import table

ROOT = "viking://resources/docs"


def test_an_indexed_tree_is_consistent() -> None:
    files = [f"{ROOT}/a.md", f"{ROOT}/sub/b.md"]
    dirs = [ROOT, f"{ROOT}/sub"]
    records = [
        (f"{ROOT}/a.md", 2),
        (f"{ROOT}/sub/b.md", 2),
        (f"{ROOT}/sub/b.md", 2),
        (f"{ROOT}/.abstract.md", 0),
        (f"{ROOT}/.overview.md", 1),
        (f"{ROOT}/sub/.abstract.md", 0),
        (f"{ROOT}/sub/.overview.md", 1),
    ]
    report = check(ROOT, files, dirs, records)
    assert report.ok is True and report.expected_count == 4
    assert report.missing_records == [] and report.orphan_records == []


def test_missing_and_orphan_records_are_reported_with_paths() -> None:
    report = check(
        ROOT,
        [f"{ROOT}/new.md", f"{ROOT}/kept.md"],
        [ROOT],
        [(f"{ROOT}/kept.md", 2), (f"{ROOT}/gone.md", 2), (f"{ROOT}/old/.abstract.md", 0)],
    )
    assert report.ok is False
    assert report.missing_records == [
        MissingRecord(
            uri=f"{ROOT}/.abstract.md", path=".abstract.md", level=0, key=".abstract.md#level=0"
        ),
        MissingRecord(uri=f"{ROOT}/new.md", path="new.md", level=2, key="new.md#level=2"),
    ]
    assert report.orphan_records == [f"{ROOT}/gone.md", f"{ROOT}/old/.abstract.md"]
    assert (report.missing_record_count, report.orphan_record_count) == (2, 2)


def test_empty_directories_need_no_record_but_theirs_are_not_orphans() -> None:
    # A preset directory nothing was written to may or may not be summarised.
    assert check(ROOT, [], [ROOT, f"{ROOT}/empty"], []).ok is True
    with_records = check(
        ROOT,
        [],
        [ROOT, f"{ROOT}/empty"],
        [(f"{ROOT}/empty/.abstract.md", 0), (f"{ROOT}/empty/.overview.md", 1)],
    )
    assert with_records.ok is True and with_records.expected_count == 0


def test_sessions_are_left_out() -> None:
    sess = "viking://user/alice/sessions/s1/messages.jsonl"
    report = check(
        "viking://user/alice",
        [sess],
        ["viking://user/alice/sessions/s1"],
        [("viking://user/alice/sessions/s1/history/archive_001/.abstract.md", 0)],
    )
    assert report.ok is True and report.expected_count == 0


def test_long_lists_are_truncated_but_counted() -> None:
    files = [f"{ROOT}/f{i:04}.md" for i in range(MAX_LISTED + 5)]
    report = check(ROOT, files, [], [])
    assert report.missing_record_count == MAX_LISTED + 5
    assert len(report.missing_records) == MAX_LISTED and report.missing_records_truncated


def test_a_file_checked_on_its_own() -> None:
    report = check(f"{ROOT}/a.md", [f"{ROOT}/a.md"], [], [(f"{ROOT}/a.md", 2)])
    assert report.ok is True and report.expected_count == 1


def test_the_root_uri_gives_paths_below_it() -> None:
    report = check("viking://", ["viking://resources/x.md"], ["viking://resources"], [])
    assert [m.path for m in report.missing_records] == ["resources/.abstract.md", "resources/x.md"]


# ------------------------------------------------------------------------------ memory stats


def test_memory_categories_and_hotness() -> None:
    assert category_of("profile.md") == "profile"
    assert category_of("preferences/tea.md") == "preferences"
    assert category_of("events/2026/05/trip.md") == "events"
    assert category_of("preferences/.abstract.md") == "preferences"  # callers pass visible files
    assert category_of("notes/x.md") is None and category_of("preferences") is None
    assert hotness(100.0, 100.0) == 1.0
    assert hotness(0.0, 7 * DAY_S) == pytest.approx(0.5)
    check_category(None)
    check_category("cases")
    with pytest.raises(InvalidArgument, match="Valid categories"):
        check_category("bogus")


def test_memory_stats_buckets_and_staleness() -> None:
    now = 100 * DAY_S
    files = ["profile.md", "preferences/a.md", "preferences/b.md", "events/e.md", "notes/n.md"]
    times = [(now, now), (now - 40 * DAY_S, now - 40 * DAY_S), (now - 60 * DAY_S, now - 3 * DAY_S)]
    stats = memory_stats(files, times, now)
    assert stats["total_memories"] == 4
    assert stats["by_category"]["preferences"] == 2 and stats["by_category"]["profile"] == 1
    assert stats["hotness_distribution"] == {"hot": 2, "warm": 0, "cold": 1}
    assert stats["staleness"] == {
        "not_accessed_7d": 1,
        "not_accessed_30d": 1,
        "oldest_memory_age_days": 60.0,
    }
    only = memory_stats(files, [], now, "events")
    assert only["by_category"] == {"events": 1} and only["total_memories"] == 1


# ------------------------------------------------------------------------------ route totals


def test_route_tally_sums_by_prefix() -> None:
    tally = RouteTally()
    tally.add("/api/v1/search/find", 200, 0.02)
    tally.add("/api/v1/search/search", 500, 0.04)
    tally.add("/api/v1/search/find", 400, 0.0)
    tally.add("/api/v1/fs/ls", 200, 0.01)
    tally.retrieval(0)
    tally.retrieval(3)
    search = under(tally.snapshot(), "/api/v1/search/")
    assert (search.requests, search.errors, search.rejected) == (3, 1, 1)
    assert search.mean_ms == pytest.approx(20.0)
    assert under(tally.snapshot(), "/api/v1/fs").requests == 1
    assert tally.zero_results == 1


def test_table_rows_are_pipe_separated_and_aligned() -> None:
    text = table(("Queue", "Pending"), [("Semantic", 3), ("TOTAL", 3)])
    lines = text.splitlines()
    assert len({len(line) for line in lines}) == 1
    assert lines[1].startswith("|") and "Queue" in lines[1] and "Semantic" in lines[3]
    assert [c.strip() for c in lines[4].strip("|").split("|")] == ["TOTAL", "3"]
