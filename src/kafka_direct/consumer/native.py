"""The C fast path (``_rdkafka_arrow``): librdkafka straight into Arrow batches. Runs in Spark
executors (Python workers).

confluent-kafka creates a Python object per record (the message, its key and value, a topic
string); on small records that is most of a reader's CPU. The fast path reads one partition with
a librdkafka consumer of its own and copies each batch of records into a few contiguous buffers,
which become the Arrow columns without another copy. It has the same interface as the pure
Python read (``fetch.fetch_range`` picks it by the consumer's type) and gives the same rows;
``tests/integration/test_native_read.py`` compares the two on a real broker.

It is used when all of these hold, and otherwise the Python path reads, with the same results:

- the extension was compiled when the package was installed (it needs a C compiler; the build
  skips it otherwise);
- the librdkafka that confluent-kafka loaded can be found (normally the copy in its wheel);
- the query does not set ``fastPath.enabled=false``;
- the environment variable ``KAFKA_DIRECT_NATIVE`` is not ``0`` in the Python workers.

:func:`status` says which, and why.

Its librdkafka log lines go through Python ``logging`` like every other client's (the
``kafka_direct.librdkafka`` logger, with the rules of :mod:`kafka_direct.kafka.logs`), never to
the worker's stderr. librdkafka hands them to the extension in the thread that reads (or closes)
the consumer, and :class:`NativeConsumer` passes them on after each call. A librdkafka without
the log queue API (``rd_kafka_set_log_queue``) gets ``log_level=0`` instead: quiet, not printed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, NamedTuple

import pyarrow as pa
from confluent_kafka import KafkaError

from kafka_direct._native.loader import DISABLE_ENV, NativeExtension, route_log_lines
from kafka_direct.config.clients import DEFAULT_MAX_BATCH_BYTES
from kafka_direct.consumer.rows import (
    ARROW_SCHEMA,
    ARROW_SCHEMA_WITH_HEADERS,
    HEADER_TYPE,
    TIMESTAMP_US,
)
from kafka_direct.kafka.events import ClientEvents
from kafka_direct.kafka.logs import client_scrubber
from kafka_direct.kafka.translate import kafka_errors

__all__ = [
    "DISABLE_ENV",
    "NativeBatch",
    "NativeConsumer",
    "NativeManyBatch",
    "available",
    "new_consumer",
    "status",
]

log = logging.getLogger(__name__)

#: Most bytes of records in one Arrow batch when the caller gives no budget (the source option
#: ``maxBatchBytes`` sets it).
MAX_BATCH_BYTES = DEFAULT_MAX_BATCH_BYTES

#: The client name in the fast path's log lines (confluent-kafka's ``logger`` gets the handle's).
CLIENT_NAME = "kafka-direct-executor"


def _import_extension() -> Any:
    from kafka_direct.consumer import _rdkafka_arrow

    return _rdkafka_arrow


_extension = NativeExtension(_import_extension, "consumers")


def _load() -> Any:
    return _extension.load()


def available() -> bool:
    """Whether this process reads through the C fast path."""
    return _extension.available()


def status() -> str:
    """One line for users: which read path this process uses, and why."""
    return _extension.status("fast path (librdkafka {version} straight into Arrow)")


class NativeBatch(NamedTuple):
    """One read of the fast path's queue (:meth:`NativeConsumer.consume_batch`)."""

    #: The records in ``[nxt, until)`` as an Arrow batch, or None if none came.
    batch: pa.RecordBatch | None
    #: Offset of the last record taken off the queue (kept or not), or -1.
    last: int
    #: Whether a record at or past ``until`` came (the range is complete).
    beyond: bool
    #: The log end if the read ended in an EOF event, -1 for "offset out of range", else None.
    eof: int | None
    #: An error event (code, reason), or None.
    error: tuple[int, str] | None


class NativeManyBatch(NamedTuple):
    """One read of a packed task's queue (:meth:`NativeConsumer.consume_many`)."""

    #: The records kept, of any of the ranges, as one Arrow batch, or None if none came.
    batch: pa.RecordBatch | None
    #: ``(slot, last, beyond, eof)`` for each range the read touched; the fields mean what
    #: :class:`NativeBatch`'s do, for that range.
    news: list[tuple[int, int, bool, int | None]]
    #: An error event (code, reason), or None.
    error: tuple[int, str] | None


