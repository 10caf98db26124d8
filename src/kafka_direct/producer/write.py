"""One write task: every record of a Spark task produced, and acknowledged, before it succeeds.
Runs in Spark executors (Python workers).

The counterpart of Spark's ``KafkaWriteTask``. Everything the task needs travels in
:class:`WriteSettings` (small, frozen, picklable, built once on the driver). The producer comes
from the worker's pool (:mod:`~kafka_direct.producer.pool`), keyed by the config's fingerprint
and the implementation; :func:`write_batches` hands it every Arrow batch, then flushes:

- **At-least-once.** The task returns only when the broker acknowledged every record
  (``flush``); the first delivery error fails it, naming the topic, the partition and the
  cause. A failed task's records that were already acknowledged stay written, and Spark's
  retry writes them again: duplicates, never loss.
- **Bounded.** A broker that stops answering fails the waiting records after
  ``kafka.delivery.timeout.ms``; the final flush waits that long plus a margin, never forever.
- **Failures are not reused.** After a failure the producer's queue is purged and the producer
  closed, not returned to the pool; a task reattempt closes the key's idle producers too
  (SPARK-27042).

Which implementation produces is :func:`producer_kind`'s choice: the C fast path
(:class:`~kafka_direct.producer.native.NativeBatchProducer`, registered here as ``"native"``)
when ``fastPath.enabled`` is true and the extension works in this process, else the Python
reference (:class:`~kafka_direct.producer.batch_producer.PythonBatchProducer`). Other fast paths
can be added with :func:`register_fast_path`.

Task statistics, for benchmarks (:mod:`kafka_direct.executor.task`, as for reads): every write
task writes one JSON line when it ends (``"role": "write"``: the topic option, records, batches,
start and end, the implementation; an exactly-once task adds the seconds of each of its steps,
``"phases"``). Never per record.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import pyarrow as pa

from kafka_direct.config.fingerprint import config_fingerprint
from kafka_direct.config.kafka import KafkaConfig
from kafka_direct.executor.lease_pool import LeasePool
from kafka_direct.executor.task import append_stats, stats_dir, task_info
from kafka_direct.producer.batch_producer import BatchProducer, PythonBatchProducer
from kafka_direct.producer.columns import SinkColumns
from kafka_direct.producer.markers import TransactionSettings
from kafka_direct.producer.pool import ProducerKey, get_producer_pool

__all__ = [
    "FLUSH_MARGIN_S",
    "WriteResult",
    "WriteSettings",
    "new_producer",
    "producer_kind",
    "record_stats",
    "register_fast_path",
    "write_batches",
]

log = logging.getLogger(__name__)

#: Time for the final flush beyond the delivery timeout: librdkafka fails a record that waited
#: that long by itself, so the flush ends; the margin covers the last request in flight.
FLUSH_MARGIN_S = 10.0

PYTHON = "python"
NATIVE = "native"


@dataclass(frozen=True)
class WriteSettings:
    """What a write task needs: built on the driver (:mod:`kafka_direct.source.sink`)."""

    producer_config: KafkaConfig
    columns: SinkColumns
    delivery_timeout_ms: int
    cache_timeout_s: float = 600.0
    cache_capacity: int = 8
    fast_path: bool = True
    #: Set for deliveryGuarantee 'exactly-once' (:mod:`~kafka_direct.producer.transactional`).
    transactions: TransactionSettings | None = None

    @property
    def flush_timeout_s(self) -> float:
        return self.delivery_timeout_ms / 1000.0 + FLUSH_MARGIN_S


@dataclass(frozen=True)
class WriteResult:
    """What one task wrote: every record counted here was acknowledged by the broker."""

    records: int
    batches: int
    seconds: float
    #: The implementation that produced ("python", or a fast path's name).
    kind: str
    #: Whether the producer came from the pool (an earlier task's) or was created.
    reused: bool
    #: exactly-once: an earlier attempt had committed this task's records; nothing was written.
    skipped: bool = False
    #: exactly-once: seconds per step of the task, in order (for the statistics line).
    phases: Mapping[str, float] | None = None


# Fast paths by name: (is it available in this process?, factory). The C producer registers
# itself here; the Python producer is always there.
_FAST_PATHS: dict[str, tuple[Callable[[], bool], Callable[[Mapping[str, str]], BatchProducer]]] = {}


def register_fast_path(
    name: str,
    available: Callable[[], bool],
    factory: Callable[[Mapping[str, str]], BatchProducer],
) -> None:
    """Make another :class:`BatchProducer` implementation available, tried before the Python
    one when ``fastPath.enabled`` is true and ``available()`` says it works in this process."""
    _FAST_PATHS[name] = (available, factory)


def _native_available() -> bool:
    # Imported when first asked, so that this module (and the pool) load without the extension.
    from kafka_direct.producer import native

    return native.available()


def _native_producer(config: Mapping[str, str]) -> BatchProducer:
    from kafka_direct.producer import native

    return native.new_batch_producer(config)


register_fast_path(NATIVE, _native_available, _native_producer)


def producer_kind(settings: WriteSettings) -> str:
    """Which implementation writes in this process."""
    if settings.fast_path:
        for name, (available, _) in _FAST_PATHS.items():
            if available():
                return name
    return PYTHON


def new_producer(key: ProducerKey, config: Mapping[str, str]) -> BatchProducer:
    """The pool's factory: a producer of ``key.kind`` from ``config``."""
    if key.kind == PYTHON:
        return PythonBatchProducer(config)
    return _FAST_PATHS[key.kind][1](config)


