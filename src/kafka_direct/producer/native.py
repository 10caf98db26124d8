"""The C fast path for writing (``_rdkafka_produce``): Arrow batches straight into librdkafka.
Runs in Spark executors (Python workers).

The Python path (:class:`~kafka_direct.producer.batch_producer.PythonBatchProducer`) turns each
Arrow column into a list of Python objects and calls confluent-kafka's ``produce`` once per
record; on small records that is most of a writer's CPU. :class:`NativeBatchProducer` hands the
batch's buffers (values, keys, topics, partitions, headers) to a librdkafka producer of its own
in one call per batch, and no Python object is made per record. It implements the same
:class:`~kafka_direct.producer.batch_producer.BatchProducer` protocol, raises the same errors
(built by the same functions), and writes the same records: ``tests/unit/producer/
test_batch_producer.py`` runs every producer test on both, and
``tests/integration/test_sink_native.py`` compares what they write on a real broker.

:mod:`~kafka_direct.producer.write` uses it when all of these hold, and the Python path
otherwise, with the same results:

- the extension was compiled when the package was installed (it needs a C compiler);
- the librdkafka that confluent-kafka loaded can be found (both fast paths are loaded the same
  way, by :mod:`kafka_direct._native.loader`);
- the write does not set ``fastPath.enabled=false``;
- the environment variable ``KAFKA_DIRECT_NATIVE`` is not ``0`` in the Python workers (the
  same switch as for reads).

:func:`status` says which, and why.

What the producer does is the Python path's, in C (see ``_native/_rdkafka_produce.c`` and
``_produce_loop.c``): ``delivery.report.only.error``, so a delivered record costs nothing; the
first failed delivery raised with its topic, partition and cause; a full queue makes the write
wait, never fail or grow; a fatal error makes the producer unusable. Its librdkafka log lines go
through Python ``logging`` (the ``kafka_direct.librdkafka`` logger, with the rules of
:mod:`kafka_direct.kafka.logs`) and its error events to a
:class:`~kafka_direct.kafka.events.ClientEvents`, after every call, as the read side's do.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException

from kafka_direct._native.loader import DISABLE_ENV, NativeExtension, route_log_lines
from kafka_direct.kafka.events import ClientEvents
from kafka_direct.kafka.logs import client_scrubber
from kafka_direct.kafka.translate import kafka_errors
from kafka_direct.producer.batch_producer import (
    CHUNK,
    FatalLatch,
    bad_header_error,
    bad_partition_error,
    delivery_error,
    delivery_timeout_setting,
    flush_until_acknowledged,
    null_topic_error,
    producer_access,
    refused_error,
)
from kafka_direct.producer.columns import SinkColumns

__all__ = ["DISABLE_ENV", "NativeBatchProducer", "available", "new_batch_producer", "status"]

log = logging.getLogger(__name__)

# Why the extension's produce loop stopped (the STOP_ kinds of _produce_loop.c).
_REFUSED, _NULL_TOPIC, _BAD_PARTITION, _DELIVERY, _MALFORMED, _BAD_HEADER = 1, 2, 3, 4, 5, 6


def _import_extension() -> Any:
    from kafka_direct.producer import _rdkafka_produce

    return _rdkafka_produce


# The same loader as the read side's: the same switch, the same librdkafka.
_extension = NativeExtension(_import_extension, "producers")


def _load() -> Any:
    return _extension.load()


def available() -> bool:
    """Whether this process can write through the C fast path."""
    return _extension.available()


def status() -> str:
    """One line for users: which write path this process uses, and why."""
    return _extension.status("fast path (Arrow straight into librdkafka {version})")


# -- the batch's buffers, as the extension takes them ----------------------------------------------

_EMPTY = pa.py_buffer(b"")
_BINARY = (pa.binary(), pa.string())
_LARGE_BINARY = (pa.large_binary(), pa.large_string())


def _binary(array: pa.Array) -> tuple[Any, ...]:
    """(offset, length, validity, offsets, data, wide) of a binary or string array."""
    if array.type not in _BINARY and array.type not in _LARGE_BINARY:
        array = array.cast(pa.binary())  # e.g. a view type: Spark does not send one
    validity, offsets, data = array.buffers()[:3]
    return (
        array.offset,
        len(array),
        validity if array.null_count else None,
        offsets,
        data if data is not None else _EMPTY,
        array.type in _LARGE_BINARY,
    )


def _int32(array: pa.Array) -> tuple[Any, ...]:
    """(offset, length, validity, data) of an int32 array."""
    if array.type != pa.int32():
        array = array.cast(pa.int32())
    validity, data = array.buffers()[:2]
    return (array.offset, len(array), validity if array.null_count else None, data)


def _headers(array: pa.Array) -> tuple[Any, ...]:
    """Spark's headers, ``array<struct<key: string, value: binary>>``, for the extension: the
    list's buffers, its entries' validity, and their keys and values (``_produce_loop.c``)."""
    validity, offsets = array.buffers()[:2]
    entries = array.values  # the whole struct array: the list's offsets index it directly
    names = [entries.type.field(i).name.lower() for i in range(entries.type.num_fields)]
    key = entries.field(names.index("key") if "key" in names else 0)
    value = entries.field(names.index("value") if "value" in names else 1)
    return (
        array.offset,
        len(array),
        validity if array.null_count else None,
        offsets,
        pa.types.is_large_list(array.type),
        entries.offset,
        len(entries),
        entries.buffers()[0] if entries.null_count else None,
        _binary(key),
        _binary(value),
    )


class NativeBatchProducer:
    """:class:`~kafka_direct.producer.batch_producer.BatchProducer` on the C extension."""

    def __init__(self, config: Mapping[str, str]) -> None:
        module = _load()
        if module is None:
            raise RuntimeError(f"The write fast path is not available: {_extension.reason}")
        self._bootstrap = config.get("bootstrap.servers", "?")
        self._client = config.get("client.id", "kafka-direct-producer")
        self._timeout_option, self._timeout_ms = delivery_timeout_setting(config)
        self._latch = FatalLatch(producer_access(config))
        self._events = ClientEvents("The Kafka producer")
        # The client's secret values, out of its log lines and error events (None: it has none).
        self._scrub = client_scrubber(config, self._events)
        with kafka_errors("Creating the Kafka producer on the executor"):
            self._impl = module.Producer(dict(config))

    @property
    def usable(self) -> bool:
        return self._latch.usable

    # -- what the extension reported -------------------------------------------------------

    def _drain(self) -> None:
        """After every call: log lines to :data:`~kafka_direct.kafka.logs.LIBRDKAFKA_LOG`,
        error events to the client's events (a fatal one makes the producer unusable), and the
        first failed delivery kept for :meth:`check`. Nothing to take, the common case, costs
        two C calls that allocate nothing."""
        taken = self._impl.take_events()
        if taken is not None:
            errors, lines, dropped, dropped_worst = taken
            route_log_lines(self._client, lines, dropped, dropped_worst, self._scrub)
            for code, reason, fatal in errors:
                error = KafkaError(code, reason, fatal=fatal)
                self._events(error)
                if fatal:
                    self._latch.fatal(error)
        failed = self._impl.delivery_error()
        if failed is not None:
            _count, code, reason, topic, partition = failed
            self._latch.keep(
                lambda: delivery_error(
                    KafkaError(code, reason), topic, partition, bootstrap=self._bootstrap,
                    timeout_option=self._timeout_option, timeout_ms=self._timeout_ms,
                    events=self._events, access=self._latch.access,
                ),
                fatal=code == KafkaError._FATAL,
            )  # fmt: skip

    def check(self) -> None:
        self._latch.check()

    # -- producing ------------------------------------------------------------------------

    def produce_batch(self, batch: pa.RecordBatch, columns: SinkColumns) -> None:
        if batch.num_rows == 0:
            return
        spec = (
            batch.num_rows,
            _binary(batch.column(columns.value)),
            None if columns.key is None else _binary(batch.column(columns.key)),
            columns.topic,
            None if columns.topic is not None else _binary(batch.column(columns.topic_column)),
            None if columns.partition is None else _int32(batch.column(columns.partition)),
            None if columns.headers is None else _headers(batch.column(columns.headers)),
            CHUNK,
        )
        try:
            stopped = self._impl.produce(*spec)
        finally:
            self._drain()
        if stopped is not None:
            raise self._stopped(*stopped).with_traceback(None)
        self.check()

    def _stopped(
        self, kind: int, row: int, code: int, reason: str, topic: str, partition: int
    ) -> Exception:
        """The error for why the extension's loop stopped at ``row`` (the rows before it were
        handed to librdkafka, as the Python path hands them over one by one)."""
        if kind == _REFUSED:
            if code == KafkaError._FATAL:
                self._note_fatal()
            if self._latch.error is not None:
                return self._latch.error  # the delivery error that came first explains it better
            return refused_error(KafkaException(KafkaError(code, reason)), topic, partition)
        if kind == _NULL_TOPIC:
            return null_topic_error(row)
        if kind == _BAD_PARTITION:
            return bad_partition_error(row, topic, partition)
        if kind == _BAD_HEADER:
            return bad_header_error(row, topic, reason)
        if kind == _DELIVERY:
            self._note_fatal()
            if self._latch.error is not None:
                return self._latch.error
        if kind == _MALFORMED:
            return ValueError(f"Row {row} of an Arrow batch is malformed: {reason}")
        return RuntimeError(f"The write fast path stopped at row {row} ({kind}): {reason}")

    def _note_fatal(self) -> None:
        """A fatal error that the error events have not brought yet: ask the handle."""
        fatal = self._impl.fatal_error()
        if fatal is not None:
            self._latch.fatal(KafkaError(fatal[0], fatal[1], fatal=True))

    def flush(self, timeout_s: float) -> None:
        def flush_slice(slice_s: float) -> int:
            try:
                return int(self._impl.flush(slice_s))
            finally:
                self._drain()

        flush_until_acknowledged(
            flush_slice, self.check, timeout_s, bootstrap=self._bootstrap,
            timeout_option=self._timeout_option, timeout_ms=self._timeout_ms,
            events=self._events,
        )  # fmt: skip

    def abort(self) -> None:
        try:
            self._impl.purge()
            self._impl.poll(0)
        # Best effort after a failure that is already being reported.
        except Exception as exc:  # noqa: BLE001
            log.debug("Purging the producer's queue failed, ignored: %r", exc)
        finally:
            self._drain()

    def close(self) -> None:
        try:
            self._impl.close()
        finally:
            self._drain()  # what the destroy reported

    def __repr__(self) -> str:
        state = "usable" if self.usable else "unusable"
        return f"NativeBatchProducer({self._bootstrap}, {state})"


def new_batch_producer(config: Mapping[str, str]) -> NativeBatchProducer:
    """The fast path's producer for :func:`kafka_direct.producer.write.register_fast_path`."""
    return NativeBatchProducer(config)
