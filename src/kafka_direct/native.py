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
"""

from __future__ import annotations

import glob
import logging
import os
import threading
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException

from kafka_direct.kafka_io import ClientEvents, kafka_errors
from kafka_direct.rows import ARROW_SCHEMA, ARROW_SCHEMA_WITH_HEADERS, HEADER_TYPE, TIMESTAMP_US

__all__ = ["DISABLE_ENV", "NativeConsumer", "available", "status"]

log = logging.getLogger(__name__)

#: Set to ``0`` in the Python workers' environment to read through confluent-kafka's messages.
DISABLE_ENV = "KAFKA_DIRECT_NATIVE"

#: Most key + value bytes in one Arrow batch: the binary columns' int32 offsets hold 2 GiB, and
#: a bound keeps a batch of large records from growing without limit.
MAX_BATCH_BYTES = 256 * 1024 * 1024

_lock = threading.Lock()
_module: Any = None
_version: str | None = None
_reason: str | None = None


class _Failure(KafkaException):
    """What the extension raises: a ``KafkaException`` like confluent-kafka's own, so it goes
    through the same translation (``kafka_io.kafka_errors``)."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(KafkaError(code, reason))


def _librdkafka_path() -> str | None:
    """The librdkafka that confluent-kafka uses: mapped into this process, or beside it."""
    import confluent_kafka

    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                path = line.rsplit(" ", 1)[-1].strip()
                if "librdkafka" in os.path.basename(path) and os.path.isfile(path):
                    return path
    except OSError:
        pass
    package_dir = os.path.dirname(os.path.dirname(confluent_kafka.__file__))
    for pattern in ("confluent_kafka.libs/librdkafka*", "confluent_kafka/.dylibs/librdkafka*"):
        found = sorted(glob.glob(os.path.join(package_dir, pattern)))
        if found:
            return found[0]
    import ctypes.util

    return ctypes.util.find_library("rdkafka")


def _load() -> Any:
    global _module, _version, _reason
    with _lock:
        if _module is not None or _reason is not None:
            return _module
        if os.environ.get(DISABLE_ENV, "1").strip() == "0":
            _reason = f"disabled by {DISABLE_ENV}=0"
            return None
        try:
            from kafka_direct import _rdkafka_arrow  # type: ignore[attr-defined]
        except ImportError as exc:
            _reason = f"the extension is not built ({exc})"
            return None
        path = _librdkafka_path()
        if path is None:
            _reason = "confluent-kafka's librdkafka was not found"
            return None
        try:
            _version = _rdkafka_arrow.load(path)
        except ImportError as exc:
            _reason = str(exc)
            return None
        _rdkafka_arrow.set_failure(_Failure)
        _module = _rdkafka_arrow
        log.debug("kafka_direct fast path: librdkafka %s from %s", _version, path)
        return _module


def available() -> bool:
    """Whether this process reads through the C fast path."""
    return _load() is not None


def status() -> str:
    """One line for users: which read path this process uses, and why."""
    if available():
        return f"fast path (librdkafka {_version} straight into Arrow)"
    return f"Python path: {_reason}"


class NativeConsumer:
    """A consumer of one assigned partition that reads into Arrow batches.

    Implements what ``fetch`` and the consumer pool use of ``confluent_kafka.Consumer``
    (``assign``, ``get_watermark_offsets``, ``close``), plus :meth:`consume_batch`.
    """

    def __init__(self, config: Mapping[str, str], events: ClientEvents | None = None) -> None:
        module = _load()
        if module is None:
            raise RuntimeError(f"The fast path is not available: {_reason}")
        self._events = events
        self._impl = module.Consumer(dict(config))

    def _drain_events(self) -> None:
        if self._events is None:
            return
        for code, reason, fatal in self._impl.take_events():
            self._events(KafkaError(code, reason, fatal=fatal))

    def assign(self, partitions: list[Any]) -> None:
        (tp,) = partitions
        try:
            self._impl.assign(tp.topic, tp.partition, tp.offset)
        finally:
            self._drain_events()

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
    ) -> tuple[pa.RecordBatch | None, int, bool, int | None, tuple[int, str] | None] | None:
        """One read of up to ``n`` records or events: ``None`` if nothing came in ``timeout_s``,
        else (batch of the records in ``[nxt, until)`` or ``None``, offset of the last record
        taken off the queue or -1, whether one at or past ``until`` came, the log end if the
        read ended in an EOF event or -1 for out of range, an error event (code, reason))."""
        try:
            got = self._impl.consume(partition, nxt, until, n, timeout_s, MAX_BATCH_BYTES, headers)
        finally:
            self._drain_events()
        if got is None:
            return None
        rows, columns, last, beyond, eof, error = got
        batch = _record_batch(topic, partition, rows, columns) if rows else None
        return batch, last, beyond, eof, error

    def close(self) -> None:
        self._impl.close()


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
    ko, kd, kv, vo, vd, vv, offsets, stamps, types = columns[:9]
    arrays = [
        pa.Array.from_buffers(pa.binary(), n, [_buf(kv), _buf(ko), _buf(kd)]),
        pa.Array.from_buffers(pa.binary(), n, [_buf(vv), _buf(vo), _buf(vd)]),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
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