def write_batches(
    settings: WriteSettings,
    batches: Iterable[pa.RecordBatch],
    *,
    pool: LeasePool[ProducerKey, BatchProducer] | None = None,
    attempt: int | None = None,
) -> WriteResult:
    """Produce every row of ``batches`` and wait until all are acknowledged (module docstring).

    ``pool`` and ``attempt`` default to the worker's pool and the Spark task's attempt number.
    """
    started, started_wall = time.monotonic(), time.time()
    config = settings.producer_config
    kind = producer_kind(settings)
    key = ProducerKey(config_fingerprint(config), kind)
    if pool is None:
        pool = get_producer_pool(
            new_producer, capacity=settings.cache_capacity, idle_timeout_s=settings.cache_timeout_s
        )
    if attempt is None:
        attempt = task_info().attempt
    records = count = 0
    columns = settings.columns
    with pool.lease(key, config, reattempt=attempt > 0) as lease:
        producer = lease.client
        try:
            for batch in batches:
                producer.produce_batch(batch, columns)
                records += batch.num_rows
                count += 1
            producer.flush(settings.flush_timeout_s)
        except BaseException:
            # Records still queued would be sent by a producer no one watches any more.
            producer.abort()
            raise
    result = WriteResult(records, count, time.monotonic() - started, kind, lease.reused)
    record_stats(settings, result, started_wall)
    log.info(
        "Wrote %d record(s) in %d batch(es) in %.3f s (%s producer, %s)",
        records, count, result.seconds, kind, "reused" if lease.reused else "new",
    )  # fmt: skip
    return result


def record_stats(settings: WriteSettings, result: WriteResult, start: float) -> None:
    """One line per task when the statistics directory is set (see the module docstring); a
    failure to write it is only logged."""
    directory = stats_dir()
    if directory is None:
        return
    line: dict[str, object] = {
        "role": "write",
        "topic": settings.columns.topic,
        "rows": result.records,
        "batches": result.batches,
        "start": start,
        "end": time.time(),
        "kind": result.kind,
        "fast_path": result.kind != PYTHON,
        "reused": result.reused,
        "pid": os.getpid(),
    }
    if result.phases is not None:
        line["phases"] = {name: round(seconds, 6) for name, seconds in result.phases.items()}
    append_stats(directory, [line])
