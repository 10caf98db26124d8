"""The ``kafka_direct`` PySpark data source: batch and streaming readers. Runs in Spark's Python
processes: the driver-side planner and stream runner, and executors (pickled readers).

Thin by design: options are parsed by :mod:`~kafka_direct.options`, offsets planned by
:mod:`~kafka_direct.planner`, ranges read by :mod:`~kafka_direct.executor`. Readers open nothing
in ``__init__``: PySpark builds them in several processes and pickles them to executors, so the
admin client is created on first use and dropped on pickling.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from kafka_direct.errors import KafkaDirectError
from kafka_direct.executor import ExecutorSettings, read_range
from kafka_direct.group_offsets import GroupCommitter
from kafka_direct.offset_reader import AdminOffsetReader
from kafka_direct.offsets import OffsetRange, TopicPartition, offsets_from_json, offsets_to_json
from kafka_direct.options import SourceOptions, parse_source_options
from kafka_direct.planner import StreamPlanner, plan_batch
from kafka_direct.positions import OffsetReader
from kafka_direct.rows import schema_ddl
from kafka_direct.worker_logging import ensure_worker_logging

__all__ = ["KafkaDirectDataSource", "KafkaInputPartition"]

log = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])


def _user_facing(method: F) -> F:
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


#: ReadMaxRows has no "unlimited": this stands for "limits come from the source's options".
_UNLIMITED_ROWS = 2**63 - 1


class KafkaInputPartition(InputPartition):
    """One Spark task: one offset range (a whole Kafka partition's share, or a split of it)."""

    def __init__(self, rng: OffsetRange) -> None:
        super().__init__(rng)
        self.range = rng

    def __repr__(self) -> str:
        return f"KafkaInputPartition({self.range})"


def _make_reader(opts: SourceOptions) -> OffsetReader:
    return AdminOffsetReader(
        opts.kafka,
        isolation_level=opts.isolation_level,
        num_retries=opts.fetch_retries,
        retry_interval_ms=opts.fetch_retry_interval_ms,
    )


def _read(settings: ExecutorSettings, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    # PySpark hands a placeholder InputPartition(None) to a batch with no partitions at all.
    if isinstance(partition, KafkaInputPartition):
        ensure_worker_logging()
        try:
            yield from read_range(settings, partition.range)
        except KafkaDirectError as exc:
            raise exc.with_traceback(None) from None


class KafkaDirectDataSource(DataSource):
    """``spark.read.format("kafka_direct")`` and ``spark.readStream.format("kafka_direct")``."""

    @classmethod
    def name(cls) -> str:
        return "kafka_direct"

    @_user_facing
    def schema(self) -> str:
        # Validate mode-independent options as early as load(), before any query starts.
        opts = parse_source_options(self.options, streaming=None)
        return schema_ddl(opts.include_headers)

    @_user_facing
    def reader(self, schema: StructType) -> DataSourceReader:
        ensure_worker_logging()
        return KafkaBatchReader(parse_source_options(self.options, streaming=False))

    @_user_facing
    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        ensure_worker_logging()
        return KafkaStreamReader(parse_source_options(self.options, streaming=True))


class KafkaBatchReader(DataSourceReader):
    """A bounded read over ``[startingOffsets, endingOffsets)``: the seed's ``KafkaRDD``."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.settings = ExecutorSettings.from_options(opts)

    def __repr__(self) -> str:
        return f"KafkaBatchReader({self.opts.strategy.describe()})"

    @_user_facing
    def partitions(self) -> Sequence[InputPartition]:
        reader = _make_reader(self.opts)
        try:
            ranges = plan_batch(self.opts, reader)
        finally:
            reader.close()
        log.info("Batch read of %d range(s): %s", len(ranges), ", ".join(map(str, ranges)))
        return [KafkaInputPartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.settings, partition)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The direct stream: offsets in Spark's checkpoint, one range per partition per batch."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.settings = ExecutorSettings.from_options(opts)
        self.planner = StreamPlanner(opts, functools.partial(_make_reader, opts))
        group = opts.commit_group
        self.committer = None if group is None else GroupCommitter(opts.kafka, group)

    def __repr__(self) -> str:
        return f"KafkaStreamReader({self.opts.strategy.describe()})"

    @_user_facing
    def initialOffset(self) -> dict[str, Any]:
        return offsets_to_json(self.planner.initial_offsets())

    def getDefaultReadLimit(self) -> ReadLimit:
        o = self.opts
        if o.max_offsets_per_trigger is not None or o.max_offsets_per_partition_per_trigger:
            return ReadMaxRows(o.max_offsets_per_trigger or _UNLIMITED_ROWS)
        if o.min_offsets_per_trigger is not None:
            return ReadMinRows(o.min_offsets_per_trigger)
        return ReadAllAvailable()

    @_user_facing
    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        done = offsets_from_json(start, "start offset")
        # Spark asks for the next batch only once the batch ending at `start` has finished (and
        # on every trigger, data or not), so `start` is consumed: commit it now. Spark's own
        # commit(end) arrives one batch late and never for a query's last batch. A start that
        # is still the query's initial offsets ends no batch: committing it would rewind the
        # group to where reading merely begins.
        if done != self.planner.initial_in_this_run:
            self._commit_to_group(done)
        end = self.planner.latest_offsets(done, read_all=isinstance(limit, ReadAllAvailable))
        return offsets_to_json(end)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        latest = self.planner.reported_latest
        return None if latest is None else offsets_to_json(latest)

    @_user_facing
    def prepareForTriggerAvailableNow(self) -> None:
        self.planner.prepare_available_now()

    @_user_facing
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        ranges = self.planner.plan_ranges(
            offsets_from_json(start, "start offset"), offsets_from_json(end, "end offset")
        )
        log.info("Micro-batch of %d range(s): %s", len(ranges), ", ".join(map(str, ranges)))
        return [KafkaInputPartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.settings, partition)

    def commit(self, end: dict[str, Any]) -> None:
        # Spark calls this after the batch's commit log entry is written: the batch is done, so
        # its end offsets are what the group has consumed (what lag tools should see).
        self._commit_to_group(offsets_from_json(end, "end offset"))

    def _commit_to_group(self, offsets: dict[TopicPartition, int]) -> None:
        done = {tp: off for tp, off in offsets.items() if off >= 0}  # -1: not yet pinned
        committer = self.committer
        if committer is not None and done and done != committer.last_committed:
            committer.commit(done)

    def stop(self) -> None:
        self.planner.close()
