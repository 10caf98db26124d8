"""The stream reader: ``spark.readStream.format("kafka_direct")``, the direct stream with its
offsets in Spark's checkpoint. Runs in the Spark driver's stream-runner process (offsets,
``partitions``, ``commit``) and, pickled, in executors (``read``)."""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import (
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

from kafka_direct.config.source import SourceOptions
from kafka_direct.errors import KafkaDirectError
from kafka_direct.executor.task import append_stats, stats_dir
from kafka_direct.kafka.groups import GroupCommitter
from kafka_direct.offsets import TopicPartition, offsets_from_json, offsets_to_json
from kafka_direct.planning.micro_batch import StreamPlanner
from kafka_direct.source import loss_journal
from kafka_direct.source.common import (
    input_partitions,
    make_reader,
    read_partition,
    user_facing,
)
from kafka_direct.source.value_decode import ValueDecode

__all__ = ["KafkaStreamReader", "RefusedStreamReader"]

log = logging.getLogger(__name__)

#: ReadMaxRows has no "unlimited": this stands for "limits come from the source's options".
_UNLIMITED_ROWS = 2**63 - 1

F = TypeVar("F", bound=Callable[..., Any])


def _timed(method: F) -> F:
    """Time one of Spark's calls into the stream runner: a debug log line, and a statistics
    line when ``KAFKA_DIRECT_STATS_DIR`` is set (``benchmarks/latency.py --profile``). A call
    costs two clock reads otherwise."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.time()
        try:
            return method(*args, **kwargs)
        finally:
            ended = time.time()
            log.debug("%s took %.1f ms", method.__name__, (ended - started) * 1000.0)
            directory = stats_dir()
            if directory is not None:
                line = {"driver": method.__name__, "pid": os.getpid(), "start": started}
                append_stats(directory, [{**line, "end": ended}], kind="driver")

    return wrapper  # type: ignore[return-value]


class RefusedStreamReader(DataSourceStreamReader):
    """Stands in for a stream reader whose options were refused; every call raises the error."""

    def __init__(self, error: KafkaDirectError) -> None:
        self.error = error

    def _refuse(self) -> Any:
        raise self.error.with_traceback(None) from None

    def initialOffset(self) -> dict[str, Any]:
        return self._refuse()  # type: ignore[no-any-return]

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        return self._refuse()  # type: ignore[no-any-return]

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        return self._refuse()  # type: ignore[no-any-return]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self._refuse()  # type: ignore[no-any-return]

    @_timed
    def commit(self, end: dict[str, Any]) -> None:
        pass


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The direct stream: offsets in Spark's checkpoint, one range per partition per batch,
    small ranges packed into few tasks."""

    def __init__(self, opts: SourceOptions, decode: ValueDecode | None = None) -> None:
        self.opts = opts
        self.settings = opts.executor_settings()
        #: valueFormat: decodes each batch's value column (None: Kafka's bytes).
        self.decode = decode
        self.planner = StreamPlanner(
            opts, functools.partial(make_reader, opts), on_loss=loss_journal.record
        )
        # Only 'commitOffsetsToGroup' names a group to commit to: with kafka.group.id alone the
        # stream commits nothing and needs no rights on the group, as Spark's source.
        group = opts.commits.target
        self.committer = None if group is None else GroupCommitter(opts.kafka, group)

    def __repr__(self) -> str:
        return f"KafkaStreamReader({self.opts.strategy.describe()})"

    @_timed
    @user_facing
    def initialOffset(self) -> dict[str, Any]:
        self._check_group()
        return offsets_to_json(self.planner.initial_offsets())

    def _check_group(self) -> None:
        # Before any batch: a group the principal may not commit to fails the query now,
        # naming the group, rather than warning at every commit (GroupCommitter.check).
        if self.committer is not None:
            self.committer.check()

    def getDefaultReadLimit(self) -> ReadLimit:
        rates = self.opts.rates
        if rates.limited:
            return ReadMaxRows(rates.max_offsets or _UNLIMITED_ROWS)
        if rates.min_offsets is not None:
            return ReadMinRows(rates.min_offsets)
        return ReadAllAvailable()

    @_timed
    @user_facing
    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        self._check_group()
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

    @_timed
    def reportLatestOffset(self) -> dict[str, Any] | None:
        latest = self.planner.reported_latest
        return None if latest is None else offsets_to_json(latest)

    @user_facing
    def prepareForTriggerAvailableNow(self) -> None:
        self.planner.prepare_available_now()

    @_timed
    @user_facing
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        ranges = self.planner.plan_ranges(
            offsets_from_json(start, "start offset"), offsets_from_json(end, "end offset")
        )
        tasks = input_partitions(self.opts, ranges, self.planner.log_starts, stream=True)
        log.info(
            "Micro-batch of %d range(s) in %d task(s): %s",
            len(ranges),
            len(tasks),
            ", ".join(map(str, ranges)),
        )
        return tasks

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.settings, partition, journal_losses=True, decode=self.decode)

    @_timed
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
