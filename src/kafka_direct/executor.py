"""Executor-side read of one input partition. Runs in Spark executors (Python workers).

Everything a task needs travels in :class:`ExecutorSettings`, which is small, frozen and
picklable. The consumer comes from the process-wide pool (Python workers are reused between
tasks, so a pooled consumer survives from one micro-batch to the next); a task reattempt or any
error invalidates it, as Spark's ``KafkaDataConsumer`` does.

Task statistics, for benchmarks: when the environment variable ``KAFKA_DIRECT_STATS_DIR``
names a directory in the Python workers' environment, every task appends one JSON line to
``<dir>/tasks-<pid>.jsonl`` when it ends: the range, rows read, start and end wall-clock times,
whether it read through the C fast path (:mod:`kafka_direct.native`), and what the consumer pool
did for it (hits, misses and consumers created). One line per task,
never per record or batch, so it stays off the hot path; without the variable nothing is
recorded. ``benchmarks/run.py`` uses it for the pool hit rate and per-task timing.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from confluent_kafka import Consumer

from kafka_direct import native
from kafka_direct.consumer_pool import PoolKey, config_fingerprint, get_pool
from kafka_direct.fetch import PartitionConsumer, fetch_range
from kafka_direct.kafka_io import ClientEvents, kafka_errors
from kafka_direct.offsets import OffsetRange
from kafka_direct.options import KafkaConfig, SourceOptions
from kafka_direct.settings import executor_consumer_config, executor_group_id

__all__ = ["STATS_DIR_ENV", "ExecutorSettings", "read_range", "uses_fast_path"]

log = logging.getLogger(__name__)

#: Environment variable naming a directory for per-task statistics (see the module docstring).
STATS_DIR_ENV = "KAFKA_DIRECT_STATS_DIR"


@dataclass(frozen=True)
class ExecutorSettings:
    """What a task needs to read a range; derived once on the driver from the options."""

    consumer_config: KafkaConfig
    poll_timeout_ms: int
    fail_on_data_loss: bool
    batch_size: int
    include_headers: bool
    cache_enabled: bool
    cache_capacity: int
    cache_timeout_s: float
    fast_path: bool = True

    @classmethod
    def from_options(cls, opts: SourceOptions) -> ExecutorSettings:
        group = executor_group_id(
            opts.user_group_id,
            opts.group_id_prefix,
            opts.bootstrap_servers,
            opts.strategy.describe(),
        )
        config = executor_consumer_config(
            opts.kafka, group_id=group, isolation_level=opts.isolation_level
        )
        return cls(
            consumer_config=KafkaConfig(config),
            poll_timeout_ms=opts.poll_timeout_ms,
            fail_on_data_loss=opts.fail_on_data_loss,
            batch_size=opts.arrow_batch_size,
            include_headers=opts.include_headers,
            cache_enabled=opts.consumer_cache_enabled,
            cache_capacity=opts.consumer_cache_capacity,
            cache_timeout_s=max(opts.consumer_cache_timeout_ms, 1) / 1000.0,
            fast_path=opts.fast_path,
        )


#: Marks the config of consumers that read through the C fast path (:mod:`kafka_direct.native`).
#: It is part of the pool key, so a pooled consumer of one kind never serves a query that asked
#: for the other ('fastPath.enabled'); the factory removes it before librdkafka sees the config.
FAST_PATH_KEY = "kafka_direct.fast_path"


def _new_consumer(config: Mapping[str, str]) -> PartitionConsumer:
    events = ClientEvents("The executor's Kafka consumer")
    if config.get(FAST_PATH_KEY) == "true":
        librdkafka = {k: v for k, v in config.items() if k != FAST_PATH_KEY}
        return PartitionConsumer(native.new_consumer(librdkafka, events), events)
    with kafka_errors("Creating a Kafka consumer on the executor"):
        return PartitionConsumer(Consumer({**config, "error_cb": events}), events)


def uses_fast_path(settings: ExecutorSettings) -> bool:
    """Whether this process reads ranges of ``settings`` through the C fast path."""
    return settings.fast_path and native.available()


def _attempt_number() -> int:
    # Imported here so the module stays importable (and unit-testable) without a Spark task.
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.attemptNumber() if ctx is not None else 0


def read_range(settings: ExecutorSettings, rng: OffsetRange) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``rng`` as Arrow batches, with a pooled consumer."""
    if rng.from_offset >= rng.until_offset:
        return
    stats_dir = os.environ.get(STATS_DIR_ENV)
    if stats_dir:
        yield from _read_with_stats(settings, rng, stats_dir)
    else:
        yield from _read(settings, rng)


def _read(settings: ExecutorSettings, rng: OffsetRange) -> Iterator[pa.RecordBatch]:
    fetch_args = {
        "poll_timeout_ms": settings.poll_timeout_ms,
        "fail_on_data_loss": settings.fail_on_data_loss,
        "batch_size": settings.batch_size,
        "include_headers": settings.include_headers,
    }
    config = settings.consumer_config
    if uses_fast_path(settings):
        config = config.merged({FAST_PATH_KEY: "true"})
    if not settings.cache_enabled:
        pc = _new_consumer(config)
        try:
            yield from fetch_range(pc, rng, **fetch_args)  # type: ignore[arg-type]
        finally:
            pc.close()
        return
    pool = get_pool(_new_consumer, settings.cache_capacity, settings.cache_timeout_s)
    key = PoolKey(config["group.id"], rng.topic, rng.partition, config_fingerprint(config))
    with pool.lease(key, config, reattempt=_attempt_number() > 0) as lease:
        yield from fetch_range(lease.consumer, rng, **fetch_args)  # type: ignore[arg-type]


def _read_with_stats(
    settings: ExecutorSettings, rng: OffsetRange, stats_dir: str
) -> Iterator[pa.RecordBatch]:
    """:func:`_read`, plus one JSON line of task statistics when the task ends."""
    pool = get_pool(_new_consumer)
    before = pool.stats()
    started = time.time()
    rows = batches = 0
    outcome = "failed"
    try:
        for batch in _read(settings, rng):
            rows += batch.num_rows
            batches += 1
            yield batch
        outcome = "ok"
    except GeneratorExit:
        outcome = "closed"
        raise
    finally:
        after = pool.stats()
        record = {
            "pid": os.getpid(),
            "topic": rng.topic,
            "partition": rng.partition,
            "from": rng.from_offset,
            "until": rng.until_offset,
            "rows": rows,
            "batches": batches,
            "start": started,
            "end": time.time(),
            "outcome": outcome,
            "pool_enabled": settings.cache_enabled,
            "fast_path": uses_fast_path(settings),
            # Deltas of this process's pool counters: a Python worker runs one task at a time.
            "pool_hits": after.hits - before.hits,
            "pool_misses": after.misses - before.misses,
            "pool_creations": after.creations - before.creations,
            "pool_size": after.size,
        }
        _append_stats(stats_dir, record)


def _append_stats(stats_dir: str, record: dict[str, object]) -> None:
    path = os.path.join(stats_dir, f"tasks-{os.getpid()}.jsonl")
    try:
        # One short append per task: O_APPEND keeps concurrent writers' lines whole.
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(record, separators=(",", ":")) + "\n")
    except OSError as exc:
        log.warning("Could not write task statistics to %s: %s", path, exc)
