"""Executor-side read of one input partition: one offset range, or the several ranges of a
packed task (:mod:`kafka_direct.planning.packing`), read together by one consumer
(:mod:`kafka_direct.consumer.packed`). Runs in Spark executors (Python workers).

Everything a task needs travels in :class:`~kafka_direct.config.clients.ExecutorSettings`, which
is small, frozen and picklable. The consumer comes from the process-wide pool (Python workers are
reused between tasks, so a pooled consumer survives from one micro-batch to the next); a task
reattempt or any error invalidates it, as Spark's ``KafkaDataConsumer`` does. Which read path a
consumer takes (the C fast path of :mod:`kafka_direct.consumer.native`, or confluent-kafka's
Python messages) is part of its pool key, so a pooled consumer of one kind never serves a query
that asked for the other (``fastPath.enabled``).

A packed task's consumer is pooled under the set of its partitions (``PoolKey.assignment``),
with the same rules: never shared while in use, invalidated by a reattempt or a failed read.
That set changes from micro-batch to micro-batch under sparse or uneven load, so on a miss a
packed task adopts an idle packed consumer that shares partitions with it
(:mod:`~kafka_direct.consumer.pool`) rather than leave one more idle. What idle consumers hold
is bounded by a task's memory budget: the twelve batches of ``maxBatchBytes`` that
``taskMemoryBudget`` stands for (:data:`~kafka_direct.config.source.BATCHES_PER_TASK_BUDGET`).

Task statistics, for benchmarks (:mod:`kafka_direct.executor.task`): every task writes, when it
ends, one JSON line per range it read: the range, its rows, the task's id (``task``), its range
count and rows, start and end wall-clock times, whether it read through the C fast path, and
what the consumer pool did for it (hits, misses, adoptions and consumers created) and how its
consumer was positioned (``position_kept``, ``_skipped``, ``_assigned``, ``_renewed``), on the
task's first line only; and Spark's id of the task attempt (``spark_task``). A packed task
counts its rows per range once per batch, never per record.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer

from kafka_direct.config.clients import ExecutorSettings, int_setting
from kafka_direct.config.fingerprint import config_fingerprint
from kafka_direct.config.kafka import KafkaConfig
from kafka_direct.config.source import BATCHES_PER_TASK_BUDGET
from kafka_direct.consumer import native
from kafka_direct.consumer.fetch import PartitionConsumer
from kafka_direct.consumer.packed import GroupConsumer
from kafka_direct.consumer.pool import PoolKey, get_pool
from kafka_direct.consumer.task_consumer import POSITIONING, OnSkip, ReadTask, TaskConsumer
from kafka_direct.executor.task import append_stats, stats_dir, task_info
from kafka_direct.kafka.authorization import Access
from kafka_direct.kafka.events import ClientEvents
from kafka_direct.kafka.logs import client_hooks
from kafka_direct.kafka.translate import kafka_errors
from kafka_direct.offsets import OffsetRange, TopicPartition

__all__ = ["read_range", "read_ranges", "uses_fast_path"]

log = logging.getLogger(__name__)


def _new_consumer(key: PoolKey, config: Mapping[str, str]) -> TaskConsumer:
    events = ClientEvents("The executor's Kafka consumer")

    def client() -> Any:
        if key.fast_path:
            return native.new_consumer(config, events)
        with kafka_errors("Creating a Kafka consumer on the executor"):
            return Consumer({**config, **client_hooks(events, config)})

    made: TaskConsumer
    if key.assignment:
        made = GroupConsumer(client(), events, renew=client)
    else:
        made = PartitionConsumer(client(), events)
    made.access = Access(config, group=config.get("group.id"))
    # What its queue may hold while it idles in the pool (librdkafka's defaults if unset).
    made.queue_records = int_setting(config.get("queued.min.messages"), 100_000)
    made.queue_bytes = int_setting(config.get("queued.max.messages.kbytes"), 65_536) * 1024
    return made


def uses_fast_path(settings: ExecutorSettings) -> bool:
    """Whether this process reads ranges of ``settings`` through the C fast path."""
    return settings.fast_path and native.available()


def read_range(
    settings: ExecutorSettings,
    rng: OffsetRange,
    log_start: int | None = None,
    on_skip: OnSkip | None = None,
) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``rng`` as Arrow batches, with a pooled consumer. ``log_start`` is
    the partition's first offset when the driver planned the range, if it knew it; ``on_skip``
    hears of offsets skipped as lost (see :func:`~kafka_direct.consumer.fetch.fetch_range`)."""
    starts = {} if log_start is None else {rng.topic_partition: log_start}
    return read_ranges(settings, [rng], starts, on_skip)


def read_ranges(
    settings: ExecutorSettings,
    ranges: Sequence[OffsetRange],
    log_starts: Mapping[TopicPartition, int] | None = None,
    on_skip: OnSkip | None = None,
) -> Iterator[pa.RecordBatch]:
    """Yield the records of a task's ``ranges`` as Arrow batches. One range is read by a pooled
    consumer of its partition; several (a packed task) are read together by one pooled consumer
    assigned all their partitions. ``log_starts``: the partitions' first offsets when the
    driver planned the ranges, where it knew them."""
    todo = [r for r in ranges if r.from_offset < r.until_offset]
    if not todo:
        return
    directory = stats_dir()
    if directory is None:
        yield from _read(settings, todo, log_starts or {}, on_skip)
    else:
        yield from _with_stats(
            settings, todo, directory, lambda: _read(settings, todo, log_starts or {}, on_skip)
        )


