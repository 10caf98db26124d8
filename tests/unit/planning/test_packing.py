"""Packing offset ranges into tasks (kafka_direct.planning.packing): table cases, then properties
(every range in exactly one task, never merged or split, deterministic, bounds kept)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_direct.offsets import OffsetRange
from kafka_direct.planning.packing import PackingSettings, pack_ranges, task_count
from kafka_direct.planning.splits import split_ranges


def R(tp: str, a: int, b: int) -> OffsetRange:
    topic, _, partition = tp.rpartition("-")
    return OffsetRange(topic, int(partition), a, b)


def shape(tasks: list[tuple[OffsetRange, ...]]) -> list[list[str]]:
    return [[f"{r.topic}-{r.partition}:{r.from_offset}-{r.until_offset}" for r in t] for t in tasks]


def small(n: int, records: int = 21, topic: str = "t") -> list[OffsetRange]:
    return [OffsetRange(topic, p, 0, records) for p in range(n)]


@pytest.mark.parametrize(
    ("ranges", "packing", "expected"),
    [
        pytest.param([], PackingSettings(), [], id="nothing to read"),
        pytest.param(
            [R("t-0", 5, 5), R("t-1", 0, 3)],
            PackingSettings(parallelism=4, open_cost=10),
            [["t-1:0-3"]],
            id="empty ranges get no task",
        ),
        pytest.param(
            # 4 x (21 + 1000) = 4084; two cores: 2042 each.
            small(4),
            PackingSettings(parallelism=2),
            [["t-0:0-21", "t-1:0-21"], ["t-2:0-21", "t-3:0-21"]],
            id="small ranges: one task per core",
        ),
        pytest.param(
            # Tiny reads are not spread thinner than one open cost per task.
            small(3, records=1),
            PackingSettings(parallelism=8, open_cost=10),
            [["t-0:0-1"], ["t-1:0-1"], ["t-2:0-1"]],
            id="never fewer than one range per task",
        ),
        pytest.param(
            [R("a-0", 0, 10), R("b-0", 0, 10), R("a-1", 0, 10), R("b-1", 0, 10)],
            PackingSettings(parallelism=2, open_cost=1),
            [["a-0:0-10", "a-1:0-10"], ["b-0:0-10", "b-1:0-10"]],
            id="mixed topics, in topic-partition order",
        ),
        pytest.param(
            [R("t-0", 0, 900), R("t-1", 0, 50), R("t-2", 0, 50)],
            PackingSettings(max_records_per_task=100, parallelism=1, open_cost=1),
            [["t-0:0-900"], ["t-1:0-50", "t-2:0-50"]],
            id="a range over the target is its own task, never split here",
        ),
        pytest.param(
            [R("t-0", 0, 40), R("t-1", 0, 40), R("t-2", 0, 40), R("t-3", 0, 40)],
            PackingSettings(max_records_per_task=100, parallelism=1, open_cost=1),
            [["t-0:0-40", "t-1:0-40"], ["t-2:0-40", "t-3:0-40"]],
            id="maxRecordsPerTask bounds a task",
        ),
        pytest.param(
            small(6, records=10),
            PackingSettings(parallelism=1, open_cost=1, max_records_per_partition=25),
            [["t-0:0-10", "t-1:0-10"], ["t-2:0-10", "t-3:0-10"], ["t-4:0-10", "t-5:0-10"]],
            id="maxRecordsPerPartition bounds a task's records",
        ),
        pytest.param(
            small(6, records=10),
            PackingSettings(parallelism=1, open_cost=1, min_tasks=4),
            [["t-0:0-10"], ["t-1:0-10", "t-2:0-10"], ["t-3:0-10"], ["t-4:0-10", "t-5:0-10"]],
            id="minPartitions: at least that many tasks",
        ),
        pytest.param(
            small(2, records=10),
            PackingSettings(parallelism=1, open_cost=1, min_tasks=5),
            [["t-0:0-10"], ["t-1:0-10"]],
            id="minPartitions above the range count: one range per task",
        ),
        pytest.param(
            # A partition narrowed to two stretches (a gap between): two ranges, never merged.
            [R("t-0", 0, 3), R("t-0", 10, 12), R("t-1", 0, 2)],
            PackingSettings(parallelism=1, open_cost=1),
            [["t-0:0-3", "t-0:10-12", "t-1:0-2"]],
            id="two ranges of one partition stay two ranges",
        ),
    ],
)
def test_pack_ranges(
    ranges: list[OffsetRange], packing: PackingSettings, expected: list[list[str]]
) -> None:
    assert shape(pack_ranges(ranges, packing)) == expected


def test_a_thousand_small_partitions_make_one_task_per_core() -> None:
    tasks = pack_ranges(small(1000), PackingSettings(parallelism=2))
    assert [len(t) for t in tasks] == [500, 500]


def test_large_data_is_bounded_by_max_records_per_task_in_whole_rounds() -> None:
    # 2,000,000 records in 10 partitions, 2 cores: 1,000,000 records per task would be 3 tasks
    # (the open costs tip it over); 3 tasks on 2 cores take as long as 4, so 4 balanced ones.
    tasks = pack_ranges(small(10, records=200_000), PackingSettings(parallelism=2))
    assert [len(t) for t in tasks] == [2, 3, 2, 3]
    assert all(sum(r.count() for r in t) <= 1_000_000 for t in tasks)


def test_three_thousand_small_partitions() -> None:
    # 3,000 x 21 records: the open costs make it 4 tasks on 2 cores, 750 ranges each.
    tasks = pack_ranges(small(3000), PackingSettings(parallelism=2))
    assert [len(t) for t in tasks] == [750] * 4


def test_one_task_per_range_when_max_records_per_task_is_one() -> None:
    tasks = pack_ranges(small(5), PackingSettings(max_records_per_task=1, parallelism=1))
    assert [len(t) for t in tasks] == [1] * 5


@pytest.mark.parametrize(
    ("name", "value"),
    [("max_records_per_task", 0), ("parallelism", 0), ("min_tasks", 0), ("open_cost", 0)],
)
def test_settings_refuse_non_positive_values(name: str, value: int) -> None:
    with pytest.raises(ValueError, match=name):
        PackingSettings(**{name: value})  # type: ignore[arg-type]


# --- properties ---------------------------------------------------------------------------------

topics = st.sampled_from(["a", "b", "orders"])


@st.composite
def range_sets(draw: st.DrawFn) -> list[OffsetRange]:
    """Ranges as planners make them: per topic-partition, one or more stretches in order, with
    gaps between them (pushdown narrowing), some empty."""
    out: list[OffsetRange] = []
    for topic in sorted(set(draw(st.lists(topics, min_size=1, max_size=3)))):
        for partition in range(draw(st.integers(1, 12))):
            start = draw(st.integers(0, 50))
            for _ in range(draw(st.integers(1, 3))):
                size = draw(st.integers(0, 3000))
                out.append(OffsetRange(topic, partition, start, start + size))
                start += size + draw(st.integers(0, 20))
    return out


packings = st.builds(
    PackingSettings,
    max_records_per_task=st.integers(1, 20_000),
    parallelism=st.integers(1, 16),
    min_tasks=st.none() | st.integers(1, 40),
    max_records_per_partition=st.none() | st.integers(1, 5000),
    open_cost=st.integers(1, 2000),
)


def offsets(ranges: list[OffsetRange]) -> dict[tuple[str, int], list[list[int]]]:
    """The set of offsets the ranges cover, as each partition's merged spans: equal exactly when
    the offset sets are, without building a set of every offset (most of this test's time)."""
    spans: dict[tuple[str, int], list[list[int]]] = {}
    for r in sorted(ranges, key=lambda r: (r.topic, r.partition, r.from_offset)):
        if r.until_offset <= r.from_offset:
            continue
        merged = spans.setdefault((r.topic, r.partition), [])
        if merged and r.from_offset <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], r.until_offset)
        else:
            merged.append([r.from_offset, r.until_offset])
    return spans


