"""Packing offset ranges into Spark tasks by size, not one task per topic-partition. Pure: plain
library, used by the Spark driver (the batch reader's and the stream reader's ``partitions``).

Spark's JVM connector plans one task per range. A JVM task costs a few milliseconds; a Python
data source task costs tens, so a read of a thousand small partitions was dominated by task
overhead (see docs/performance-partitions.md). Spark's file sources meet the same problem with
many small files and pack them (``spark.sql.files.maxPartitionBytes`` and
``openCostInBytes``); :func:`pack_ranges` does the same with records:

- each range costs its records plus :data:`OPEN_COST_RECORDS`, the cost of one more partition in
  a task, in records (it keeps a task of many tiny ranges from growing without bound);
- a task holds ranges up to ``target = min(maxRecordsPerTask, max(open cost, total / cores))``,
  the formula of Spark's ``FilePartition.maxSplitBytes``: small reads become few tasks, and large
  ones still at least about one task per core;
- ``minPartitions`` and ``maxRecordsPerPartition`` keep their meaning for Spark partitions, that
  is tasks: at least ``minPartitions`` tasks (when there are that many ranges), and no task over
  ``maxRecordsPerPartition`` records. The ranges they split (:mod:`kafka_direct.planning.splits`)
  arrive split; packing never splits or merges a range.

Tasks are filled in ``(topic, partition, from)`` order, next-fit: a task takes the next range
unless that would take it past the target. The result depends only on the ranges and the
settings, so a replayed micro-batch (same ranges) gets the same tasks and the same rows, and a
stream whose partitions stay busy gets the same partitions in the same task batch after batch,
which lets an executor's pooled consumer keep its assignment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kafka_direct.offsets import OffsetRange

__all__ = ["DEFAULT_MAX_RECORDS_PER_TASK", "OPEN_COST_RECORDS", "PackingSettings", "pack_ranges"]

#: Default of the source option ``maxRecordsPerTask`` (why this value: the performance docs).
DEFAULT_MAX_RECORDS_PER_TASK = 1_000_000

#: What one more range in a task costs, in records: a partition's share of the assignment, the
#: fetch and its Arrow batch (measured in the performance docs); Spark's ``openCostInBytes``.
OPEN_COST_RECORDS = 1_000


@dataclass(frozen=True)
class PackingSettings:
    """The inputs of :func:`pack_ranges` other than the ranges."""

    #: ``maxRecordsPerTask``: the most records packed into one task of several ranges.
    max_records_per_task: int = DEFAULT_MAX_RECORDS_PER_TASK
    #: How many tasks can run at once (Spark's default parallelism, or ``minPartitions``).
    parallelism: int = 1
    #: ``minPartitions``: at least this many tasks, when there are that many ranges.
    min_tasks: int | None = None
    #: ``maxRecordsPerPartition``: no task of several ranges holds more records than this.
    max_records_per_partition: int | None = None
    open_cost: int = OPEN_COST_RECORDS

    def __post_init__(self) -> None:
        for name in ("max_records_per_task", "parallelism", "open_cost"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("min_tasks", "max_records_per_partition"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")


def target_cost(ranges: Sequence[OffsetRange], settings: PackingSettings) -> int:
    """The most cost (records + open cost per range) one task is filled to."""
    total = sum(r.count() + settings.open_cost for r in ranges)
    per_core = -(-total // settings.parallelism)
    return min(settings.max_records_per_task, max(settings.open_cost, per_core))


def pack_ranges(
    ranges: Sequence[OffsetRange], settings: PackingSettings
) -> list[tuple[OffsetRange, ...]]:
    """The tasks that read ``ranges``: each a tuple of ranges in ``(topic, partition, from)``
    order; together they hold every non-empty range exactly once (see the module docstring)."""
    todo = sorted(r for r in ranges if r.count() > 0)
    if not todo:
        return []
    target = target_cost(todo, settings)
    cap = settings.max_records_per_partition
    tasks: list[list[OffsetRange]] = []
    cost = records = 0
    for r in todo:
        more = r.count() + settings.open_cost
        over = cost + more > target or (cap is not None and records + r.count() > cap)
        if not tasks or over:
            tasks.append([])
            cost = records = 0
        tasks[-1].append(r)
        cost += more
        records += r.count()
    if settings.min_tasks is not None:
        _split_to(tasks, settings.min_tasks, settings.open_cost)
    return [tuple(t) for t in tasks]


def _split_to(tasks: list[list[OffsetRange]], min_tasks: int, open_cost: int) -> None:
    """Split the costliest tasks of several ranges in two, in place, until there are
    ``min_tasks`` tasks or every task holds one range. Order is kept: ranges stay sorted."""

    def cost(task: list[OffsetRange]) -> int:
        return sum(r.count() + open_cost for r in task)

    while len(tasks) < min_tasks:
        splittable = [i for i, t in enumerate(tasks) if len(t) > 1]
        if not splittable:
            return
        # Ties go to the first such task, so the result stays deterministic.
        i = max(splittable, key=lambda j: (cost(tasks[j]), -j))
        task = tasks[i]
        half, acc, cut = cost(task) / 2, 0, 1
        for cut in range(1, len(task)):
            acc += task[cut - 1].count() + open_cost
            if acc >= half:
                break
        tasks[i : i + 1] = [task[:cut], task[cut:]]
