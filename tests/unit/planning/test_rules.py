"""Unit tests for kafka_direct.planning: table-style, no broker, no Spark.

Split cases marked "Spark:" are ported from Spark's KafkaOffsetRangeCalculatorSuite; rate-limit and
gate cases marked "Spark:" replay batches of KafkaMicroBatchSourceSuite's maxOffsetsPerTrigger,
minOffsetsPerTrigger and compositeReadLimit tests.
"""

from __future__ import annotations

import itertools
import logging
import math
import random
from fractions import Fraction
from typing import Literal

import pytest

from kafka_direct.errors import ConfigurationError, DataLossError
from kafka_direct.offsets import OffsetRange, TopicPartition
from kafka_direct.planning.data_loss import (
    DataLoss,
    LossLedger,
    apply_data_loss_policy,
    detect_data_loss,
)
from kafka_direct.planning.rates import min_offsets_gate, rate_limit
from kafka_direct.planning.resolve import resolve_new_partitions, resolve_timestamp_offsets
from kafka_direct.planning.splits import split_ranges

TP1 = TopicPartition("t1", 1)
TP2 = TopicPartition("t2", 1)
TP3 = TopicPartition("t3", 1)
A0 = TopicPartition("a", 0)
A1 = TopicPartition("a", 1)
A2 = TopicPartition("a", 2)
B0 = TopicPartition("b", 0)


def r(tp: TopicPartition, start: int, until: int) -> OffsetRange:
    return OffsetRange(tp.topic, tp.partition, start, until)


# --- split_ranges ---------------------------------------------------------------------------------

