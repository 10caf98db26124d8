"""What the data source and its readers share: the input partition, the executors' read entry,
the offset reader factory, the check made at ``load()``, and trimmed errors. Runs in Spark's
Python processes: the driver's planner and stream runner, and executors."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import (
    InputPartition,
)

from kafka_direct.config.clients import ExecutorSettings
from kafka_direct.config.source import SourceOptions
from kafka_direct.consumer.read import read_range
from kafka_direct.errors import KafkaDirectError
from kafka_direct.kafka.admin import check_consumer_config
from kafka_direct.kafka.offset_reader import AdminOffsetReader
from kafka_direct.logs import ensure_worker_logging
from kafka_direct.offsets import OffsetRange
from kafka_direct.source import loss_journal

__all__ = [
    "KafkaInputPartition",
    "check_cluster",
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
    """One Spark task: one offset range (a whole Kafka partition's share, or a split of it),
    and the partition's first offset when the driver planned it (None when not known)."""

    def __init__(self, rng: OffsetRange, log_start: int | None = None) -> None:
        super().__init__(rng)
        self.range = rng
        self.log_start = log_start

    def __repr__(self) -> str:
        return f"KafkaInputPartition({self.range})"


def make_reader(opts: SourceOptions) -> AdminOffsetReader:
    return AdminOffsetReader(
        opts.kafka,
        isolation_level=opts.isolation_level,
        num_retries=opts.fetch_retries,
        retry_interval_ms=opts.fetch_retry_interval_ms,
    )


def read_partition(
    settings: ExecutorSettings, partition: InputPartition, *, journal_losses: bool = False
) -> Iterator[pa.RecordBatch]:
    """The executor's read of ``partition``. ``journal_losses``: offsets skipped as lost
    (``failOnDataLoss=false``) go to the loss journal, for the streaming query's listeners."""
    # PySpark hands a placeholder InputPartition(None) to a batch with no partitions at all.
    if isinstance(partition, KafkaInputPartition):
        ensure_worker_logging()
        on_skip = loss_journal.record_skip if journal_losses else None
        try:
            yield from read_range(
                settings, partition.range, getattr(partition, "log_start", None), on_skip
            )
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
