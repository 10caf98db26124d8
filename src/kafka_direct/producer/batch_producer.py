"""Producing Arrow batches to Kafka: the interface a write task needs, and its reference
implementation on confluent-kafka. Runs in Spark executors (Python workers).

:class:`BatchProducer` is what :mod:`~kafka_direct.producer.write` drives: ``produce_batch`` for
every Arrow batch of the task, ``check`` now and then, ``flush`` at the end. The first delivery
error is raised (by whichever of the three calls sees it) with the topic, the partition and the
cause, so the task fails: nothing else decides whether a record was written. A C implementation
(producing straight from the Arrow buffers) implements the same protocol; this one is the
reference and the fallback.

:class:`PythonBatchProducer` is the per-record loop, kept as fast as Python allows:

- columns become Python lists once per batch (``to_pylist``), never cell by cell;
- ``produce`` runs in a tight loop with positional arguments; the common shapes (one topic,
  no headers or explicit partitions; with or without keys) have loops of their own;
- ``delivery.report.only.error``: librdkafka reports only the records that failed, so a
  successful record costs no Python callback (a record still counts as written only once the
  broker acknowledged it: ``flush`` returns when none is left in the queue);
- a full queue (``BufferError``) makes the task wait for the broker, serving delivery reports
  meanwhile, and retry: it never fails the task and never grows the queue. A broker that does
  not answer fails the waiting records after ``kafka.delivery.timeout.ms``, so nothing hangs.

A fatal error (librdkafka's idempotent producer gives one when the broker loses its sequence)
leaves the producer unusable: :attr:`PythonBatchProducer.usable` turns False, and the pool
never hands it out again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Protocol, TypeVar

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException, Producer

from kafka_direct.config.clients import DEFAULT_MESSAGE_MAX_BYTES
from kafka_direct.errors import (
    ConfigurationError,
    DeliveryError,
    KafkaClientError,
    NotAuthorizedError,
)
from kafka_direct.kafka.authorization import Access
from kafka_direct.kafka.events import ClientEvents
from kafka_direct.kafka.logs import client_hooks
from kafka_direct.kafka.translate import translate
from kafka_direct.producer.columns import SinkColumns

__all__ = [
    "BatchProducer",
    "FatalLatch",
    "PythonBatchProducer",
    "bad_header_error",
    "bad_partition_error",
    "delivery_error",
    "delivery_timeout_setting",
    "flush_until_acknowledged",
    "next_flush_wait",
    "null_topic_error",
    "refused_error",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Records handed to librdkafka between two polls: often enough to see a delivery error early,
#: rare enough to cost nothing per record.
CHUNK = 8192

#: How long one wait for room in a full queue lasts before the record is offered again.
FULL_QUEUE_WAIT_S = 0.002

#: The longest single wait inside ``flush``, so the first delivery error fails the task at once
#: instead of after every other record was delivered or failed.
FLUSH_SLICE_S = 0.2

#: The first slices of a flush, for :data:`QUICK_FLUSH_S`: with ``delivery.report.only.error``
#: nothing wakes librdkafka's flush when a record is acknowledged, so it looks again only every
#: 10 ms, and a small task's flush (one round trip per partition) would end only on that tick.
QUICK_SLICE_S = 0.001
QUICK_FLUSH_S = 0.05


class BatchProducer(Protocol):
    """What a write task needs from a producer (see the module docstring).

    Implementations raise :class:`~kafka_direct.errors.KafkaClientError` for the first delivery
    error, naming the topic, the partition and the cause, and
    :class:`~kafka_direct.errors.ConfigurationError` for a record with no topic.
    """

    @property
    def usable(self) -> bool:
        """False once the producer saw an error that makes it unusable (a fatal error)."""
        ...

    def produce_batch(self, batch: pa.RecordBatch, columns: SinkColumns) -> None:
        """Hand every row of ``batch`` to the producer; may raise an earlier delivery error."""
        ...

    def check(self) -> None:
        """Raise the first delivery error seen so far, if any."""
        ...

    def flush(self, timeout_s: float) -> None:
        """Wait until every record is acknowledged; raise the first delivery error, or a
        timeout naming the records left and ``kafka.delivery.timeout.ms``."""
        ...

    def abort(self) -> None:
        """Drop the records not yet delivered (after a failure), without waiting."""
        ...

    def close(self) -> None: ...


def delivery_timeout_setting(config: Mapping[str, str]) -> tuple[str, str]:
    """The ``kafka.``-prefixed option that bounds delivery, and its value, for messages."""
    for name in ("delivery.timeout.ms", "message.timeout.ms"):
        if name in config:
            return f"kafka.{name}", config[name]
    return "kafka.delivery.timeout.ms", "300000"  # librdkafka's default


# The errors a write raises, built here for both implementations (this one and the C path of
# kafka_direct.producer.native), so that a failure reads the same whichever path wrote.


def delivery_error(
    error: KafkaError,
    topic: str | None,
    partition: int | None,
    *,
    bootstrap: str,
    timeout_option: str,
    timeout_ms: str,
    events: ClientEvents,
    access: Access | None = None,
) -> KafkaClientError:
    """A record the broker did not acknowledge: its topic, partition and cause; a timeout also
    names the brokers, the delivery timeout and what the client reported."""
    # A record that never got a partition (no metadata yet) reports None or -1.
    known = partition is not None and partition >= 0
    where = f"{topic}-{partition}" if known else f"{topic} (no partition assigned yet)"
    context = f"Writing to Kafka failed: a record for {where} was not delivered"
    if access is not None and topic:
        access = replace(access, topics=[topic])
    base = translate(error, context, access=access)
    if isinstance(base, NotAuthorizedError):
        return base
    message = str(base)
    if error.code() in (KafkaError._MSG_TIMED_OUT, KafkaError.REQUEST_TIMED_OUT):
        seen = events.summary()
        message += (
            f". No broker at {bootstrap} acknowledged it within {timeout_option}"
            f"={timeout_ms} ms"
            + (f"; the client reported: {seen}" if seen else "")
            + f". Check that the brokers are up and reachable, or raise '{timeout_option}'."
        )
    return DeliveryError(
        message,
        topic=topic,
        partition=partition if known else None,
        code=base.code,
        retriable=base.retriable,
    )


def producer_access(config: Mapping[str, str]) -> Access:
    """What a sink's producer does: WRITE on its topics, under the exactly-once sink's
    transactional id prefix if any (each task's id is ``<prefix>-<partition id>``)."""
    txn = config.get("transactional.id")
    prefix = txn.rsplit("-", 1)[0] if txn else None
    return Access(config, topic_operations="WRITE", transactional_prefix=prefix)


def refused_error(exc: BaseException, topic: str, partition: int) -> KafkaClientError:
    """A record librdkafka would not take (``produce`` raised, or the C path was refused)."""
    where = f"{topic}-{partition}" if partition >= 0 else topic
    if isinstance(exc, KafkaException):
        kerr = exc.args[0] if exc.args else None
        if isinstance(kerr, KafkaError) and kerr.code() == KafkaError.MSG_SIZE_TOO_LARGE:
            # librdkafka's own words say "Broker:", but it refused the record itself, before
            # sending: say which limit, and how to raise it.
            return KafkaClientError(
                f"Writing to Kafka failed: a record for {where} is larger than the producer's "
                f"kafka.message.max.bytes allows ({DEFAULT_MESSAGE_MAX_BYTES} bytes unless set, "
                "as the Java producer's max.request.size). To write it, raise "
                "kafka.message.max.bytes (or kafka.max.request.size), and the topic's "
                "max.message.bytes on the brokers.",
                code="MSG_SIZE_TOO_LARGE",
            )
        return translate(exc, f"Writing to Kafka failed: a record for {where} was refused")
    return KafkaClientError(
        f"Writing to Kafka failed: a record for {where} was refused: {exc}",
        code="_INVALID_ARG",
    )


def null_topic_error(row: int) -> ConfigurationError:
    """A row with a null 'topic' column and no 'topic' option."""
    return ConfigurationError(
        "topic",
        None,
        "a topic for every record: the 'topic' option, or a non-null 'topic' column",
        f"Row {row} of a batch has a null topic. Set .option('topic', 'name'), or fill the column.",
    )


def bad_partition_error(row: int, topic: str, partition: int) -> KafkaClientError:
    """A row with a negative 'partition'."""
    return KafkaClientError(
        f"Writing to Kafka failed: row {row} of a batch for topic '{topic}' has partition "
        f"{partition}; a partition is >= 0, or null for the partitioner.",
        code="_INVALID_ARG",
    )


def bad_header_error(row: int, topic: str, what: str) -> KafkaClientError:
    """A null entry in the headers array, or an entry with a null key: Kafka has neither."""
    return KafkaClientError(
        f"Writing to Kafka failed: row {row} of a batch for topic '{topic}' has {what}; a Kafka "
        "header has a string key (its value may be null). Filter such entries out of the "
        "'headers' column.",
        code="_INVALID_ARG",
    )


def next_flush_wait(elapsed_s: float, remaining_s: float) -> float:
    """How long the next slice of a flush may wait: :data:`QUICK_SLICE_S` for the first
    :data:`QUICK_FLUSH_S`, then :data:`FLUSH_SLICE_S`, never past the flush's deadline."""
    longest = QUICK_SLICE_S if elapsed_s < QUICK_FLUSH_S else FLUSH_SLICE_S
    return min(longest, max(remaining_s, 0.0))


def flush_until_acknowledged(
    flush_slice: Callable[[float], int],
    check: Callable[[], None],
    timeout_s: float,
    *,
    bootstrap: str,
    timeout_option: str,
    timeout_ms: str,
    events: ClientEvents,
) -> None:
    """Flush in slices (:func:`next_flush_wait`; ``flush_slice`` returns the records still
    queued), calling ``check`` after each so a delivery error fails the task at once; raise when
    records are still not acknowledged after ``timeout_s``. Both producers flush this way."""
    started = time.monotonic()
    deadline = started + timeout_s
    while True:
        now = time.monotonic()
        remaining = max(deadline - now, 0.0)
        left = flush_slice(next_flush_wait(now - started, remaining))
        check()
        if not left:
            return
        if remaining <= 0:
            seen = events.summary()
            raise KafkaClientError(
                f"Writing to Kafka failed: {left} record(s) were not acknowledged by the "
                f"broker(s) at {bootstrap} within {timeout_s:g} s, though "
                f"{timeout_option}={timeout_ms} ms should have failed them"
                + (f"; the client reported: {seen}" if seen else "")
                + ".",
                code="_TIMED_OUT",
                retriable=True,
            )


class FatalLatch:
    """The first error that fails a producer's task, and whether the producer may serve another
    one. Both producers keep theirs here, whichever write path they take.

    Set from librdkafka's threads (delivery reports, ``error_cb``) as well as from the task's,
    so it holds a lock. A fatal error (librdkafka's idempotent producer gives one when the
    broker loses its sequence) makes the producer unusable for good: the pool never hands it
    out again (:mod:`~kafka_direct.producer.pool`).
    """

    def __init__(self, access: Access | None = None) -> None:
        #: What the producer does, for naming a refusal (an idempotent producer without
        #: IDEMPOTENT_WRITE gets CLUSTER_AUTHORIZATION_FAILED as a fatal error).
        self.access = access
        self._lock = threading.Lock()
        self._error: KafkaClientError | None = None
        self._usable = True

    @property
    def usable(self) -> bool:
        return self._usable

    @property
    def error(self) -> KafkaClientError | None:
        """The first error kept, if any."""
        return self._error

    def keep(self, make: Callable[[], KafkaClientError], *, fatal: bool = False) -> None:
        """Keep ``make()`` unless an error came first (the first one explains the failure);
        ``fatal``: the producer is no longer usable."""
        if fatal:
            self._usable = False
        with self._lock:
            if self._error is None:
                self._error = make()

    def fatal(self, error: KafkaError) -> None:
        """librdkafka reported a fatal error."""
        self.keep(
            lambda: translate(error, "The Kafka producer failed (fatal error)", access=self.access),
            fatal=True,
        )

    def unusable(self) -> None:
        """A fatal error surfaced as an exception, which the task raises itself."""
        self._usable = False

    def check(self) -> None:
        """Raise the first error kept, if any."""
        error = self._error
        if error is not None:
            raise error.with_traceback(None)


class _Events(ClientEvents):
    """The producer's ``error_cb``: logs like every client's, and notes a fatal error."""

    def __init__(self, on_fatal: Callable[[KafkaError], None]) -> None:
        super().__init__("The Kafka producer")
        self._on_fatal = on_fatal

    def __call__(self, error: KafkaError) -> None:
        super().__call__(error)
        if error.fatal():
            self._on_fatal(error)


class PythonBatchProducer:
    """:class:`BatchProducer` on ``confluent_kafka.Producer``: the reference implementation."""

    def __init__(self, config: Mapping[str, str]) -> None:
        self._bootstrap = config.get("bootstrap.servers", "?")
        self._timeout_option, self._timeout_ms = delivery_timeout_setting(config)
        self._latch = FatalLatch(producer_access(config))
        self._events = _Events(self._latch.fatal)
        settings: dict[str, Any] = {
            **config,
            **client_hooks(self._events, config),
            # Only failed records are reported: a success costs no Python call (module docstring).
            "delivery.report.only.error": True,
            "on_delivery": self._on_delivery,
        }
        try:
            self._producer = Producer(settings)
        except KafkaException as exc:
            raise translate(exc, "Creating the Kafka producer on the executor") from exc

    @property
    def usable(self) -> bool:
        return self._latch.usable

    # -- delivery reports and errors ------------------------------------------------------

    def _on_delivery(self, error: KafkaError | None, message: Any) -> None:
        if error is None:
            return
        self._latch.keep(
            lambda: self._delivery_error(error, message.topic(), message.partition()),
            fatal=error.fatal(),
        )

    def _delivery_error(
        self, error: KafkaError, topic: str | None, partition: int | None
    ) -> KafkaClientError:
        return delivery_error(
            error, topic, partition, bootstrap=self._bootstrap,
            timeout_option=self._timeout_option, timeout_ms=self._timeout_ms, events=self._events,
            access=self._latch.access,
        )  # fmt: skip

    def check(self) -> None:
        self._latch.check()

    def _call(self, what: str, fn: Callable[..., T], *args: Any) -> T:
        """Run a poll/flush: a fatal error surfaces from them as an exception (confluent-kafka
        raises it, sometimes as a SystemError whose cause is the KafkaException)."""
        try:
            return fn(*args)
        except (KafkaException, SystemError) as exc:
            cause = exc if isinstance(exc, KafkaException) else exc.__cause__
            if not isinstance(cause, KafkaException):
                raise
            kerr = cause.args[0] if cause.args else None
            fatal = isinstance(kerr, KafkaError) and (
                kerr.fatal() or kerr.code() == KafkaError._FATAL
            )
            if fatal:
                self._latch.unusable()
            self.check()  # a delivery error that came first is the better explanation
            context = f"Writing to Kafka failed while {what}"
            if fatal:
                context += (
                    " (a fatal producer error: this producer is closed, a retry gets a new one)"
                )
            raise translate(cause, context, access=self._latch.access) from None

    # -- producing ------------------------------------------------------------------------

    def produce_batch(self, batch: pa.RecordBatch, columns: SinkColumns) -> None:
        if batch.num_rows == 0:
            return
        values = batch.column(columns.value).to_pylist()
        keys = None if columns.key is None else batch.column(columns.key).to_pylist()
        if columns.simple and columns.topic is not None:
            for start in range(0, len(values), CHUNK):
                end = start + CHUNK
                if keys is None:
                    self._produce_values(columns.topic, values[start:end])
                else:
                    self._produce_keyed(columns.topic, values[start:end], keys[start:end])
                self._serve()
        else:
            self._produce_rows(batch, columns, values, keys)

    # The loops below are the hot path: a try block costs nothing until something is raised.

    def _produce_values(self, topic: str, values: list[Any]) -> None:
        produce = self._producer.produce
        for value in values:
            try:
                produce(topic, value)
            except BufferError:
                self._when_room(topic, value, None)
            except (KafkaException, TypeError, ValueError) as exc:
                raise self._refused(exc, topic, -1) from None

    def _produce_keyed(self, topic: str, values: list[Any], keys: list[Any]) -> None:
        produce = self._producer.produce
        for value, key in zip(values, keys, strict=True):
            try:
                produce(topic, value, key)
            except BufferError:
                self._when_room(topic, value, key)
            except (KafkaException, TypeError, ValueError) as exc:
                raise self._refused(exc, topic, -1) from None

    def _produce_rows(
        self, batch: pa.RecordBatch, columns: SinkColumns, values: list[Any], keys: list[Any] | None
    ) -> None:
        """Any shape: a topic column, explicit partitions, headers."""
        n = len(values)
        topics = _column(batch, columns.topic_column)
        partitions = _column(batch, columns.partition)
        headers = _column(batch, columns.headers)
        produce = self._producer.produce
        for i in range(n):
            topic = columns.topic if topics is None else topics[i]
            if topic is None:
                raise null_topic_error(i)
            partition = -1 if partitions is None or partitions[i] is None else partitions[i]
            if partition < 0 and partitions is not None and partitions[i] is not None:
                raise bad_partition_error(i, topic, partition)
            row_headers = None if headers is None else headers[i]
            hdrs = None if not row_headers else _headers(row_headers, i, topic)
            key = None if keys is None else keys[i]
            try:
                produce(topic, values[i], key, partition, headers=hdrs)
            except BufferError:
                self._when_room(topic, values[i], key, partition, hdrs)
            except (KafkaException, TypeError, ValueError) as exc:
                raise self._refused(exc, topic, partition) from None
            if not (i + 1) % CHUNK:
                self._serve()
        self._serve()

    def _refused(self, exc: BaseException, topic: str, partition: int) -> KafkaClientError:
        """``produce`` raised: a record librdkafka will not take, or a fatal error."""
        if isinstance(exc, KafkaException):
            kerr = exc.args[0] if exc.args else None
            if isinstance(kerr, KafkaError) and (kerr.fatal() or kerr.code() == KafkaError._FATAL):
                self._latch.unusable()
            if self._latch.error is not None:
                return self._latch.error  # the delivery error that came first explains it better
        return refused_error(exc, topic, partition)

    def _when_room(
        self,
        topic: str,
        value: Any,
        key: Any,
        partition: int = -1,
        headers: list[tuple[Any, Any]] | None = None,
    ) -> None:
        """The queue is full: serve delivery reports until it has room, then produce. Bounded by
        the delivery timeout: records that wait that long fail, and the error is raised."""
        while True:
            self._call("waiting for room in the queue", self._producer.poll, FULL_QUEUE_WAIT_S)
            self.check()
            try:
                if headers is None:
                    self._producer.produce(topic, value, key, partition)
                else:
                    self._producer.produce(topic, value, key, partition, headers=headers)
                return
            except BufferError:
                continue
            except (KafkaException, TypeError, ValueError) as exc:
                raise self._refused(exc, topic, partition) from None

    def _serve(self) -> None:
        self._call("producing", self._producer.poll, 0)
        self.check()

    def flush(self, timeout_s: float) -> None:
        flush_until_acknowledged(
            lambda slice_s: self._call("flushing", self._producer.flush, slice_s),
            self.check, timeout_s, bootstrap=self._bootstrap,
            timeout_option=self._timeout_option, timeout_ms=self._timeout_ms,
            events=self._events,
        )  # fmt: skip

    def abort(self) -> None:
        try:
            self._producer.purge(True, True, False)
            self._producer.poll(0)
        # Best effort after a failure that is already being reported.
        except Exception as exc:  # noqa: BLE001
            log.debug("Purging the producer's queue failed, ignored: %r", exc)

    def close(self) -> None:
        """Release the client; never raises. By then the task's outcome is decided (every record
        acknowledged, the transaction committed, or the task failing with its own error), and
        confluent-kafka's close aborts a transaction still open: of a producer fenced by another
        attempt of its task, it raises that fence again, which would hide the task's outcome."""
        close = getattr(self._producer, "close", None)  # confluent-kafka >= 2.5
        if close is None:
            return
        try:
            close()
        # Best effort, as abort(): the outcome was reported (or returned) before.
        except Exception as exc:  # noqa: BLE001
            log.debug("Closing the producer failed, ignored: %r", exc)

    def __repr__(self) -> str:
        state = "usable" if self.usable else "unusable"
        return f"PythonBatchProducer({self._bootstrap}, {state})"


def _column(batch: pa.RecordBatch, position: int | None) -> list[Any] | None:
    return None if position is None else batch.column(position).to_pylist()


def _headers(row_headers: list[Any], row: int, topic: str) -> list[tuple[Any, Any]]:
    """A row's headers for ``produce``; a null entry or key is refused, as the C path does."""
    pairs = []
    for h in row_headers:
        if h is None:
            raise bad_header_error(row, topic, "a null header")
        # By position, as Spark reads the struct: its fields may be named in any case
        # (Key, VALUE), which Spark's type check accepts.
        key, value = h.values()
        if key is None:
            raise bad_header_error(row, topic, "a header with a null key")
        pairs.append((key, value))
    return pairs