SPLIT_CASES = [
    # (min_partitions, max_records_per_partition, input, expected)
    pytest.param(None, None, [r(TP1, 1, 2)], [r(TP1, 1, 2)], id="Spark: no options, N to N"),
    pytest.param(
        None, None, [r(TP1, 1, 2), r(TP2, 1, 1)], [r(TP1, 1, 2)], id="Spark: empty ranges ignored"
    ),
    pytest.param(
        3,
        None,
        [r(TP1, 1, 2), r(TP2, 1, 2), r(TP3, 1, 2)],
        [r(TP1, 1, 2), r(TP2, 1, 2), r(TP3, 1, 2)],
        id="Spark: min=3, N TopicPartitions to N ranges",
    ),
    pytest.param(
        4,
        None,
        [r(TP1, 1, 5)],
        [r(TP1, 1, 2), r(TP1, 2, 3), r(TP1, 3, 4), r(TP1, 4, 5)],
        id="Spark: min=4, 1 TopicPartition to N ranges",
    ),
    pytest.param(
        4,
        None,
        [r(TP1, 1, 5), r(TP2, 1, 21)],
        [r(TP1, 1, 5), r(TP2, 1, 7), r(TP2, 7, 14), r(TP2, 14, 21)],
        id="Spark: min=4, N skewed TopicPartitions to M ranges",
    ),
    pytest.param(
        4,
        None,
        [r(TP1, 1, 1), r(TP2, 1, 21)],
        [r(TP2, 1, 6), r(TP2, 6, 11), r(TP2, 11, 16), r(TP2, 16, 21)],
        id="Spark SPARK-30656: ignore empty ranges and split the rest",
    ),
    pytest.param(
        4,
        None,
        [r(TP1, 1, 2), r(TP2, 1, 1001)],
        [r(TP1, 1, 2), r(TP2, 1, 334), r(TP2, 334, 667), r(TP2, 667, 1001)],
        id="Spark SPARK-30656: very skewed",
    ),
    pytest.param(
        1,
        None,
        [r(TP1, 1, 5), r(TP2, 1, 21)],
        [r(TP1, 1, 5), r(TP2, 1, 21)],
        id="Spark SPARK-30656: min below number of partitions",
    ),
    pytest.param(
        3,
        None,
        [r(TP1, 1, 11)],
        [r(TP1, 1, 4), r(TP1, 4, 7), r(TP1, 7, 11)],
        id="Spark: range inexact multiple of min",
    ),
    pytest.param(
        4,
        None,
        [r(TP1, 1, 5), r(TP2, 1, 21), r(TP3, 1, 1)],
        [r(TP1, 1, 5), r(TP2, 1, 7), r(TP2, 7, 14), r(TP2, 14, 21)],
        id="Spark: min=4, empty ranges ignored",
    ),
    pytest.param(
        6,
        None,
        [r(TP1, 0, 10), r(TP2, 0, 10), r(TP3, 0, 1)],
        [
            *[r(TP1, 0, 3), r(TP1, 3, 6), r(TP1, 6, 10)],
            *[r(TP2, 0, 3), r(TP2, 3, 6), r(TP2, 6, 10)],
            r(TP3, 0, 1),
        ],
        id="Spark SPARK-28489: never drop offsets",
    ),
    pytest.param(
        9,
        None,
        [r(TP1, 0, 10000), r(TP2, 0, 15000), r(TP3, 0, 20000)],
        [r(TP1, s, s + 5000) for s in range(0, 10000, 5000)]
        + [r(TP2, s, s + 5000) for s in range(0, 15000, 5000)]
        + [r(TP3, s, s + 5000) for s in range(0, 20000, 5000)],
        id="Spark SPARK-36576: 0 small unsplit and 3 large split ranges",
    ),
    pytest.param(
        6,
        None,
        [r(TP1, 0, 500), r(TP2, 0, 12000), r(TP3, 0, 15001)],
        [
            r(TP1, 0, 500),
            *[r(TP2, 0, 6000), r(TP2, 6000, 12000)],
            *[r(TP3, 0, 5000), r(TP3, 5000, 10000), r(TP3, 10000, 15001)],
        ],
        id="Spark SPARK-36576: 1 small unsplit and 2 large split ranges",
    ),
    pytest.param(
        6,
        None,
        [r(TP1, 0, 1), r(TP2, 0, 1), r(TP3, 0, 10000)],
        [r(TP1, 0, 1), r(TP2, 0, 1)] + [r(TP3, s, s + 2500) for s in range(0, 10000, 2500)],
        id="Spark SPARK-36576: 2 small unsplit and 1 large split range",
    ),
    pytest.param(None, 4, [r(TP1, 1, 5)], [r(TP1, 1, 5)], id="Spark SPARK-49259: size == max"),
    pytest.param(None, 4, [r(TP1, 1, 2)], [r(TP1, 1, 2)], id="Spark SPARK-49259: size < max"),
    pytest.param(
        None, 4, [r(TP1, 1, 6)], [r(TP1, 1, 3), r(TP1, 3, 6)], id="Spark SPARK-49259: size > max"
    ),
    pytest.param(
        None,
        20,
        [r(TP1, 1, 40), r(TP2, 1, 50), r(TP3, 1, 60)],
        [
            *[r(TP1, 1, 20), r(TP1, 20, 40)],
            *[r(TP2, 1, 17), r(TP2, 17, 33), r(TP2, 33, 50)],
            *[r(TP3, 1, 20), r(TP3, 20, 40), r(TP3, 40, 60)],
        ],
        id="Spark SPARK-49259: N TopicPartitions to N ranges",
    ),
    pytest.param(
        1,
        20,
        [r(TP1, 1, 40)],
        [r(TP1, 1, 20), r(TP1, 20, 40)],
        id="Spark SPARK-49259: low min with max",
    ),
    pytest.param(
        4,
        20,
        [r(TP1, 1, 40)],
        [r(TP1, 1, 10), r(TP1, 10, 20), r(TP1, 20, 30), r(TP1, 30, 40)],
        id="Spark SPARK-49259: high min with max",
    ),
    pytest.param(
        None,
        None,
        [r(TP3, 5, 9), r(TP1, 0, 3), r(TP2, 7, 8)],
        [r(TP1, 0, 3), r(TP2, 7, 8), r(TP3, 5, 9)],
        id="output sorted by topic-partition",
    ),
    pytest.param(
        2,
        None,
        [r(TP1, 0, 2)],
        [r(TP1, 0, 1), r(TP1, 1, 2)],
        id="half rounds up like Java Math.round",
    ),
    pytest.param(4, 10, [], [], id="nothing to read"),
]


