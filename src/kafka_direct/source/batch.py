"""The batch reader: ``spark.read.format("kafka_direct")``, Spark's ``KafkaRDD``. Runs in the
Spark driver's planner process (``pushFilters``, ``partitions``) and, pickled, in executors
(``read``).

Its ranges are planned from the starting and ending offsets (:mod:`kafka_direct.planning.batch`),
or given exactly by the ``offsetRanges`` option (the DStream-style API's batches and
``createRDD``): then nothing is asked of the cluster.

**Filter pushdown.** Spark passes a batch reader the conjuncts of the query's filter, and drops
those the reader reports handled. This module is only the Spark edge: it translates PySpark's
filters on ``topic``, ``partition``, ``offset`` and ``timestamp`` into the pure
:class:`~kafka_direct.planning.pushdown.Predicate` s that narrow the ranges, and reports as
handled only those the narrowed ranges make redundant. The rules are in
:mod:`kafka_direct.planning.pushdown`.

Spark offers filters only when ``spark.sql.python.filterPushdown.enabled`` is true (false by
default). When it is false, PySpark refuses, with ``DATA_SOURCE_PUSHDOWN_DISABLED``, every read
whose reader overrides ``pushFilters``, even a read without a filter. The reader cannot see
that setting, but it can see who builds it: PySpark's pushdown worker exists only when the
setting is on. So the reader is a :class:`FilteringKafkaBatchReader` (which has
``pushFilters``) only when that worker builds it and ``pushdown.enabled`` is true, and a plain
:class:`KafkaBatchReader` otherwise, which works whatever the setting. Should PySpark rename
the worker, reads keep working, unfiltered by the source, and the integration test that checks
the rows read fails.
"""

from __future__ import annotations

import datetime as dt
import logging
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringContains,
    StringEndsWith,
    StringStartsWith,
)

from kafka_direct.config.source import SourceOptions
from kafka_direct.planning.batch import plan_batch_read, plan_given_ranges
from kafka_direct.planning.pushdown import Column, Op, Predicate, describe_pushed, is_handled
from kafka_direct.source.common import (
    input_partitions,
    make_reader,
    read_partition,
    user_facing,
)
from kafka_direct.source.value_decode import ValueDecode

__all__ = ["FilteringKafkaBatchReader", "KafkaBatchReader", "batch_reader", "to_predicate"]

log = logging.getLogger(__name__)

#: PySpark's worker that calls ``pushFilters`` (pyspark/sql/worker/data_source_pushdown_filters.py).
PUSHDOWN_WORKER = "pyspark.sql.worker.data_source_pushdown_filters"

_OPS: dict[type[Filter], Op] = {
    EqualTo: "=",
    EqualNullSafe: "<=>",
    LessThan: "<",
    LessThanOrEqual: "<=",
    GreaterThan: ">",
    GreaterThanOrEqual: ">=",
    In: "in",
    IsNull: "is null",
    IsNotNull: "is not null",
    StringStartsWith: "starts with",
    StringEndsWith: "ends with",
    StringContains: "contains",
}
_COLUMNS: dict[str, Column] = {
    "topic": "topic",
    "partition": "partition",
    "offset": "offset",
    "timestamp": "timestamp",
}
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_ONE_US = dt.timedelta(microseconds=1)


def _built_by_pushdown_worker() -> bool:
    frame = sys._getframe(1)
    while frame is not None:
        spec = frame.f_globals.get("__spec__")
        # The worker may run as __main__ (python -m), or be imported by a daemon.
        if frame.f_globals.get("__name__") == PUSHDOWN_WORKER or (
            spec is not None and getattr(spec, "name", None) == PUSHDOWN_WORKER
        ):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def batch_reader(opts: SourceOptions, decode: ValueDecode | None = None) -> KafkaBatchReader:
    """The batch reader for ``opts``: one that takes filters only when Spark will offer them.

    PySpark refuses any read whose reader overrides ``pushFilters`` while
    ``spark.sql.python.filterPushdown.enabled`` is false (its default), and it offers filters
    only from its pushdown worker, which runs when the setting is true. So the reader that
    overrides ``pushFilters`` is built only there; everywhere else the plain reader works
    whatever the setting (``kafka_direct.register`` turns it on unless the user chose).
    """
    if opts.pushdown and _built_by_pushdown_worker():
        return FilteringKafkaBatchReader(opts, decode)
    return KafkaBatchReader(opts, decode)