class NativeConsumer:
    """A consumer of one assigned partition, or of several (a packed task), that reads into
    Arrow batches.

    Implements what ``fetch`` and the consumer pool use of ``confluent_kafka.Consumer``
    (``assign``, ``get_watermark_offsets``, ``close``), plus :meth:`consume_batch`.
    """

    def __init__(self, config: Mapping[str, str], events: ClientEvents | None = None) -> None:
        module = _load()
        if module is None:
            raise RuntimeError(f"The fast path is not available: {_extension.reason}")
        self._events = events
        # The client's secret values, out of its log lines and error events (None: it has none).
        self._scrub = client_scrubber(config, events)
        self._impl = module.Consumer(dict(config))

    def _drain_events(self) -> None:
        """What librdkafka reported during the last call: error events to ``events``, log lines
        to ``kafka_direct.librdkafka``. Runs after every call, so the
        common case, nothing, is one C call that allocates nothing and returns ``None``."""
        taken = self._impl.take_events()
        if taken is None:
            return
        errors, lines, dropped, dropped_worst = taken
        route_log_lines(CLIENT_NAME, lines, dropped, dropped_worst, self._scrub)
        if self._events is not None:
            for code, reason, fatal in errors:
                self._events(KafkaError(code, reason, fatal=fatal))

    def assign(self, partitions: list[Any]) -> None:
        (tp,) = partitions
        try:
            self._impl.assign(tp.topic, tp.partition, tp.offset)
        finally:
            self._drain_events()

    def assign_many(self, partitions: list[tuple[str, int, int]]) -> None:
        """Assign exactly ``(topic, partition, offset)`` of each entry."""
        try:
            self._impl.assign_many(partitions)
        finally:
            self._drain_events()

    def consume_many(
        self,
        index: dict[tuple[str, int], int],
        bounds: bytes,
        topics: pa.Array,
        partitions: pa.Array,
        n: int,
        timeout_s: float,
        headers: bool = False,
        max_bytes: int = MAX_BATCH_BYTES,
    ) -> NativeManyBatch | None:
        """One read of up to ``n`` records or events of the ranges in ``index`` (``(topic,
        partition)`` to slot); ``bounds`` holds each slot's ``(nxt, until)`` as int64 pairs, and
        ``topics``/``partitions`` its topic and partition, for the rows' columns. The read stops
        once it holds ``max_bytes`` of records (a record larger than that comes alone). ``None``
        if nothing came in ``timeout_s``."""
        try:
            got = self._impl.consume_many(index, bounds, n, timeout_s, max_bytes, headers)
        finally:
            self._drain_events()
        if got is None:
            return None
        rows, columns, slots, news, error = got
        batch = None
        if rows:
            slot = pa.Array.from_buffers(pa.int32(), rows, [None, _buf(slots)])
            batch = _record_batch_of(topics.take(slot), partitions.take(slot), rows, columns)
        return NativeManyBatch(batch, news, error)

    def get_watermark_offsets(
        self, partition: Any, timeout: float = 5.0, cached: bool = False
    ) -> tuple[int, int]:
        try:
            low, high = self._impl.watermarks(
                partition.topic, partition.partition, max(1, int(timeout * 1000))
            )
        finally:
            self._drain_events()
        return int(low), int(high)

    def consume_batch(
        self,
        topic: str,
        partition: int,
        nxt: int,
        until: int,
        n: int,
        timeout_s: float,
        headers: bool = False,
        max_bytes: int = MAX_BATCH_BYTES,
    ) -> NativeBatch | None:
        """One read of up to ``n`` records or events, stopping once it holds ``max_bytes`` of
        records (a record larger than that comes alone): ``None`` if nothing came in
        ``timeout_s``, else what came (see :class:`NativeBatch`)."""
        try:
            got = self._impl.consume(partition, nxt, until, n, timeout_s, max_bytes, headers)
        finally:
            self._drain_events()
        if got is None:
            return None
        rows, columns, last, beyond, eof, error = got
        batch = _record_batch(topic, partition, rows, columns) if rows else None
        return NativeBatch(batch, last, beyond, eof, error)

    def close(self) -> None:
        try:
            self._impl.close()
        finally:
            self._drain_events()  # closing serves the queue: what it reported comes out too


def _buf(data: Any) -> pa.Buffer | None:
    return None if data is None else pa.py_buffer(data)


def _header_keys(raw: pa.Array) -> pa.Array:
    """Header keys as strings. Kafka does not check that they are UTF-8; Spark's (Java) client
    decodes them with replacement characters, so do we, rather than hand Spark an invalid
    string column. The cast validates in C and costs nothing extra in the usual case."""
    try:
        return raw.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array([k.decode("utf-8", "replace") for k in raw.to_pylist()], pa.string())


def _record_batch(topic: str, partition: int, n: int, columns: tuple[Any, ...]) -> pa.RecordBatch:
    return _record_batch_of(
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        n,
        columns,
    )


def _record_batch_of(
    topics: pa.Array, partitions: pa.Array, n: int, columns: tuple[Any, ...]
) -> pa.RecordBatch:
    ko, kd, kv, vo, vd, vv, offsets, stamps, types = columns[:9]
    arrays = [
        pa.Array.from_buffers(pa.binary(), n, [_buf(kv), _buf(ko), _buf(kd)]),
        pa.Array.from_buffers(pa.binary(), n, [_buf(vv), _buf(vo), _buf(vd)]),
        topics,
        partitions,
        pa.Array.from_buffers(pa.int64(), n, [None, _buf(offsets)]),
        pa.Array.from_buffers(TIMESTAMP_US, n, [None, _buf(stamps)]),
        pa.Array.from_buffers(pa.int32(), n, [None, _buf(types)]),
    ]
    if len(columns) == 9:
        return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)
    arrays.append(_headers_column(n, columns[9]))
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA_WITH_HEADERS)


def _headers_column(n: int, buffers: tuple[Any, ...]) -> pa.Array:
    """Spark's headers column from the extension's buffers (see ``fill_headers`` in the C)."""
    list_validity, list_offsets, ko, kd, vo, vd, vv, count = buffers
    entry = HEADER_TYPE.value_type
    pairs = pa.StructArray.from_arrays(
        [
            _header_keys(pa.Array.from_buffers(pa.binary(), count, [None, _buf(ko), _buf(kd)])),
            pa.Array.from_buffers(pa.binary(), count, [_buf(vv), _buf(vo), _buf(vd)]),
        ],
        fields=[entry.field(0), entry.field(1)],
    )
    return pa.Array.from_buffers(
        HEADER_TYPE, n, [_buf(list_validity), _buf(list_offsets)], children=[pairs]
    )


def new_consumer(config: Mapping[str, str], events: ClientEvents) -> NativeConsumer:
    """A fast-path consumer, with librdkafka errors translated like confluent-kafka's."""
    with kafka_errors("Creating a Kafka consumer on the executor"):
        return NativeConsumer(config, events)
