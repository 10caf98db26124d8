"""What the data source and its readers share: the input partition (and packing ranges into
them), the executors' read entry,
the offset reader factory, the check made at ``load()``, and trimmed errors. Runs in Spark's
Python processes: the driver's planner and stream runner, and executors."""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import (
    InputPartition,
)

from kafka_direct.config.clients import ExecutorSettings
from kafka_direct.config.source import SourceOptions
from kafka_direct.errors import KafkaDirectError
from kafka_direct.kafka.admin import check_consumer_config
from kafka_direct.kafka.offset_reader import AdminOffsetReader
from kafka_direct.logs import ensure_worker_logging
from kafka_direct.offsets import OffsetRange, TopicPartition
from kafka_direct.planning.packing import PackingSettings, pack_ranges
from kafka_direct.source import loss_journal
from kafka_direct.source.value_decode import ValueDecode

__all__ = [
    "STREAM_PACKING_PARALLELISM",
    "KafkaInputPartition",
    "check_cluster",
    "input_partitions",
    "make_reader",
    "read_partition",
    "user_facing",
]

log = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])


def user_facing(method: F) -> F:
    """Raise our own errors with a one-frame traceback.

    Spark prints the Python traceback of a data source error inside its own message; the frames
    of the library's internals only bury the one sentence that says what to fix.
    """

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except KafkaDirectError as exc:
            raise exc.with_traceback(None) from None

    return wrapper  # type: ignore[return-value]


class KafkaInputPartition(InputPartition):
    """One Spark task: one offset range, or several packed together
    (:mod:`kafka_direct.planning.packing`), and their partitions' first offsets where the
    driver planned them (absent when not known)."""

    def __init__(
        self,
        ranges: OffsetRange | Sequence[OffsetRange],
        log_starts: Mapping[TopicPartition, int] | int | None = None,
    ) -> None:
        self.ranges = (ranges,) if isinstance(ranges, OffsetRange) else tuple(ranges)
        super().__init__(self.ranges)
        if isinstance(log_starts, int):
            log_starts = {self.ranges[0].topic_partition: log_starts}
        tps = {r.topic_partition for r in self.ranges}
        self.log_starts = {tp: off for tp, off in (log_starts or {}).items() if tp in tps}

    def __repr__(self) -> str:
        shown = ", ".join(map(str, self.ranges[:3]))
        more = f", +{len(self.ranges) - 3} more" if len(self.ranges) > 3 else ""
        return f"KafkaInputPartition({shown}{more})"


#: How many tasks a stream's packing takes to run at once when ``minPartitions`` does not say:
#: a constant, never the planning machine's cores. A micro-batch replayed after a restart must
#: be split into the same tasks as when it first ran, or the exactly-once sink, which matches a
#: replayed task to what its first attempt committed, would write again the rows that another
#: task had committed; the restarted driver may run on a machine with other cores.
STREAM_PACKING_PARALLELISM = 2


def input_partitions(
    opts: SourceOptions,
    ranges: Sequence[OffsetRange],
    log_starts: Mapping[TopicPartition, int] | None = None,
    *,
    stream: bool = False,
) -> list[KafkaInputPartition]:
    """The Spark tasks that read ``ranges``: small ranges packed together, up to
    ``maxRecordsPerTask`` (see :mod:`kafka_direct.planning.packing`)."""
    tasks = pack_ranges(ranges, packing_settings(opts, stream=stream))
    return [KafkaInputPartition(task, log_starts) for task in tasks]


def packing_settings(
    opts: SourceOptions, *, stream: bool = False, cpu_count: int | None = None
) -> PackingSettings:
    """Packing as the options ask. How many tasks run at once is ``minPartitions`` when set.
    Else, for a batch read, the cores of the machine that plans (the driver): a Python data
    source cannot ask Spark for its default parallelism, and on a local session the driver's
    cores are it. For a stream, :data:`STREAM_PACKING_PARALLELISM`: its plan must not depend
    on the machine (see there). On a cluster, ``minPartitions`` says how many (it also sets
    the fewest tasks), or a lower ``maxRecordsPerTask`` spreads large micro-batches."""
    if opts.splits.min_partitions:
        parallelism = opts.splits.min_partitions
    elif stream:
        parallelism = STREAM_PACKING_PARALLELISM
    else:
        parallelism = (os.cpu_count() if cpu_count is None else cpu_count) or 1
    return PackingSettings(
        max_records_per_task=opts.splits.max_records_per_task,
        parallelism=parallelism,
        min_tasks=opts.splits.min_partitions,
        max_records_per_partition=opts.splits.max_records_per_partition,
    )


def make_reader(opts: SourceOptions) -> AdminOffsetReader:
    return AdminOffsetReader(
        opts.kafka,
        isolation_level=opts.isolation_level,
        num_retries=opts.fetch_offset.num_retries,
        retry_interval_ms=opts.fetch_offset.retry_interval_ms,
    )


def read_partition(
    settings: ExecutorSettings,
    partition: InputPartition,
    *,
    journal_losses: bool = False,
    decode: ValueDecode | None = None,
) -> Iterator[pa.RecordBatch]:
    """The executor's read of ``partition``. ``journal_losses``: offsets skipped as lost
    (``failOnDataLoss=false``) go to the loss journal, for the streaming query's listeners.
    ``decode``: decodes each batch's value column (``valueFormat``)."""
    # PySpark hands a placeholder InputPartition(None) to a batch with no partitions at all.
    if isinstance(partition, KafkaInputPartition):
        # Here, not at the top: the driver's stream runner (a fresh process per query) plans
        # partitions and never reads, so it does not load the consumer.
        from kafka_direct.consumer.read import read_ranges

        ensure_worker_logging()
        on_skip = loss_journal.record_skip if journal_losses else None
        try:
            batches = read_ranges(settings, partition.ranges, partition.log_starts, on_skip)
            if decode is None:
                yield from batches
            else:
                for batch in batches:
                    yield decode.apply(batch)
        except KafkaDirectError as exc:
            raise exc.with_traceback(None) from None


def check_cluster(opts: SourceOptions) -> None:
    """Refuse a ``kafka.`` setting librdkafka does not take, and a cluster that does not answer
    (within the reader's connect timeout), naming what to fix."""
    settings = opts.executor_settings()
    check_consumer_config(settings.consumer_config, opts.kafka)
    reader = make_reader(opts)
    try:
        reader.connect()
    finally:
        reader.close()
