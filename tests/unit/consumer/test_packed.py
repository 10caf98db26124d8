"""Pure parts of packed reads: the rounds a task's ranges are read in, and the per-range row
counts of the task statistics (kafka_direct.consumer.packed, kafka_direct.consumer.read)."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from kafka_direct.consumer.packed import rounds
from kafka_direct.consumer.read import _count_rows
from kafka_direct.consumer.rows import ARROW_SCHEMA
from kafka_direct.offsets import OffsetRange

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
