"""Packed reads (kafka_direct.consumer.packed, kafka_direct.consumer.read): the rounds a task's
ranges are read in, the per-range row counts of the task statistics, and the fetch loop's
progress and data-loss checks over fakes (no broker; the real broker reads packed tasks in
tests/integration/test_packed_read.py)."""

from __future__ import annotations

import datetime as dt
from array import array
from typing import Any

import pyarrow as pa
import pytest

from kafka_direct.consumer import loss, native, task_consumer
from kafka_direct.consumer.fetch import CONSUME_SLICE_S
from kafka_direct.consumer.packed import GroupConsumer, fetch_ranges, rounds
from kafka_direct.consumer.read import _count_rows
from kafka_direct.consumer.rows import ARROW_SCHEMA
from kafka_direct.errors import DataLossError, FetchTimeoutError
from kafka_direct.offsets import OffsetRange
from tests.unit.fakes import CatchingUpLeader, FakeClock, FakeGroupConsumer, FakeLog

T0 = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


def R(topic: str, partition: int, a: int, b: int) -> OffsetRange:
    return OffsetRange(topic, partition, a, b)


@pytest.mark.parametrize(
    ("ranges", "expected"),
    [
        pytest.param([], [], id="nothing"),
        pytest.param([R("a", 0, 3, 3)], [], id="empty ranges are not read"),
        pytest.param(
            [R("b", 0, 0, 5), R("a", 1, 0, 2), R("a", 0, 7, 9)],
            [[R("a", 0, 7, 9), R("a", 1, 0, 2), R("b", 0, 0, 5)]],
            id="one range per partition: one round",
        ),
        pytest.param(
            [R("a", 0, 10, 12), R("a", 1, 0, 4), R("a", 0, 0, 3), R("a", 0, 20, 21)],
            [[R("a", 0, 0, 3), R("a", 1, 0, 4)], [R("a", 0, 10, 12)], [R("a", 0, 20, 21)]],
            id="a partition's stretches in offset order, one per round",
        ),
    ],
)
def test_rounds(ranges: list[OffsetRange], expected: list[list[OffsetRange]]) -> None:
    assert rounds(ranges) == expected


def batch_of(rows: list[tuple[str, int, int]]) -> pa.RecordBatch:
    topics, partitions, offsets = zip(*rows, strict=True) if rows else ((), (), ())
    n = len(rows)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([b"k"] * n, pa.binary()),
            pa.array([b"v"] * n, pa.binary()),
            pa.array(topics, pa.string()),
            pa.array(partitions, pa.int32()),
            pa.array(offsets, pa.int64()),
            pa.array([T0] * n, ARROW_SCHEMA.field("timestamp").type),
            pa.array([0] * n, pa.int32()),
        ],
        schema=ARROW_SCHEMA,
    )


def test_rows_are_counted_against_their_own_range() -> None:
    ranges = [R("a", 0, 0, 5), R("b", 1, 3, 5), R("b", 1, 10, 13), R("c", 0, 0, 9)]
    per_range = [0] * len(ranges)
    rows = [("a", 0, o) for o in range(5)] + [("b", 1, o) for o in (3, 4, 10, 11, 12)]
    _count_rows(ranges, batch_of(rows), per_range)
    _count_rows(ranges, batch_of([("a", 0, 4), ("c", 0, 8)]), per_range)
    assert per_range == [6, 2, 3, 1]


def test_a_single_range_counts_every_row() -> None:
    per_range = [0]
    _count_rows([R("a", 0, 0, 5)], batch_of([("a", 0, 1), ("a", 0, 2)]), per_range)
    assert per_range == [2]


# --- the packed fetch loop over fakes ---------------------------------------------------------
#
# A packed task holds a range of partition 0 (A) and one of partition 1 (B); the Python path
# reads them through tests/unit/fakes.py's FakeGroupConsumer (one queue for both partitions),
# the C path's loop through a scripted NativeConsumer. The fetch loop's clock only moves when a
# fake waits.

TOPIC = "orders"
A, B = (TOPIC, 0), (TOPIC, 1)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(task_consumer, "time", fake)
    monkeypatch.setattr(loss, "time", fake)
    return fake


def read_packed(
    client: Any,
    ranges: list[OffsetRange],
    *,
    poll_timeout_ms: int = 10_000,
    fail: bool = True,
    on_skip: Any = None,
) -> tuple[list[tuple[int, int]], BaseException | None]:
    """The (partition, offset) of the rows ``ranges`` read, and what the read raised."""
    pc = GroupConsumer(client)
    pc.record_bytes = 64.0  # as a consumer that has read these small records before
    rows: list[tuple[int, int]] = []
    try:
        for batch in fetch_ranges(
            pc, ranges, poll_timeout_ms=poll_timeout_ms, fail_on_data_loss=fail,
            batch_size=1000, include_headers=False, on_skip=on_skip,
        ):  # fmt: skip
            columns = batch.column("partition").to_pylist(), batch.column("offset").to_pylist()
            rows += zip(*columns, strict=True)
    except Exception as exc:  # noqa: BLE001 - the test inspects it
        return sorted(rows), exc
    return sorted(rows), None


