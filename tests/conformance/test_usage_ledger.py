"""UsageLedger conformance: every adapter, through the port only. Adding to a cell adds up
(also from several writers at once), the running totals follow the same writes, reads are
bounded by hours and accounts, and a purge leaves nothing of the account."""

from __future__ import annotations

import threading

from skald.domain.metering import UsageCell, dims_key
from tests.conformance.conftest import UsageOpener


def cell(
    hour: str,
    unit: str,
    value: int,
    *,
    account: str = "acme",
    user: str = "alice",
    dims: dict[str, str] | None = None,
) -> UsageCell:
    return UsageCell(account, hour, user, unit, dims_key(dims), value)


def test_cells_add_up_and_read_back_in_hour_order(usage_backend: UsageOpener) -> None:
    ledger = usage_backend()
    fam = {"family": "fs"}
    ledger.add(
        [
            cell("2026-12-08T10", "requests", 2, dims=fam),
            cell("2026-12-08T09", "requests", 1, dims=fam),
        ]
    )
    ledger.add([cell("2026-12-08T10", "requests", 3, dims=fam)])
    got = ledger.cells("acme", "2026-12-08T00", "2026-12-08T23")
    assert [(c.hour, c.unit, c.dims, c.value) for c in got] == [
        ("2026-12-08T09", "requests", "family=fs", 1),
        ("2026-12-08T10", "requests", "family=fs", 5),
    ]


def test_reads_are_bounded_by_hours_users_and_accounts(usage_backend: UsageOpener) -> None:
    ledger = usage_backend()
    ledger.add(
        [
            cell("2026-11-30T23", "bytes_uploaded", 10),
            cell("2026-12-01T00", "bytes_uploaded", 20),
            cell("2026-12-02T05", "bytes_uploaded", 40, user="bob"),
        ]
    )
    ledger.add([cell("2026-12-01T00", "bytes_uploaded", 99, account="other")])
    assert [c.value for c in ledger.cells("acme", "2026-11-30T23", "2026-12-02T05")] == [10, 20, 40]
    # across a month boundary, inclusive at both ends
    assert [c.value for c in ledger.cells("acme", "2026-12-01T00", "2026-12-01T00")] == [20]
    assert [
        c.value for c in ledger.cells("acme", "2026-11-01T00", "2026-12-31T23", user_id="bob")
    ] == [40]
    assert [c.account_id for c in ledger.cells("other", "2026-01-01T00", "2026-12-31T23")] == [
        "other"
    ]
    assert ledger.cells("nobody", "2026-01-01T00", "2026-12-31T23") == []


def test_running_totals_follow_the_writes(usage_backend: UsageOpener) -> None:
    ledger = usage_backend()
    llm = {"purpose": "summary", "model": "m"}
    ledger.add(
        [
            cell("2026-12-08T10", "bytes_stored", 1000),
            cell("2026-12-08T11", "bytes_stored", -300),
            cell("2026-12-08T10", "llm_tokens_in", 100, dims=llm),
            cell("2026-12-08T23", "llm_tokens_out", 10, dims=llm),
            cell("2026-12-09T00", "llm_tokens_in", 7, dims=llm),
            cell("2026-12-08T10", "requests", 5),
        ]
    )
    today = ledger.totals("acme", "2026-12-08")
    assert today.stored_bytes == 700
    assert today.tokens_on("2026-12-08") == 110
    assert ledger.totals("acme", "2026-12-09").tokens_on("2026-12-09") == 7
    empty = ledger.totals("nobody", "2026-12-08")
    assert empty.stored_bytes == 0 and empty.tokens_on("2026-12-08") == 0


def test_concurrent_writers_add_up(usage_backend: UsageOpener) -> None:
    ledgers = [usage_backend() for _ in range(4)]

    def flush(ledger_index: int) -> None:
        for _ in range(5):
            ledgers[ledger_index].add([cell("2026-12-08T10", "bytes_stored", 1)])

    threads = [threading.Thread(target=flush, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (got,) = ledgers[0].cells("acme", "2026-12-08T10", "2026-12-08T10")
    assert got.value == 20
    assert ledgers[0].totals("acme", "2026-12-08").stored_bytes == 20


def test_purge_removes_every_cell_and_total_of_the_account(usage_backend: UsageOpener) -> None:
    ledger = usage_backend()
    ledger.add(
        [cell("2026-11-30T10", "bytes_stored", 5), cell("2026-12-08T10", "llm_tokens_in", 3)]
    )
    ledger.add([cell("2026-12-08T10", "bytes_stored", 9, account="other")])
    assert ledger.purge_account("acme") > 0
    assert ledger.cells("acme", "2026-01-01T00", "2026-12-31T23") == []
    assert ledger.totals("acme", "2026-12-08").stored_bytes == 0
    assert ledger.totals("other", "2026-12-08").stored_bytes == 9
