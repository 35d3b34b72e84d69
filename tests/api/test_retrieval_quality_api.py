"""Result lists as a client sees them, through openviking-sdk: `limit` counts final results,
sidecars do not crowd files out, empty queries, OpenViking's filter spellings, the keyword
score scale and the sequence context of numbered parts."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from openviking_sdk import SyncHTTPClient
from openviking_sdk.errors import InvalidArgumentError, OpenVikingError

from skald.domain.retrieval.crowding import sidecar_directory


def hits_of(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Every hit, best first, as a client ranks them."""
    hits = result["memories"] + result["resources"] + result["skills"]
    return sorted(hits, key=lambda h: -h["score"])


def assert_uncrowded(hits: list[dict[str, Any]]) -> None:
    files = [h["uri"] for h in hits if sidecar_directory(h["uri"]) is None]
    seen: set[str] = set()
    for h in hits:
        directory = sidecar_directory(h["uri"])
        if directory is None:
            continue
        assert directory not in seen, f"two sidecars of {directory}: {hits}"
        seen.add(directory)
        below = [f for f in files if f.startswith(directory + "/")]
        assert not below, f"{h['uri']} listed with files below it: {below}"


def long_file(topic: int) -> str:
    """A file long enough to be indexed as several sections, each mentioning commits."""
    filler = " ".join(
        f"Detail {i} of topic {topic} explains the procedure step by step." for i in range(14)
    )
    parts = [f"# Topic {topic}\n"]
    for s in range(4):
        parts.append(
            f"## Part {s}\n\nA session commit archives the messages of part {s} "
            f"in topic {topic}. {filler}\n"
        )
    return "\n".join(parts)


def test_limit_counts_distinct_files_not_sections(client: SyncHTTPClient, tmp_path: Path) -> None:
    src = tmp_path / "api"
    src.mkdir()
    for t in range(12):
        (src / f"topic{t:02d}.md").write_text(long_file(t))
    root = "viking://resources/ovdocs/api"
    client.add_resource(str(src), to=root, wait=True)
    client.wait_processed()
    for limit in (3, 10):
        res = client.find("session commit", target_uri=root, limit=limit)
        hits = hits_of(res)
        uris = [h["uri"] for h in hits]
        assert len(uris) == limit == len(set(uris)) == res["total"], uris
        assert all(sidecar_directory(u) is None for u in uris), uris
    # Fewer candidates than the limit: every one comes back, no more.
    res = client.find("session commit", target_uri=root, limit=50)
    assert len({h["uri"] for h in hits_of(res)}) == 12


def test_sidecars_do_not_crowd_out_files(client: SyncHTTPClient, tmp_path: Path) -> None:
    src = tmp_path / "notes"
    (src / "travel").mkdir(parents=True)
    (src / "travel" / "lisbon.md").write_text(
        "# Lisbon\n\nThe Lisbon warehouse audit is scheduled for the third of March.\n"
    )
    (src / "travel" / "porto.md").write_text("# Porto\n\nPorto has a river and bridges.\n")
    (src / "cooking.md").write_text("# Cooking\n\nBake the bread at 220 degrees.\n")
    client.add_resource(str(src), to="viking://resources/notes", wait=True)
    client.wait_processed()
    res = client.find("Lisbon warehouse audit", target_uri="viking://resources/notes", limit=4)
    hits = hits_of(res)
    assert hits[0]["uri"] == "viking://resources/notes/travel/lisbon.md"
    assert_uncrowded(hits)
    assert len(hits) == 3  # the three files: every sidecar is above a listed file
    # Sidecars alone still come back, one per directory.
    only = hits_of(
        client.find(
            "Lisbon warehouse audit",
            target_uri="viking://resources/notes",
            limit=10,
            options={"level": [0, 1]},
        )
    )
    assert only and all(sidecar_directory(h["uri"]) for h in only)
    assert_uncrowded(only)


def test_an_empty_query_without_filters_is_refused(client: SyncHTTPClient) -> None:
    client.write("viking://resources/e/a.md", "alpha", wait=True)
    with pytest.raises(InvalidArgumentError, match="query is empty and no filter"):
        client.find("")
    with pytest.raises(InvalidArgumentError, match="query is empty and no filter"):
        client.search("   ")


def test_an_empty_query_with_filters_lists_newest_first(client: SyncHTTPClient) -> None:
    root = "viking://resources/listing"
    for name in ("a", "b", "c", "d"):
        client.write(f"{root}/{name}.md", f"note {name}", wait=True)
        time.sleep(0.02)  # distinct update times
    client.wait_processed()
    res = client.find("", target_uri=root, limit=3, options={"level": 2})
    hits = res["resources"]
    assert [h["uri"] for h in hits] == [f"{root}/d.md", f"{root}/c.md", f"{root}/b.md"]
    assert {h["score"] for h in hits} == {0.0}
    # A filter alone (no target) is a listing too, in the same order.
    res = client.find(
        "",
        limit=2,
        options={"filter": {"op": "must", "field": "parent", "conds": [root]}, "level": 2},
    )
    assert [h["uri"] for h in res["resources"]] == [f"{root}/d.md", f"{root}/c.md"]
    client.write(f"{root}/a.md", "note a, edited", wait=True)
    client.wait_processed()
    res = client.find("", target_uri=root, limit=1, options={"level": 2})
    assert [h["uri"] for h in res["resources"]] == [f"{root}/a.md"]