def test_a_busy_partition_whose_range_is_done_does_not_keep_a_stalled_one_waiting(
    clock: FakeClock,
) -> None:
    """A's leader answers no fetch; B's range is done, but B's leader is healthy and B keeps
    receiving records, which librdkafka keeps fetching. Those are no progress of the task:
    it fails after pollTimeoutMs, naming A (it used to wait for ever)."""
    log_b = FakeLog.plain(5)
    group = FakeGroupConsumer({A: FakeLog.plain(10), B: log_b}, clock=clock, max_calls=500)
    group.parts[A].paused = True
    group.before_consume = lambda: log_b.append_layout("D")  # a record per read, always

    rows, exc = read_packed(group, [R(*A, 0, 10), R(*B, 0, 5)], poll_timeout_ms=1000)

    assert rows == [(1, o) for o in range(5)]
    assert isinstance(exc, FetchTimeoutError), exc
    assert "offset 0 of orders-0" in str(exc)
    assert "kafkaConsumer.pollTimeoutMs" in str(exc)
    assert 1.0 <= sum(group.waits) <= 1.0 + 2 * CONSUME_SLICE_S


class ScriptedMany(native.NativeConsumer):
    """A fast-path consumer whose ``consume_many`` answers from ``answer(index, bounds)``, each
    call a slice of waiting on the clock."""

    def __init__(self, clock: FakeClock, answer: Any) -> None:
        self.clock = clock
        self.answer = answer
        self.assigned: list[list[tuple[str, int, int]]] = []
        self.calls = 0

    def assign_many(self, partitions: list[tuple[str, int, int]]) -> None:
        self.assigned.append(list(partitions))

    def consume_many(
        self,
        index: dict[tuple[str, int], int],
        bounds: bytes,
        topics: pa.Array,
        partitions: pa.Array,
        n: int,
        timeout_s: float,
        headers: bool = False,
        max_bytes: int = 0,
    ) -> Any:
        self.calls += 1
        if self.calls > 500:
            raise AssertionError("runaway fetch loop")
        self.clock.advance(timeout_s)
        return self.answer(index, array("q", bounds))

    def get_watermark_offsets(
        self, partition: Any, timeout: float = 5.0, cached: bool = False
    ) -> tuple[int, int]:
        return (0, 10)

    def close(self) -> None:
        pass


def test_the_c_loop_s_news_of_a_done_range_is_no_progress_either(clock: FakeClock) -> None:
    """The same on the fast path: every read brings news of B only (records past its range),
    none of A."""
    last_b = iter(range(5, 1_000))

    def answer(index: dict[tuple[str, int], int], bounds: array[int]) -> native.NativeManyBatch:
        b = index[B]
        if bounds[2 * b] < bounds[2 * b + 1]:  # B's range not done yet: its records, and one past
            rows = batch_of([(TOPIC, 1, o) for o in range(5)])
            return native.NativeManyBatch(rows, [(b, 5, True, None)], None)
        return native.NativeManyBatch(None, [(b, next(last_b), True, None)], None)

    consumer = ScriptedMany(clock, answer)
    rows, exc = read_packed(consumer, [R(*A, 0, 10), R(*B, 0, 5)], poll_timeout_ms=1000)

    assert rows == [(1, o) for o in range(5)]
    assert isinstance(exc, FetchTimeoutError), exc
    assert "offset 0 of orders-0" in str(exc)
    assert consumer.calls <= 1000 / 1000 / CONSUME_SLICE_S + 3


@pytest.mark.parametrize("lagging", [1, loss.SHORT_LOG_ANSWERS - 1])
def test_a_packed_range_whose_log_end_lags_while_a_leader_moves_loses_nothing(
    clock: FakeClock, lagging: int
) -> None:
    """A's range is [0, 10); the fetcher meets an EOF at 6 and A's new leader says 6 too, for a
    while, then 10: every record of both ranges is read, nothing is judged lost."""
    group = FakeGroupConsumer({A: FakeLog.plain(6), B: FakeLog.plain(5)}, clock=clock)
    group.parts[A] = leader = CatchingUpLeader(
        FakeLog.plain(6), behind=4, lagging=lagging, topic=A[0], partition=A[1]
    )
    skipped: list[Any] = []

    rows, exc = read_packed(
        group, [R(*A, 0, 10), R(*B, 0, 5)], on_skip=lambda *a: skipped.append(a)
    )

    assert exc is None
    assert rows == [(0, o) for o in range(10)] + [(1, o) for o in range(5)]
    assert skipped == []
    assert leader.watermark_calls == lagging


@pytest.mark.parametrize("fail", [True, False])
def test_a_packed_range_whose_log_stays_short_is_judged_after_the_answers_agree(
    clock: FakeClock, fail: bool
) -> None:
    group = FakeGroupConsumer({A: FakeLog.plain(6), B: FakeLog.plain(5)}, clock=clock)
    skipped: list[Any] = []
    start = clock.now

    rows, exc = read_packed(
        group, [R(*A, 0, 10), R(*B, 0, 5)], fail=fail, on_skip=lambda *a: skipped.append(a)
    )

    assert rows == [(0, o) for o in range(6)] + [(1, o) for o in range(5)]
    if fail:
        assert isinstance(exc, DataLossError)
        assert "log now ends at 6" in str(exc)
    else:
        assert exc is None
        assert skipped == [(R(*A, 0, 10), 6, 10)]
    assert group.watermark_calls == loss.SHORT_LOG_ANSWERS
    assert clock.now - start >= (loss.SHORT_LOG_ANSWERS - 1) * loss.SHORT_LOG_RETRY_S