@pytest.mark.parametrize(("min_partitions", "max_records", "ranges", "expected"), SPLIT_CASES)
def test_split_ranges(
    min_partitions: int | None,
    max_records: int | None,
    ranges: list[OffsetRange],
    expected: list[OffsetRange],
) -> None:
    got = split_ranges(ranges, min_partitions=min_partitions, max_records_per_partition=max_records)
    assert got == expected


@pytest.mark.parametrize(
    ("min_partitions", "max_records"),
    [pytest.param(0, None, id="min=0"), pytest.param(None, 0, id="max=0")],
)
def test_split_ranges_rejects_non_positive_options(
    min_partitions: int | None, max_records: int | None
) -> None:
    with pytest.raises(ValueError, match="must be > 0"):
        split_ranges(
            [r(TP1, 0, 10)], min_partitions=min_partitions, max_records_per_partition=max_records
        )


@pytest.mark.parametrize("seed", range(300))
def test_split_ranges_covers_input_exactly(seed: int) -> None:
    rng = random.Random(seed)
    tps = rng.sample([TopicPartition(t, p) for t in "abcd" for p in range(8)], rng.randint(0, 12))
    ranges = []
    for tp in tps:
        start = rng.choice([0, rng.randint(0, 10**12)])
        size = rng.choice([0, 1, 2, rng.randint(0, 50), rng.randint(0, 10**6)])
        ranges.append(r(tp, start, start + size))
    min_partitions = rng.choice([None, rng.randint(1, 64)])
    max_records = rng.choice([None, rng.randint(1, 5), rng.randint(1, 10**5)])
    if max_records is not None:  # keep it to a few thousand pieces, so the test stays fast
        max_records = max(max_records, sum(x.count() for x in ranges) // 2000 + 1)

    got = split_ranges(ranges, min_partitions=min_partitions, max_records_per_partition=max_records)

    assert got == sorted(got)
    assert all(part.count() > 0 for part in got)
    if max_records is not None:
        assert all(part.count() <= max_records for part in got)
    for original in ranges:
        pieces = [p for p in got if p.topic_partition == original.topic_partition]
        if original.count() == 0:
            assert pieces == []
            continue
        assert pieces[0].from_offset == original.from_offset
        assert pieces[-1].until_offset == original.until_offset
        for before, after in itertools.pairwise(pieces):
            assert before.until_offset == after.from_offset  # no gap, no overlap
    shuffled = list(ranges)
    rng.shuffle(shuffled)
    again = split_ranges(
        shuffled, min_partitions=min_partitions, max_records_per_partition=max_records
    )
    assert again == got


# --- rate_limit -----------------------------------------------------------------------------------

RATE_CASES = [
    # (start, latest, max_total, max_per_partition, expected end)
    pytest.param(
        {A0: 0, A1: 5}, {A0: 10, A1: 5}, None, None, {A0: 10, A1: 5}, id="no limit: read to latest"
    ),
    pytest.param(
        {A0: 100, A1: 0}, {A0: 5, A1: 7}, None, None, {A0: 100, A1: 7}, id="backwards keeps start"
    ),
    pytest.param(
        {A0: 3, A1: 0},
        {A1: 7, B0: 9},
        None,
        None,
        {A0: 3, A1: 7},
        id="start-only kept, new ignored",
    ),
    pytest.param(
        {A0: 0, A1: 0, A2: 0},
        {A0: 101, A1: 11, A2: 1},
        10,
        None,
        {A0: 8, A1: 1, A2: 1},
        id="Spark maxOffsetsPerTrigger batch 1: 8 from biggest, 1 from middle, 1 from smallest",
    ),
    pytest.param(
        {A0: 8, A1: 1, A2: 1},
        {A0: 101, A1: 11, A2: 1},
        10,
        None,
        {A0: 17, A1: 2, A2: 1},
        id="Spark maxOffsetsPerTrigger batch 2",
    ),
    pytest.param(
        {A0: 17, A1: 2, A2: 1},
        {A0: 101, A1: 11, A2: 1},
        10,
        None,
        {A0: 26, A1: 3, A2: 1},
        id="Spark maxOffsetsPerTrigger batch 3",
    ),
    pytest.param(
        {A0: 26, A1: 3, A2: 1},
        {A0: 101, A1: 11, A2: 1},
        10,
        None,
        {A0: 35, A1: 4, A2: 1},
        id="Spark maxOffsetsPerTrigger batch 4",
    ),
    pytest.param(
        {A0: 0, A1: 0, A2: 0},
        {A0: 21, A1: 11, A2: 1},
        20,
        None,
        {A0: 12, A1: 6, A2: 1},
        id="Spark compositeReadLimit batch 1: floors to 12, 6, 1 (19, not 20)",
    ),
    pytest.param(
        {A0: 12, A1: 6, A2: 1},
        {A0: 29, A1: 21, A2: 2},
        20,
        None,
        {A0: 22, A1: 15, A2: 2},
        id="Spark compositeReadLimit batch 3: 10, 9, 1",
    ),
    pytest.param(
        {A0: 0, A1: 0}, {A0: 100, A1: 300}, 100, None, {A0: 25, A1: 75}, id="exact proportion"
    ),
    pytest.param(
        {A0: 0, A1: 0, A2: 0},
        {A0: 1000, A1: 1000, A2: 1000},
        100,
        None,
        {A0: 33, A1: 33, A2: 33},
        id="Spark floors every share: 99 of 100",
    ),
    pytest.param(
        {A0: 0, A1: 0}, {A0: 1, A1: 1_000_000}, 100, None, {A0: 1, A1: 99}, id="1 next to 1M"
    ),
    pytest.param(
        {A0: 0, A1: 0, A2: 0},
        {A0: 1000, A1: 1000, A2: 1000},
        1,
        None,
        {A0: 1, A1: 1, A2: 1},
        id="Spark lifts shares below one record to one: 3 of 1",
    ),
    pytest.param(
        {A0: 0, A1: 0}, {A0: 10, A1: 20}, 0, None, {A0: 0, A1: 0}, id="max_total=0 reads nothing"
    ),
    pytest.param(
        {A0: 5}, {A0: 10}, 2**63 - 1, None, {A0: 10}, id="Long.MaxValue does not overflow"
    ),
    pytest.param(
        {A0: 0, A1: 0}, {A0: 10, A1: 3}, None, 5, {A0: 5, A1: 3}, id="per-partition cap alone"
    ),
    pytest.param(
        {A0: 0, A1: 0, A2: 0},
        {A0: 1000, A1: 100, A2: 100},
        150,
        60,
        {A0: 60, A1: 45, A2: 45},
        id="capped partition's share goes to the others",
    ),
    pytest.param(
        {A0: 0, A1: 0, A2: 0},
        {A0: 1000, A1: 1000, A2: 10},
        300,
        120,
        {A0: 120, A1: 120, A2: 10},
        id="caps below max_total: total is the capped backlog",
    ),
    pytest.param({A0: 0, A1: 0}, {A0: 10, A1: 10}, 5, 0, {A0: 0, A1: 0}, id="cap 0 reads nothing"),
]


@pytest.mark.parametrize(("start", "latest", "max_total", "max_per", "expected"), RATE_CASES)
def test_rate_limit(
    start: dict[TopicPartition, int],
    latest: dict[TopicPartition, int],
    max_total: int | None,
    max_per: int | None,
    expected: dict[TopicPartition, int],
) -> None:
    assert rate_limit(start, latest, max_total=max_total, max_per_partition=max_per) == expected


@pytest.mark.parametrize(
    ("max_total", "max_per"), [pytest.param(-1, None, id="total"), pytest.param(None, -1, id="cap")]
)
def test_rate_limit_rejects_negative_limits(max_total: int | None, max_per: int | None) -> None:
    with pytest.raises(ValueError, match="must be >= 0"):
        rate_limit({A0: 0}, {A0: 1}, max_total=max_total, max_per_partition=max_per)


@pytest.mark.parametrize("seed", range(300))
def test_rate_limit_properties(seed: int) -> None:
    rng = random.Random(seed)
    tps = [TopicPartition(t, p) for t in "xyz" for p in range(rng.randint(1, 6))]
    start = {tp: rng.randint(0, 10**9) for tp in tps}
    latest = {
        tp: off + rng.choice([0, 1, 2, rng.randint(0, 100), rng.randint(0, 10**6), -5])
        for tp, off in start.items()
    }
    max_total = rng.choice([None, rng.randint(0, 20), rng.randint(0, 10**5)])
    max_per = rng.choice([None, rng.randint(1, 10), rng.randint(1, 10**4)])

    end = rate_limit(start, latest, max_total=max_total, max_per_partition=max_per)

    backlog = {tp: max(0, latest[tp] - start[tp]) for tp in tps}
    cap = {tp: lag if max_per is None else min(lag, max_per) for tp, lag in backlog.items()}
    take = {tp: end[tp] - start[tp] for tp in tps}
    assert all(0 <= take[tp] <= cap[tp] for tp in tps)
    waiting = [tp for tp in tps if cap[tp] > 0]
    if max_total is not None and max_per is None:
        # Spark's rateLimit: every share floored, or lifted to one record below one.
        total = sum(backlog.values())
        for tp in waiting:
            exact = Fraction(max_total * backlog[tp], total)
            assert take[tp] == min(backlog[tp], max(math.floor(exact), 1 if exact > 0 else 0))
    else:
        expected_total = (
            sum(cap.values()) if max_total is None else min(max_total, sum(cap.values()))
        )
        assert sum(take.values()) == expected_total
        if max_total is not None and max_total >= len(waiting):
            assert all(take[tp] >= 1 for tp in waiting), "a partition with backlog was starved"
    reordered = dict(sorted(start.items(), reverse=True))
    assert rate_limit(reordered, latest, max_total=max_total, max_per_partition=max_per) == end


# --- min_offsets_gate -----------------------------------------------------------------------------

GATE_CASES = [
    # (start, latest, min_total, delay, last, now, expected)
    pytest.param({A0: 0}, {A0: 0}, 15, 5000, 0, 10_000, True, id="first batch always runs"),
    pytest.param(
        {A0: 10, A1: 5, A2: 1},
        {A0: 10, A1: 11, A2: 1},
        15,
        5000,
        10_000,
        10_100,
        False,
        id="Spark minOffsetsPerTrigger: 6 waiting < 15, delay not passed",
    ),
    pytest.param(
        {A0: 10, A1: 5, A2: 1},
        {A0: 21, A1: 11, A2: 2},
        15,
        5000,
        10_000,
        10_200,
        True,
        id="Spark minOffsetsPerTrigger: 18 waiting >= 15",
    ),
    pytest.param(
        {A0: 21, A1: 11},
        {A0: 26, A1: 16},
        15,
        5000,
        10_200,
        15_200,
        True,
        id="Spark maxTriggerDelay: 10 waiting but the delay has passed",
    ),
    pytest.param({A0: 0}, {A0: 14}, 15, 5000, 0, 4_999, False, id="one short, 1 ms early"),
    pytest.param({A0: 0}, {A0: 15}, 15, 5000, 0, 4_999, True, id="exactly min_total"),
    pytest.param({A0: 0}, {A0: 15, A1: 5}, 20, 5000, 0, 1, True, id="new partition counts from 0"),
    pytest.param(
        {A0: 100, A1: 0},
        {A0: 5, A1: 15},
        15,
        5000,
        0,
        1,
        True,
        id="offsets gone backwards count 0, not -95 (differs from Spark)",
    ),
    pytest.param({A0: 0}, {A0: 0}, 0, 5000, 0, 1, True, id="min_total 0 always runs"),
]


@pytest.mark.parametrize(("start", "latest", "min_total", "delay", "last", "now", "ok"), GATE_CASES)
def test_min_offsets_gate(
    start: dict[TopicPartition, int],
    latest: dict[TopicPartition, int],
    min_total: int,
    delay: int,
    last: int,
    now: int,
    ok: bool,
) -> None:
    got = min_offsets_gate(
        start,
        latest,
        min_total=min_total,
        max_trigger_delay_ms=delay,
        last_trigger_ms=last,
        now_ms=now,
    )
    assert got is ok


# --- data loss ------------------------------------------------------------------------------------

DETECT_CASES = [
    # (start, earliest, latest, expected [(tp, kind, expected_offset, available, lost)])
    pytest.param({A0: 5}, {A0: 0}, {A0: 9}, [], id="no loss"),
    pytest.param({A0: 5}, {A0: 5}, {A0: 9}, [], id="earliest == start is no loss"),
    pytest.param({A0: 5}, {}, {A0: 9}, [], id="earliest unknown is not a loss"),
    pytest.param(
        {A0: 5, A1: 3},
        {A0: 0},
        {A0: 9},
        [(A1, "partition_gone", 3, None, None)],
        id="partition gone",
    ),
    pytest.param(
        {A0: 100}, {A0: 0}, {A0: 5}, [(A0, "offset_reset", 100, 5, None)], id="offsets went back"
    ),
    pytest.param(
        {A0: 100},
        {A0: 250},
        {A0: 300},
        [(A0, "offset_out_of_range", 100, 250, 150)],
        id="aged out",
    ),
    pytest.param(
        {B0: 1, A1: 100, A0: 2},
        {A0: 0, A1: 0, B0: 7},
        {A0: 3, A1: 4, B0: 9},
        [(A1, "offset_reset", 100, 4, None), (B0, "offset_out_of_range", 1, 7, 6)],
        id="several, in partition order",
    ),
]


@pytest.mark.parametrize(("start", "earliest", "latest", "expected"), DETECT_CASES)
def test_detect_data_loss(
    start: dict[TopicPartition, int],
    earliest: dict[TopicPartition, int],
    latest: dict[TopicPartition, int],
    expected: list[tuple[TopicPartition, str, int, int | None, int | None]],
) -> None:
    losses = detect_data_loss(start, earliest, latest)
    got = [
        (x.topic_partition, x.kind, x.expected_offset, x.available_offset, x.lost_records())
        for x in losses
    ]
    assert got == expected


@pytest.mark.parametrize(
    ("start", "earliest", "latest", "needle"),
    [
        pytest.param({A0: 3}, {}, {}, "a-0 is gone", id="gone"),
        pytest.param(
            {A0: 100}, {A0: 0}, {A0: 5}, "a-0's offset was changed from 100 to 5", id="reset"
        ),
        pytest.param(
            {A0: 100},
            {A0: 250},
            {A0: 300},
            "offset 100 was expected but the earliest available is 250",
            id="out of range",
        ),
    ],
)
def test_data_loss_detail_names_the_offsets(
    start: dict[TopicPartition, int],
    earliest: dict[TopicPartition, int],
    latest: dict[TopicPartition, int],
    needle: str,
) -> None:
    (loss,) = detect_data_loss(start, earliest, latest)
    assert needle in loss.detail
    assert "data may have been missed" in loss.detail or "no longer in Kafka" in loss.detail


def test_fail_on_data_loss_raises_for_the_first_loss() -> None:
    start = {A0: 100, A1: 100}
    losses = detect_data_loss(start, {A0: 250, A1: 0}, {A0: 300, A1: 5})
    with pytest.raises(DataLossError) as info:
        apply_data_loss_policy(
            losses, start, {A0: 250}, fail_on_data_loss=True, logger=logging.getLogger("t")
        )
    assert (info.value.topic, info.value.partition) == ("a", 0)
    message = str(info.value)
    assert "a-0" in message
    assert "offset 100 was expected but the earliest available is 250" in message
    assert "1 more partition" in message
    assert "failOnDataLoss" in message


def test_fail_on_data_loss_without_losses_returns_start() -> None:
    start = {A0: 1}
    got = apply_data_loss_policy(
        [], start, {}, fail_on_data_loss=True, logger=logging.getLogger("t")
    )
    assert got == start
    assert got is not start


POLICY_CASES = [
    # (start, earliest, latest, expected corrected start, expected warning fragments)
    pytest.param(
        {A0: 100, A1: 7},
        {A0: 250, A1: 0},
        {A0: 300, A1: 9},
        {A0: 250, A1: 7},
        ["offset 100 was expected", "skipping 150 records and continuing from offset 250"],
        id="aged out: skip to earliest",
    ),
    pytest.param(
        {A0: 100},
        {A0: 0},
        {A0: 5},
        {A0: 0},
        ["changed from 100 to 5", "continuing from offset 0"],
        id="recreated: start over at the new earliest (differs from Spark)",
    ),
    pytest.param(
        {A0: 100, B0: 3},
        {B0: 0},
        {B0: 4},
        {B0: 3},
        ["a-0 is gone", "dropping the partition"],
        id="gone: drop the partition",
    ),
]


@pytest.mark.parametrize(("start", "earliest", "latest", "expected", "fragments"), POLICY_CASES)
def test_data_loss_policy_warns_and_corrects(
    caplog: pytest.LogCaptureFixture,
    start: dict[TopicPartition, int],
    earliest: dict[TopicPartition, int],
    latest: dict[TopicPartition, int],
    expected: dict[TopicPartition, int],
    fragments: list[str],
) -> None:
    log = logging.getLogger("kafka_direct.test_planning")
    losses = detect_data_loss(start, earliest, latest)
    with caplog.at_level(logging.WARNING, logger=log.name):
        got = apply_data_loss_policy(losses, start, earliest, fail_on_data_loss=False, logger=log)
    assert got == expected
    warnings = [rec for rec in caplog.records if rec.levelno == logging.WARNING]
    assert len(warnings) == len(losses) == 1
    text = warnings[0].getMessage()
    for fragment in [*fragments, "failOnDataLoss=false"]:
        assert fragment in text


@pytest.mark.parametrize(
    ("loss", "lost"),
    [
        pytest.param(DataLoss(A0, "offset_out_of_range", 10, 25, "d"), 15, id="out of range"),
        pytest.param(DataLoss(A0, "offset_reset", 10, 3, "d"), None, id="reset"),
        pytest.param(DataLoss(A0, "partition_gone", 10, None, "d"), None, id="gone"),
        pytest.param(DataLoss(A0, "added_partition", 0, 7, "d"), 7, id="added, starts at 7"),
    ],
)
def test_lost_records(loss: DataLoss, lost: int | None) -> None:
    assert loss.lost_records() == lost


# --- new partitions -------------------------------------------------------------------------------


def test_new_partitions_start_at_earliest() -> None:
    assert resolve_new_partitions([A1, B0], {A1: 0, B0: 0}) == {A1: 0, B0: 0}


def test_an_estimate_applies_no_policy() -> None:
    """fail_on_data_loss=None: offsets only (the stream's latestOffset); partitions() checks."""
    assert resolve_new_partitions([A1, B0, A2], {A1: 0, B0: 7}) == {A1: 0, B0: 7}


def test_a_new_partition_not_starting_at_0_is_data_loss_as_in_spark(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Spark's getOffsetRangesFromResolvedOffsets: reportDataLoss, so failOnDataLoss decides.
    (The structured source used to only warn; the DStream API already followed the policy.)"""
    with pytest.raises(DataLossError, match="b-0 starts from 7 instead of 0"):
        resolve_new_partitions([A1, B0], {A1: 0, B0: 7}, fail_on_data_loss=True)
    ledger = LossLedger()
    with caplog.at_level(logging.WARNING, logger="kafka_direct.planning.resolve"):
        got = resolve_new_partitions(
            [A1, B0], {A1: 0, B0: 7}, fail_on_data_loss=False, ledger=ledger
        )
        again = resolve_new_partitions(
            [A1, B0], {A1: 0, B0: 7}, fail_on_data_loss=False, ledger=ledger
        )
    assert got == again == {A1: 0, B0: 7}
    assert sum("b-0 starts from 7 instead of 0" in m for m in caplog.messages) == 1


def test_a_new_partition_without_earliest_vanished_and_is_data_loss() -> None:
    with pytest.raises(DataLossError, match="Cannot find earliest offsets of a-1"):
        resolve_new_partitions([A1, A2], {A2: 0}, fail_on_data_loss=True)
    assert resolve_new_partitions([A1, A2], {A2: 0}, fail_on_data_loss=False) == {A2: 0}


def test_a_given_offset_of_a_new_partition_is_checked_against_its_log() -> None:
    """The DStream's given or stored offsets: below the log start is data loss."""
    given = {A1: 2, B0: 9}
    with pytest.raises(DataLossError, match="a-1"):
        resolve_new_partitions(
            [A1, B0], {A1: 5, B0: 0}, given=given, latest={A1: 20, B0: 20}, fail_on_data_loss=True
        )
    got = resolve_new_partitions(
        [A1, B0], {A1: 5, B0: 0}, given=given, latest={A1: 20, B0: 20}, fail_on_data_loss=False
    )
    assert got == {A1: 5, B0: 9}


def test_no_new_partitions() -> None:
    assert resolve_new_partitions([], {A0: 0, A1: 0}, fail_on_data_loss=True) == {}


# --- timestamps -----------------------------------------------------------------------------------

TS = 1_700_000_000_000

TIMESTAMP_CASES = [
    # (found, strategy, expected)
    pytest.param({A0: 42, A1: 0}, "error", {A0: 42, A1: 0}, id="all found (0 is an offset)"),
    pytest.param({A0: 42, A1: None}, "latest", {A0: 42, A1: 90}, id="None falls back to latest"),
    pytest.param({A0: 42, A1: -1}, "latest", {A0: 42, A1: 90}, id="-1 falls back to latest"),
    pytest.param({A0: 42}, "latest", {A0: 42, A1: 90}, id="missing answer falls back to latest"),
]


@pytest.mark.parametrize(("found", "strategy", "expected"), TIMESTAMP_CASES)
def test_resolve_timestamp_offsets(
    found: dict[TopicPartition, int | None],
    strategy: Literal["error", "latest"],
    expected: dict[TopicPartition, int],
) -> None:
    got = resolve_timestamp_offsets(
        {A0: TS, A1: TS},
        found,
        {A0: 50, A1: 90},
        strategy=strategy,
        option="startingOffsetsByTimestamp",
    )
    assert got == expected


@pytest.mark.parametrize("missing", [None, -1], ids=["None", "-1"])
def test_timestamp_without_match_fails_with_strategy_error(missing: int | None) -> None:
    with pytest.raises(ConfigurationError) as info:
        resolve_timestamp_offsets(
            {A0: TS, A1: TS + 1},
            {A0: 42, A1: missing},
            {A0: 50, A1: 90},
            strategy="error",
            option="startingOffsetsByTimestamp",
        )
    message = str(info.value)
    assert info.value.option == "startingOffsetsByTimestamp"
    assert f"no offset matched from request of topic-partition a-1 and timestamp {TS + 1}" in (
        message
    )
    assert "'startingOffsetsByTimestampStrategy' to 'latest'" in message


def test_timestamp_strategy_must_be_known() -> None:
    with pytest.raises(ValueError, match="strategy"):
        resolve_timestamp_offsets(
            {A0: TS},
            {A0: 1},
            {A0: 2},
            strategy="earliest",  # type: ignore[arg-type]
            option="startingOffsetsByTimestamp",
        )