class KafkaBatchReader(DataSourceReader):
    """A bounded read over ``[startingOffsets, endingOffsets)``: Spark's ``KafkaRDD``."""

    def __init__(self, opts: SourceOptions, decode: ValueDecode | None = None) -> None:
        self.opts = opts
        self.settings = opts.executor_settings()
        #: valueFormat: decodes each batch's value column (None: Kafka's bytes).
        self.decode = decode
        #: The filters that narrow the ranges (set by pushFilters).
        self.pushed: list[Predicate] = []

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.opts.strategy.describe()}; {self.pushdown_summary()})"

    def pushdown_summary(self) -> str:
        """What the query's filters do to this read, for ``repr``."""
        if not isinstance(self, FilteringKafkaBatchReader):
            return (
                "pushdown off: 'pushdown.enabled' is false"
                if not self.opts.pushdown
                else "no filters offered (spark.sql.python.filterPushdown.enabled)"
            )
        return describe_pushed(self.pushed)

    @user_facing
    def partitions(self) -> Sequence[InputPartition]:
        if self.opts.ranges is not None:
            # Planned already (the DStream-style API, createRDD): no admin request at all.
            ranges = plan_given_ranges(self.opts, self.pushed)
        else:
            reader = make_reader(self.opts)
            try:
                ranges = plan_batch_read(self.opts, reader, self.pushed)
            finally:
                reader.close()
        tasks = input_partitions(self.opts, ranges)
        log.info(
            "Batch read of %d range(s) in %d task(s): %s",
            len(ranges),
            len(tasks),
            ", ".join(map(str, ranges)),
        )
        return tasks

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.settings, partition, decode=self.decode)


class FilteringKafkaBatchReader(KafkaBatchReader):
    """The batch reader when Spark offers the query's filters (see the module docstring)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        """Keep the filters that narrow the ranges; return those Spark must still apply (by
        identity, as PySpark requires)."""
        self.pushed = []
        unhandled = []
        for f in filters:
            predicate = to_predicate(f)
            if predicate is not None:
                self.pushed.append(predicate)
            if predicate is None or not is_handled(predicate):
                unhandled.append(f)
        if self.pushed:
            left = [str(f) for f in unhandled]
            log.info(
                "Filters pushed to %s: %s; Spark applies: %s",
                self.opts.strategy.describe(),
                describe_pushed(self.pushed),
                ", ".join(left) or "nothing",
            )
        return unhandled


def to_predicate(f: Filter) -> Predicate | None:
    """PySpark's filter as a :class:`Predicate`, or None when it cannot narrow a Kafka read."""
    if isinstance(f, Not):
        inner = to_predicate(f.child)
        if inner is None:
            return None
        return Predicate(inner.column, inner.op, inner.values, not inner.negated)
    op = _OPS.get(type(f))
    attribute: Any = getattr(f, "attribute", ())
    if op is None or len(attribute) != 1:
        return None
    column = _COLUMNS.get(str(attribute[0]).lower())
    if column is None:
        return None
    if op in ("is null", "is not null"):
        return Predicate(column, op)
    raw: object = getattr(f, "value", None)
    if op == "in" and not isinstance(raw, list | tuple):
        return None
    converted = [_value(column, v) for v in (raw if isinstance(raw, list | tuple) else [raw])]
    if not all(usable for usable, _ in converted):
        return None
    try:
        return Predicate(column, op, tuple(v for _, v in converted))
    except ValueError:
        return None  # e.g. an ordering comparison on topic: Spark applies it


def _value(column: Column, value: object) -> tuple[bool, int | str | None]:
    """``(usable, literal)``: a filter's literal in Kafka's terms; unusable when Spark sent a
    type this column never compares with directly."""
    if value is None:
        return True, None
    if column == "topic":
        return (True, value) if isinstance(value, str) else (False, None)
    if column == "timestamp":
        # Spark's timestamps are instants, sent as aware datetimes in the session's time zone.
        if isinstance(value, dt.datetime) and value.tzinfo is not None:
            return True, (value - _EPOCH) // _ONE_US
        return False, None
    if isinstance(value, int) and not isinstance(value, bool):
        return True, value
    return False, None
