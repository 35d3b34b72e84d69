"""RecallLedger conformance: every adapter (blob ledger on the local store and on S3, DynamoDB
ledger on moto), through the port only."""

from __future__ import annotations

import threading

import pytest

from skald.ports import RECALL_LEDGER_MAX_TURNS, RecallLedger
from tests.conformance.conftest import RecallOpener

T0 = 1_700_000_000.0
A, U, S = "acme", "alice", "s1"


def test_unknown_session_has_no_turns(recall_ledger: RecallLedger) -> None:
    assert recall_ledger.recent(A, U, "never", 5) == []
    recall_ledger.record(A, U, S, ["viking://resources/a.md"], T0)
    assert recall_ledger.recent(A, U, S, 0) == []
    assert recall_ledger.recent(A, U, S, -1) == []


def test_turns_number_from_one_and_come_back_newest_first(recall_ledger: RecallLedger) -> None:
    turns = [
        ["viking://resources/a.md", "viking://resources/b.md"],
        [],
        ["viking://user/alice/memories/preferences/tea.md"],
    ]
    numbers = [recall_ledger.record(A, U, S, uris, T0 + i) for i, uris in enumerate(turns)]
    assert numbers == [1, 2, 3]
    assert recall_ledger.recent(A, U, S, 3) == [set(t) for t in reversed(turns)]
    assert recall_ledger.recent(A, U, S, 2) == [set(turns[2]), set()]
    # Asking for more turns than were recorded gives what there is.
    assert recall_ledger.recent(A, U, S, 50) == [set(t) for t in reversed(turns)]


def test_a_turn_holds_each_uri_once(recall_ledger: RecallLedger) -> None:
    uri = "viking://resources/a.md"
    recall_ledger.record(A, U, S, [uri, uri, "viking://resources/b.md", uri], T0)
    assert recall_ledger.recent(A, U, S, 1) == [{uri, "viking://resources/b.md"}]


def test_sessions_users_and_accounts_are_separate(recall_ledger: RecallLedger) -> None:
    places = [(A, U, S), (A, U, "s2"), (A, "bob", S), ("globex", U, S)]
    for i, (account, user, session) in enumerate(places):
        assert recall_ledger.record(account, user, session, [f"viking://resources/{i}"], T0) == 1
    for i, (account, user, session) in enumerate(places):
        assert recall_ledger.recent(account, user, session, 5) == [{f"viking://resources/{i}"}]


def test_turns_persist_across_instances(recall_backend: RecallOpener) -> None:
    recall_backend().record(A, U, S, ["viking://resources/a.md"], T0)
    reopened = recall_backend()
    assert reopened.recent(A, U, S, 1) == [{"viking://resources/a.md"}]
    assert reopened.record(A, U, S, [], T0 + 1) == 2


def test_only_the_newest_turns_are_kept_and_numbers_keep_rising(
    recall_backend: RecallOpener,
) -> None:
    cap = 4  # the deployed cap is RECALL_LEDGER_MAX_TURNS; a small one keeps this quick
    ledger = recall_backend(max_turns=cap)
    total = cap + 3
    for n in range(1, total + 1):
        assert ledger.record(A, U, S, [f"viking://resources/{n}"], T0 + n) == n
    kept = ledger.recent(A, U, S, total)
    assert kept == [{f"viking://resources/{n}"} for n in range(total, total - cap, -1)]
    # The cap applies to what is stored, not only to what one client shows.
    assert recall_backend(max_turns=cap).recent(A, U, S, total) == kept


def test_the_default_history_is_the_port_constant(recall_backend: RecallOpener) -> None:
    assert getattr(recall_backend(), "max_turns", None) == RECALL_LEDGER_MAX_TURNS


def test_concurrent_writers_each_get_their_own_turn(recall_backend: RecallOpener) -> None:
    writers, per_writer = 4, 3
    numbers: list[int] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def write(w: int) -> None:
        ledger = recall_backend()  # one client per writer, as separate requests would have
        try:
            for i in range(per_writer):
                n = ledger.record(A, U, S, [f"viking://resources/w{w}/{i}"], T0)
                with lock:
                    numbers.append(n)
        except BaseException as exc:  # surfaced below, with the thread's own error
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    total = writers * per_writer
    assert sorted(numbers) == list(range(1, total + 1))
    recorded = recall_backend().recent(A, U, S, total)
    assert len(recorded) == total
    assert set().union(*recorded) == {
        f"viking://resources/w{w}/{i}" for w in range(writers) for i in range(per_writer)
    }


@pytest.mark.parametrize("uris", [[], ["viking://resources/ü ñ/é.md"]])
def test_empty_and_unicode_turns_round_trip(recall_ledger: RecallLedger, uris: list[str]) -> None:
    recall_ledger.record(A, U, S, uris, T0)
    assert recall_ledger.recent(A, U, S, 1) == [set(uris)]
