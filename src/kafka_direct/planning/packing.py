"""Packing offset ranges into Spark tasks by size, not one task per topic-partition. Pure: plain
library, used by the Spark driver (the batch reader's and the stream reader's ``partitions``).

Spark's JVM connector plans one task per range. A JVM task costs a few milliseconds; a Python
data source task costs tens, so a read of a thousand small partitions was dominated by task
overhead (see docs/performance-partitions.md). Spark's file sources meet the same problem with
many small files and pack them (``spark.sql.files.maxPartitionBytes`` and
``openCostInBytes``); :func:`pack_ranges` does the same with records:

- each range costs its records plus :data:`OPEN_COST_RECORDS`, the cost of one more partition in
  a task, in records (it keeps a task of many tiny ranges from growing without bound);
- the number of tasks follows Spark's ``FilePartition.maxSplitBytes``: a task holds about
  ``min(maxRecordsPerTask, max(open cost, total / cores))``, so small reads become few tasks
  and large ones at least one task per core; above the cores, the count is rounded up to whole
  rounds of tasks (three equal tasks on two cores take as long as four);
- ranges go to tasks in ``(topic, partition, from)`` order, cut where the running cost crosses
  a task's share, so tasks are balanced within one range;
- ``minPartitions`` and ``maxRecordsPerPartition`` keep their meaning for Spark partitions, that
  is tasks: at least ``minPartitions`` tasks (when there are that many ranges), and no task over
  ``maxRecordsPerPartition`` records. The ranges they split (:mod:`kafka_direct.planning.splits`)
  arrive split; packing never splits or merges a range.

The result depends only on the ranges and the settings, so a replayed micro-batch (same ranges)
gets the same tasks and the same rows, and a stream whose partitions stay busy gets the same
partitions in the same task batch after batch, which lets an executor's pooled consumer keep
its assignment and its prefetched records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kafka_direct.offsets import OffsetRange

__all__ = [
    "DEFAULT_MAX_RECORDS_PER_TASK",
    "OPEN_COST_RECORDS",
    "PackingSettings",
    "pack_ranges",
    "task_count",
]

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


def task_count(ranges: Sequence[OffsetRange], settings: PackingSettings) -> int:
    """How many tasks :func:`pack_ranges` aims at (fewer when single ranges are large)."""
    total = sum(r.count() + settings.open_cost for r in ranges)
    per_core = -(-total // settings.parallelism)
    target = min(settings.max_records_per_task, max(settings.open_cost, per_core))
    tasks = -(-total // target)
    if tasks > settings.parallelism:
        # Whole rounds of tasks: 3 equal tasks on 2 cores take as long as 4 on 2.
        tasks = -(-tasks // settings.parallelism) * settings.parallelism
    tasks = max(tasks, settings.min_tasks or 1)
    return min(tasks, len(ranges))


def pack_ranges(
    ranges: Sequence[OffsetRange], settings: PackingSettings
) -> list[tuple[OffsetRange, ...]]:
    """The tasks that read ``ranges``: each a tuple of ranges in ``(topic, partition, from)``
    order; together they hold every non-empty range exactly once (see the module docstring)."""
    todo = sorted(r for r in ranges if r.count() > 0)
    if not todo:
        return []
    open_cost = settings.open_cost
    k = task_count(todo, settings)
    total = sum(r.count() + open_cost for r in todo)
    # Contiguous cuts balanced by cost: each range goes to the task its cost's midpoint falls
    # in, so no task is more than one range away from total / k.
    tasks: list[list[OffsetRange]] = [[] for _ in range(k)]
    done = 0
    for r in todo:
        cost = r.count() + open_cost
        tasks[min(k - 1, (2 * done + cost) * k // (2 * total))].append(r)
        done += cost
    packed = [t for t in tasks if t]
    cap = settings.max_records_per_partition
    if cap is not None:
        packed = [part for t in packed for part in _cap_records(t, cap)]
    if settings.min_tasks is not None:
        _split_to(packed, settings.min_tasks, open_cost)
    return [tuple(t) for t in packed]


def _cap_records(task: list[OffsetRange], cap: int) -> list[list[OffsetRange]]:
    """``task`` cut, in order, into tasks of at most ``cap`` records (each range is at most
    ``cap`` already: ``maxRecordsPerPartition`` split it)."""
    out: list[list[OffsetRange]] = [[]]
    records = 0
    for r in task:
        if out[-1] and records + r.count() > cap:
            out.append([])
            records = 0
        out[-1].append(r)
        records += r.count()
    return out


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
