"""bench/sections.py: a benchmark rewrites its own section of a results file and nothing else."""

from __future__ import annotations

from pathlib import Path

from bench.sections import write_section

HAND = "Run 7 was an outlier: kept by hand, below the sections.\n"


def results(tmp_path: Path) -> Path:
    path = tmp_path / "RESULTS.md"
    path.write_text(
        "<!-- run:start -->\n# Results\nquick run A\n<!-- run:end -->\n\n"
        "<!-- memory:start -->\n## Memory\n| docs | 262 |\n<!-- memory:end -->\n\n" + HAND
    )
    return path


def test_a_section_is_replaced_and_the_rest_of_the_file_stays(tmp_path: Path) -> None:
    path = results(tmp_path)
    write_section(path, "run", "# Results\nquick run B\n")
    text = path.read_text()
    assert "quick run B" in text and "quick run A" not in text
    assert "<!-- memory:start -->\n## Memory\n| docs | 262 |\n<!-- memory:end -->" in text
    assert text.endswith(HAND)
    assert text.count("<!-- run:start -->") == 1 and text.count("<!-- run:end -->") == 1


def test_keep_previous_puts_the_replaced_run_below_the_new_one(tmp_path: Path) -> None:
    path = results(tmp_path)
    write_section(path, "memory", "## Memory\n| docs | 250 |", keep_previous=True)
    write_section(path, "memory", "## Memory\n| docs | 240 |", keep_previous=True)
    text = path.read_text()
    section = text.split("<!-- memory:start -->", 1)[1].split("<!-- memory:end -->", 1)
    assert section[0] == "\n## Memory\n| docs | 240 |\n"
    after = section[1]
    # Newest first, each former run once, without its heading; the hand-kept text after them.
    assert after.index("| docs | 250 |") < after.index("| docs | 262 |") < after.index(HAND)
    assert after.count("## Memory") == 0 and text.count("| docs | 262 |") == 1
    assert "quick run A" in text


def test_a_missing_section_or_file_is_appended_or_created(tmp_path: Path) -> None:
    path = results(tmp_path)
    write_section(path, "scale-find", "## Scale\n| 10,000 | 9.7 |")
    text = path.read_text()
    assert text.startswith("<!-- run:start -->") and HAND in text
    assert text.endswith(
        "<!-- scale-find:start -->\n## Scale\n| 10,000 | 9.7 |\n<!-- scale-find:end -->\n"
    )
    fresh = tmp_path / "out" / "RESULTS-quick.md"
    write_section(fresh, "run", "# Results\n", keep_previous=True)
    assert fresh.read_text() == "<!-- run:start -->\n# Results\n<!-- run:end -->\n"
