"""A read's byte budget on the Python path (kafka_direct.consumer.budget): table-style, with a
scripted queue of sized messages; no broker. The C path keeps the same rule (kd_take), tested
through real Kafka in tests/integration/test_large_records.py."""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest

from kafka_direct.consumer.budget import MAX_CHUNK, consume_within, header_bytes, next_chunk

MB = 1024 * 1024


@pytest.mark.parametrize(
    ("want", "got", "got_bytes", "max_bytes", "hint", "expected"),
    [
        pytest.param(100, 0, 0, 16 * MB, None, 1, id="first read, sizes unknown: one record"),
        pytest.param(100, 0, 0, 16 * MB, 100.0, 100, id="small records known: all at once"),
        pytest.param(100, 0, 0, 16 * MB, float(MB), 8, id="1 MB records known: half the budget"),
        pytest.param(20_000, 1, MB, 16 * MB, None, 8, id="after a 1 MB record"),
        pytest.param(20_000, 15, 15 * MB, 16 * MB, None, 1, id="near the budget: one more"),
        pytest.param(20_000, 16, 16 * MB, 16 * MB, None, 0, id="budget reached"),
        pytest.param(20_000, 1, 40 * MB, 16 * MB, None, 0, id="one record over the budget"),
        pytest.param(0, 5, 500, 16 * MB, None, 0, id="count reached"),
        pytest.param(10**9, 1, 1, 16 * MB, None, MAX_CHUNK, id="a chunk has a ceiling"),
    ],
)
def test_next_chunk(
    want: int, got: int, got_bytes: int, max_bytes: int, hint: float | None, expected: int
) -> None:
    assert next_chunk(want, got, got_bytes, max_bytes, hint) == expected


class Msg:
    """A message as confluent-kafka's: len() is the value's length."""

    def __init__(
        self,
        size: int,
        key: bytes | None = None,
        error: Any = None,
        headers: list[tuple[str, bytes | None]] | None = None,
    ) -> None:
        self.size, self._key, self._error, self._headers = size, key, error, headers

    def __len__(self) -> int:
        return self.size

    def key(self) -> bytes | None:
        return self._key

    def error(self) -> Any:
        return self._error

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        return self._headers


class Queue:
    def __init__(self, messages: list[Msg]) -> None:
        self.messages = deque(messages)
        self.asked: list[int] = []

    def consume(self, n: int, timeout: float) -> list[Msg]:
        self.asked.append(n)
        return [self.messages.popleft() for _ in range(min(n, len(self.messages)))]


def _sizes(messages: list[Msg]) -> list[int]:
    return [m.size for m in messages]


def test_large_records_stop_at_the_budget() -> None:
    queue = Queue([Msg(MB) for _ in range(100)])
    got = consume_within(queue.consume, 20_000, 1.0, 16 * MB)
    assert 16 <= len(got) <= 17  # within one record of the budget
    assert sum(_sizes(got)) < 17 * MB
    assert queue.asked[0] == 1  # sizes unknown: one record first


def test_a_record_larger_than_the_budget_comes_alone() -> None:
    queue = Queue([Msg(40 * MB), Msg(10), Msg(10)])
    assert _sizes(consume_within(queue.consume, 100, 1.0, 16 * MB)) == [40 * MB]
    assert _sizes(consume_within(queue.consume, 100, 1.0, 16 * MB)) == [10, 10]


def test_keys_count_towards_the_budget() -> None:
    queue = Queue([Msg(0, key=b"k" * MB) for _ in range(40)])
    got = consume_within(queue.consume, 1000, 1.0, 8 * MB)
    assert 8 <= len(got) <= 9


def test_headers_count_towards_the_budget_when_the_read_carries_them() -> None:
    def queue() -> Queue:
        return Queue([Msg(10, headers=[("h", b"v" * MB), ("n", None)]) for _ in range(40)])

    got = consume_within(queue().consume, 1000, 1.0, 8 * MB, headers=True)
    assert 8 <= len(got) <= 9
    # A read without headers leaves them out of its batch, and out of its budget.
    assert len(consume_within(queue().consume, 1000, 1.0, 8 * MB)) == 40


def test_a_header_confluent_kafka_cannot_give_ends_the_read_for_the_rows_to_name() -> None:
    class BadKey(Msg):
        def headers(self) -> list[tuple[str, bytes | None]] | None:
            raise SystemError("<built-in method headers> returned a result with an exception set")

    queue = Queue([BadKey(10), *[Msg(10) for _ in range(5)]])
    got = consume_within(queue.consume, 100, 1.0, 16 * MB, headers=True)
    assert len(got) == 1 and isinstance(got[0], BadKey)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        pytest.param(None, 0, id="none"),
        pytest.param([], 0, id="empty"),
        pytest.param([("abc", b"12345")], 8, id="name and value"),
        pytest.param([("abc", None), ("d", b"")], 4, id="null and empty values"),
    ],
)
def test_header_bytes(headers: list[tuple[str, bytes | None]] | None, expected: int) -> None:
    assert header_bytes(headers) == expected


def test_small_records_come_in_few_calls() -> None:
    queue = Queue([Msg(100) for _ in range(5000)])
    got = consume_within(queue.consume, 5000, 1.0, 16 * MB, mean_hint=100.0)
    assert len(got) == 5000 and queue.asked == [5000]


def test_an_event_ends_the_read() -> None:
    # The chunk that holds an event is the read's last: the caller must see the event (a
    # partition's end, an error) before taking more.
    queue = Queue([Msg(10), Msg(0, error="EOF"), *[Msg(10) for _ in range(10)]])
    got = consume_within(queue.consume, 100, 1.0, 16 * MB)
    assert queue.asked[0] == 1 and len(queue.asked) == 2
    assert any(m.error() == "EOF" for m in got) and len(queue.messages) < 10


def test_an_empty_queue_ends_the_read() -> None:
    assert consume_within(Queue([]).consume, 100, 1.0, 16 * MB) == []