def test_openviking_plain_dict_filters(client: SyncHTTPClient) -> None:
    client.write("viking://resources/pets/cat.md", "The cat sleeps on the sofa.", wait=True)
    client.write(
        "viking://~/memories/preferences/alice/cats.md",
        "Alice likes cats that sleep on sofas.",
        wait=True,
    )
    client.wait_processed()
    for flt in (
        {"type": "resource"},
        {"context_type": ["resource"]},
        {"filter": {"op": "must", "field": "context_type", "conds": ["resource"]}},
    ):
        res = client.find("cat sleeping on a sofa", options={"filter": flt})
        assert res["resources"] and not res["memories"], (flt, res)
    res = client.find(
        "cat sleeping on a sofa",
        options={"filter": {"parent_uri": "viking://resources/pets", "level": 2}},
    )
    assert [h["uri"] for h in res["resources"]] == ["viking://resources/pets/cat.md"]
    res = client.find(
        "cat",
        options={
            "filter": {"op": "time_range", "field": "updated_at", "gte": "2000-01-01T00:00:00Z"}
        },
    )
    assert res["resources"]
    res = client.find("cat", options={"filter": {"updated_at": {"lt": "2000-01-01"}}})
    assert res["total"] == 0
    with pytest.raises(OpenVikingError, match="unknown filter field .colour."):
        client.find("cat", options={"filter": {"colour": "blue"}})


def test_an_exact_rare_keyword_scores_high_in_a_one_file_account(client: SyncHTTPClient) -> None:
    client.write(
        "viking://resources/p/plan.md",
        "Project BLUEBIRD ships in March after the security review.",
        wait=True,
    )
    client.wait_processed()
    res = client.search("BLUEBIRD", options={"search_type": "keywords"})
    best = hits_of(res)[0]
    assert best["uri"] == "viking://resources/p/plan.md"
    assert best["score"] > 0.7, best
    kept = client.search("BLUEBIRD", options={"search_type": "keywords", "score_threshold": 0.5})
    assert "viking://resources/p/plan.md" in [h["uri"] for h in hits_of(kept)]


def test_a_turn_is_found_through_its_neighbouring_turn(client: SyncHTTPClient) -> None:
    """A conversation stored one turn per file (D1_1.md, D1_2.md, ...): the answer is the
    turn after the one that names the topic, and it shares no word with the question. Files
    elsewhere that match the question's words, each on its own, come after it."""
    chat = "viking://resources/chat/session_01"
    turns = [
        "Melanie: Good morning! The weather is lovely for a long walk today.",
        "Melanie: I finished the painting of the lake I told you about.",
        "Melanie: How was your week, anything new at home?",
        "Caroline: Last week I went to the animal shelter to adopt a pet.",
        "Caroline: Yes, we brought Luna home on Sunday; she sleeps on my bed now.",
        "Melanie: My kids start swimming lessons next month.",
        "Melanie: We also booked a camping trip for the summer holidays.",
        "Melanie: I should get back to work, talk soon!",
    ]
    notes = {
        "fees": "The shelter adoption fee covers vaccines and a microchip for every pet.",
        "volunteers": "Shelter volunteers help each adopted pet settle in its new home.",
        "checklist": "Before you adopt a pet from a shelter, plan a home visit and supplies.",
    }
    client.mkdir("viking://resources/chat")
    client.mkdir(chat)
    client.mkdir("viking://resources/chat/notes")
    for n, text in enumerate(turns, start=1):
        client.write(f"{chat}/D1_{n}.md", text, wait=True)
    for name, text in notes.items():
        client.write(f"viking://resources/chat/notes/{name}.md", text, wait=True)
    client.wait_processed()
    res = client.find(
        "Which pet did Caroline adopt from the shelter?",
        target_uri="viking://resources/chat",
        limit=3,
    )
    uris = [h["uri"] for h in hits_of(res)]
    assert uris[0] == f"{chat}/D1_4.md", uris
    assert f"{chat}/D1_5.md" in uris, uris


def test_an_event_in_sequence_context_keeps_score_equal_origin_times_time(
    client: SyncHTTPClient,
) -> None:
    """Numbered event memories are parts of a sequence too: the context is applied before
    decay, so a hit's score is still its origin_score times its time_score."""
    for n, text in enumerate(
        [
            "Standup: the release train leaves on Friday.",
            "Standup: the release train slipped to Monday.",
        ],
        start=1,
    ):
        client.write(f"viking://~/memories/events/2020/01/01/standup-{n}.md", text, wait=True)
    client.wait_processed()
    res = client.find(
        "when does the release train leave",
        options={"context_type": "memory", "events_time_decay_protection": "0"},
    )
    hits = [h for h in res["memories"] if "/standup-" in h["uri"]]
    assert len(hits) == 2, res
    for hit in hits:
        assert hit["score"] == pytest.approx(hit["origin_score"] * hit["time_score"], abs=2e-6), hit