@settings(max_examples=300, deadline=None)
@given(range_sets(), packings, st.randoms(use_true_random=False))
def test_every_range_in_exactly_one_task(
    ranges: list[OffsetRange], packing: PackingSettings, rnd: random.Random
) -> None:
    # As the readers use it: split first (minPartitions, maxRecordsPerPartition), then pack.
    split = split_ranges(
        ranges,
        min_partitions=packing.min_tasks,
        max_records_per_partition=packing.max_records_per_partition,
    )
    shuffled = list(split)
    rnd.shuffle(shuffled)
    tasks = pack_ranges(shuffled, packing)
    packed = [r for t in tasks for r in t]
    # Each split range exactly once, whole: never merged across a gap, never cut.
    assert sorted(packed) == sorted(split)
    # So the offsets read are exactly those of the input: nothing from a gap, nothing twice.
    assert offsets(packed) == offsets(ranges)
    assert sum(r.count() for r in packed) == sum(r.count() for r in ranges)
    # Deterministic: the same ranges in any order give the same tasks.
    assert pack_ranges(split, packing) == tasks
    assert all(t and list(t) == sorted(t) for t in tasks)
    if packing.max_records_per_partition is not None:
        assert all(sum(r.count() for r in t) <= packing.max_records_per_partition for t in tasks)
    if packing.min_tasks is not None:
        assert len(tasks) >= min(packing.min_tasks, len(split))
    if not split:
        assert tasks == []
        return
    k = task_count(split, packing)
    total = sum(r.count() + packing.open_cost for r in split)
    for t in tasks:
        # Balanced: a task is at most one range's cost over its share.
        cost = sum(r.count() + packing.open_cost for r in t)
        assert cost * k <= total + k * max(r.count() + packing.open_cost for r in t)
    if packing.max_records_per_partition is None and packing.min_tasks is None:
        assert len(tasks) <= k
        if all((r.count() + packing.open_cost) * k <= total for r in split):
            # No range bigger than a task's share: exactly k tasks, every core used.
            assert len(tasks) == k
