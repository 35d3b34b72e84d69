"""The language model's token meter: per unit of work, per thread, junk counted as 0."""

from __future__ import annotations

import threading

from skald.domain.ops.usage import metering, record, total


def test_usage_is_counted_inside_its_block_and_the_blocks_around_it() -> None:
    record(7, 7)  # no meter: nothing to count, nothing fails
    with metering() as outer:
        record(100, 10)
        with metering() as inner:
            record(1, 2)
        record(None, "junk")
        record(-5, True)
    assert inner.as_dict() == {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    # a completion's meter nests in its archive's: the archive counts it too
    assert outer.as_dict() == {"prompt_tokens": 101, "completion_tokens": 12, "total_tokens": 113}
    with metering() as after:
        pass
    assert after.total_tokens == 0


def test_each_thread_has_its_own_meter() -> None:
    seen: dict[str, int] = {}

    def work(name: str, tokens: int) -> None:
        with metering() as usage:
            for _ in range(50):
                record(tokens, 0)
        seen[name] = usage.prompt_tokens

    threads = [threading.Thread(target=work, args=(str(n), n)) for n in (1, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"1": 50, "2": 100, "3": 150}


def test_stored_usages_add_up() -> None:
    assert total(
        iter(
            [
                {"prompt_tokens": 3, "completion_tokens": 1},
                {"prompt_tokens": 2, "completion_tokens": "x"},
                {},
            ]
        )
    ) == {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}