def _read(
    settings: ExecutorSettings,
    ranges: list[OffsetRange],
    log_starts: Mapping[TopicPartition, int],
    on_skip: OnSkip | None,
) -> Iterator[pa.RecordBatch]:
    config = settings.consumer_config
    first = min(ranges)
    key = PoolKey(
        config["group.id"],
        first.topic,
        first.partition,
        config_fingerprint(config),
        fast_path=uses_fast_path(settings),
        # A packed task's consumer is assigned (and pooled under) all of its partitions.
        assignment=tuple(sorted({(r.topic, r.partition) for r in ranges}))
        if len(ranges) > 1
        else (),
    )
    with _consumer(settings, key, config) as consumer:
        yield from consumer.read(ReadTask(ranges, settings, log_starts, on_skip))


@contextlib.contextmanager
def _consumer(
    settings: ExecutorSettings, key: PoolKey, config: KafkaConfig
) -> Iterator[TaskConsumer]:
    """The consumer a read uses: a new one closed afterwards when the cache is off, else a
    lease from the worker's pool (a task's reattempt invalidates the cached one)."""
    if not settings.cache_enabled:
        consumer = _new_consumer(key, config)
        try:
            yield consumer
        finally:
            consumer.close()
        return
    pool = get_pool(
        _new_consumer,
        capacity=settings.cache_capacity,
        idle_timeout_s=settings.cache_timeout_s,
        # Idle consumers' prefetch stays within one task's memory budget.
        idle_bytes=BATCHES_PER_TASK_BUDGET * settings.max_batch_bytes,
    )
    with pool.lease(key, config, reattempt=task_info().attempt > 0) as lease:
        yield lease.client


def _with_stats(
    settings: ExecutorSettings,
    ranges: list[OffsetRange],
    directory: str,
    read: Callable[[], Iterator[pa.RecordBatch]],
) -> Iterator[pa.RecordBatch]:
    """``read()``, plus task statistics when the task ends: one JSON line per range."""
    pool = get_pool(_new_consumer)
    before = pool.stats()
    positioned = dict(POSITIONING)
    started = time.time()
    per_range = [0] * len(ranges)
    batches = 0
    outcome = "failed"
    try:
        for batch in read():
            _count_rows(ranges, batch, per_range)
            batches += 1
            yield batch
        outcome = "ok"
    except GeneratorExit:
        outcome = "closed"
        raise
    finally:
        after = pool.stats()
        task = {
            "pid": os.getpid(),
            # Spark's id of the task attempt: joins this line to Spark's event log.
            "spark_task": _spark_task_id(),
            "task": f"{os.getpid()}-{started!r}",
            "ranges": len(ranges),
            "task_rows": sum(per_range),
            "batches": batches,
            "start": started,
            "end": time.time(),
            "outcome": outcome,
            "pool_enabled": settings.cache_enabled,
            "fast_path": uses_fast_path(settings),
        }
        # Deltas of this process's pool counters (a Python worker runs one task at a time),
        # on the task's first line only, so that sums over lines count each task once.
        pool_deltas = {
            "pool_hits": after.hits - before.hits,
            "pool_misses": after.misses - before.misses,
            "pool_creations": after.creations - before.creations,
            "pool_adoptions": after.adoptions - before.adoptions,
            "pool_size": after.size,
            # How the task's consumer was positioned: its queue kept, read forward through,
            # assigned afresh, or a new client (POSITIONING).
            **{
                f"position_{how}": POSITIONING[how] - positioned.get(how, 0)
                for how in ("kept", "skipped", "assigned", "renewed")
            },
        }
        lines = []
        for i, (rng, rows) in enumerate(zip(ranges, per_range, strict=True)):
            lines.append(
                {
                    **task,
                    "topic": rng.topic,
                    "partition": rng.partition,
                    "from": rng.from_offset,
                    "until": rng.until_offset,
                    "rows": rows,
                    **(pool_deltas if i == 0 else dict.fromkeys(pool_deltas, 0)),
                }
            )
        append_stats(directory, lines)


def _spark_task_id() -> int | None:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return None if ctx is None else int(ctx.taskAttemptId())


def _count_rows(ranges: list[OffsetRange], batch: pa.RecordBatch, per_range: list[int]) -> None:
    """Add ``batch``'s rows to the counts of the ranges they belong to: one group-by per batch;
    a partition with several ranges in the task (rare) is split by offsets."""
    if len(ranges) == 1:
        per_range[0] += batch.num_rows
        return
    import pyarrow.compute as pc

    counts = (
        pa.Table.from_batches([batch.select(["topic", "partition"])])
        .group_by(["topic", "partition"])
        .aggregate([([], "count_all")])
        .to_pylist()
    )
    by_tp = {(c["topic"], c["partition"]): c["count_all"] for c in counts}
    slots: dict[tuple[str, int], list[int]] = {}
    for i, rng in enumerate(ranges):
        slots.setdefault((rng.topic, rng.partition), []).append(i)
    for tp, n in by_tp.items():
        mine = slots.get(tp, [])
        if len(mine) == 1:
            per_range[mine[0]] += n
            continue
        on_tp = pc.and_(pc.equal(batch.column(2), tp[0]), pc.equal(batch.column(3), tp[1]))
        for i in mine:
            rng = ranges[i]
            offsets = batch.column(4)
            inside = pc.and_(
                pc.greater_equal(offsets, rng.from_offset), pc.less(offsets, rng.until_offset)
            )
            per_range[i] += pc.sum(pc.and_(on_tp, inside)).as_py() or 0
