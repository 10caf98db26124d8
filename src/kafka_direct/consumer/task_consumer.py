"""What both consumer kinds of a read task share. Runs in Spark executors (Python workers).

A read task reads its ranges with one of two kinds of :class:`TaskConsumer`:
:class:`~kafka_direct.consumer.fetch.PartitionConsumer` (one range) or
:class:`~kafka_direct.consumer.packed.GroupConsumer` (the ranges of a packed task, together).
Each has one ``read`` (the task's :class:`ReadTask`) and one ``take`` (one read of the queue);
which read path takes records, the C fast path (:mod:`kafka_direct.consumer.native`) or
confluent-kafka's messages, is decided when the client is set, never at every read.

Both fetch loops end a read of the queue the same way: what came is a :class:`Taken` with an
explicit :class:`Outcome`, and :class:`Progress` bounds the time without progress
(``kafkaConsumer.pollTimeoutMs``), stopping at once on a configuration error the client
reported (authentication, TLS).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, NamedTuple, Protocol, TypedDict, cast

import pyarrow as pa

from kafka_direct.config.clients import (
    DEFAULT_MAX_BATCH_BYTES,
    IDLE_QUEUE_RECORDS,
    ExecutorSettings,
)
from kafka_direct.consumer.native import NativeConsumer
from kafka_direct.errors import FetchTimeoutError
from kafka_direct.kafka.authorization import Access
from kafka_direct.kafka.events import ClientEvents
from kafka_direct.offsets import OffsetRange, TopicPartition

__all__ = [
    "POSITIONING",
    "SKIP_AHEAD_BYTES",
    "SKIP_AHEAD_MAX_RECORDS",
    "FetchOptions",
    "KafkaConsumerLike",
    "OnSkip",
    "Outcome",
    "Progress",
    "ReadTask",
    "Taken",
    "TaskConsumer",
]

#: ``on_skip(range, first_lost, resume)``: offsets ``[first_lost, resume)`` of ``range`` were
#: skipped as lost (see :func:`fetch_range`).
OnSkip = Callable[[OffsetRange, int, int], None]

#: The log-end slot of a read's answer for "offset out of range" (a log end is never < 0): the
#: C fast path returns this value (``eof`` in ``_rdkafka_consume.c``), and :func:`_split_events`
#: the same, so that :meth:`Outcome.of` reads both: the two must not drift apart.
_OUT_OF_RANGE = -1

#: How far ahead of a pooled consumer's queue a task's start may be and still be reached by
#: reading forward through the queue (dropping the records before it) instead of re-assigning.
#: Spark's Python workers are separate processes, each with its own pool, and Spark hands a
#: task to whichever worker is free: about half the time a worker's consumer is one micro-batch
#: behind, with the records it needs already in its prefetch queue. Re-assigning throws that
#: queue away and waits for a new fetch (a round trip, docs/performance.md); reading through
#: the queue costs far less per record. The skip is bounded in bytes (half the executors'
#: default 16 MB prefetch queue, estimated from the record sizes this consumer has read) and
#: in records, so that when the records are not queued, reading through them costs no more
#: than a fetch would have.
SKIP_AHEAD_BYTES = 8 * 1024 * 1024
SKIP_AHEAD_MAX_RECORDS = 100_000

#: How this process's consumers were positioned for their reads, for task statistics
#: (:mod:`kafka_direct.consumer.read`): ``kept`` (the queue stood at the task's start),
#: ``skipped`` (read forward through the queue), ``assigned`` (a fresh assignment), ``renewed``
#: (a new client, then a fresh assignment).
POSITIONING: Counter[str] = Counter()


class KafkaConsumerLike(Protocol):
    """The part of ``confluent_kafka.Consumer`` the fetcher uses (fakes implement it in tests)."""

    def assign(self, partitions: list[Any]) -> None: ...

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Any]: ...

    def get_watermark_offsets(
        self, partition: Any, timeout: float = ..., cached: bool = ...
    ) -> tuple[int, int]: ...

    def close(self) -> None: ...


class FetchOptions(TypedDict):
    """The source options a fetch loop obeys (see :func:`fetch_range`)."""

    poll_timeout_ms: int
    fail_on_data_loss: bool
    batch_size: int
    include_headers: bool
    max_batch_bytes: int


@dataclass(frozen=True)
class ReadTask:
    """What one Spark read task reads: its non-empty ranges, with the settings pickled from the
    driver. ``log_starts``: the partitions' first offsets when the driver planned the ranges,
    where it knew them; ``on_skip`` hears of offsets skipped as lost."""

    ranges: Sequence[OffsetRange]
    settings: ExecutorSettings
    log_starts: Mapping[TopicPartition, int] = field(default_factory=dict)
    on_skip: OnSkip | None = None

    @property
    def options(self) -> FetchOptions:
        s = self.settings
        return FetchOptions(
            poll_timeout_ms=s.poll_timeout_ms,
            fail_on_data_loss=s.fail_on_data_loss,
            batch_size=s.batch_size,
            include_headers=s.include_headers,
            max_batch_bytes=s.max_batch_bytes,
        )


class TaskConsumer:
    """A Kafka client that reads a task's ranges, plus what *we* know of its queue. The two
    kinds: :class:`PartitionConsumer` (one range) and
    :class:`~kafka_direct.consumer.packed.GroupConsumer` (a packed task's ranges). Each has one
    ``read`` (the task's ranges) and one ``take`` (one read of the queue); which read path
    takes records, the C fast path or confluent-kafka's messages, is decided when the client
    is set, not at every read."""

    def __init__(
        self, consumer: KafkaConsumerLike | NativeConsumer, events: ClientEvents | None = None
    ) -> None:
        self._native: NativeConsumer | None = None
        self.consumer = consumer
        #: The consumer's ``error_cb`` (explains a timeout; stops waiting on a config error).
        self.events = events
        #: The offset after the last record taken off the queue (None: not known).
        self.next_offset: int | None = None
        #: The client's settings and group, for naming what Kafka's authorizer refused in a
        #: task (set where the client is made: :mod:`~kafka_direct.consumer.read`).
        self.access: Access | None = None
        #: Mean key + value bytes of the records last read (``None`` before any): sizes a
        #: budgeted read's first chunk (:mod:`~kafka_direct.consumer.budget`) and the skip-ahead.
        self.record_bytes: float | None = None
        #: The client's ``queued.min.messages`` and ``queued.max.messages.kbytes`` (in bytes):
        #: what librdkafka prefetches while the consumer idles (see :meth:`idle_prefetch_bytes`;
        #: set where the client is made, :mod:`~kafka_direct.consumer.read`).
        self.queue_records = IDLE_QUEUE_RECORDS
        self.queue_bytes = DEFAULT_MAX_BATCH_BYTES

    def access_to(self, topics: Iterable[str]) -> Access | None:
        """:attr:`access` reading ``topics``, for the translator."""
        if self.access is None:
            return None
        return replace(self.access, topics=sorted(set(topics)))

    def skip_ahead_limit(self) -> int:
        """How many offsets ahead of its queue a read may start and still be reached by
        reading forward (see :data:`SKIP_AHEAD_BYTES`); 0 before any record was read."""
        if self.record_bytes is None:
            return 0
        return min(SKIP_AHEAD_MAX_RECORDS, int(SKIP_AHEAD_BYTES / max(self.record_bytes, 1.0)))

    def idle_prefetch_bytes(self) -> int:
        """About how many bytes of records this consumer's queue holds while it idles in the
        pool (which bounds their sum, :mod:`~kafka_direct.consumer.pool`): librdkafka fetches
        until the queue holds ``queue_records`` records or ``queue_bytes`` (one fetch response
        may overshoot either), so ``queue_records`` records of the mean size read so far, at
        most ``queue_bytes``; before any record was read, ``queue_bytes``."""
        if self.record_bytes is None:
            return self.queue_bytes
        return min(self.queue_bytes, int(self.queue_records * self.record_bytes))

    def note_sizes(self, batch: pa.RecordBatch) -> None:
        """Remember the mean key + value size of ``batch``'s records."""
        if batch.num_rows:
            self.record_bytes = (batch.column(0).nbytes + batch.column(1).nbytes) / batch.num_rows

    @property
    def consumer(self) -> KafkaConsumerLike | NativeConsumer:
        """The Kafka client: confluent-kafka's ``Consumer``, or the fast path's
        (:mod:`kafka_direct.consumer.native`), whose reads the C code filters and converts."""
        return self._consumer

    @consumer.setter
    def consumer(self, client: KafkaConsumerLike | NativeConsumer) -> None:
        self._consumer = client
        self._native = client if isinstance(client, NativeConsumer) else None

    @property
    def python_client(self) -> KafkaConsumerLike:
        """The client as confluent-kafka's ``Consumer``: for the Python read path only (when
        the client is not the fast path's)."""
        return cast(KafkaConsumerLike, self._consumer)

    def read(self, task: ReadTask) -> Iterator[pa.RecordBatch]:
        """The records of ``task``'s ranges, as Arrow batches."""
        raise NotImplementedError

    def position_at(
        self, topic: str, partition: int, offset: int, log_start: int | None = None
    ) -> None:
        """Make ``offset`` the next record delivered for ``topic``-``partition`` (the data-loss
        checks call it when they skip lost records)."""
        raise NotImplementedError

    def close(self) -> None:
        self.consumer.close()


class Progress:
    """How long a read may go without progress (``kafkaConsumer.pollTimeoutMs``), and what its
    client reported meanwhile: the fetch loops of one range and of a packed task share it."""

    def __init__(self, events: ClientEvents | None, poll_timeout_ms: int) -> None:
        self.events = events
        self.poll_timeout_ms = poll_timeout_ms
        self._timeout_s = poll_timeout_ms / 1000.0
        # Only client events since the read last made progress count (see ClientEvents).
        self._mark = events.mark() if events is not None else 0
        self._deadline = 0.0
        self.restart()

    def restart(self) -> None:
        """Start the wait again (time spent downstream is not time waiting on Kafka)."""
        self._deadline = time.monotonic() + self._timeout_s

    def made(self) -> None:
        """Something came: what the client reported so far is explained; the wait restarts."""
        if self.events is not None:
            self._mark = self.events.mark()
        self.restart()

    def check(self, rng: OffsetRange, nxt: int) -> None:
        """Nothing came: raise a configuration error the client reported (authentication, TLS:
        waiting cannot help), or the timeout once the wait is over."""
        fatal = self.events.config_error(self._mark) if self.events is not None else None
        if fatal is not None:
            raise fatal
        if time.monotonic() > self._deadline:
            raise _timeout(rng, nxt, self.poll_timeout_ms, self.events)


class Outcome(Enum):
    """How one read of a consumer's queue ended."""

    #: Nothing came within the wait.
    NOTHING = "nothing"
    #: Records or events came, and the read did not end at the log end.
    RECORDS = "records"
    #: The read ended in an EOF event: the queue stands at the log end (``Taken.log_end``).
    LOG_END = "log end"
    #: The position is out of range (the data is gone); librdkafka stopped fetching.
    OUT_OF_RANGE = "out of range"

    @staticmethod
    def of(eof: int | None) -> Outcome:
        """The outcome of a read that brought something, from its ``eof`` slot: the log end,
        :data:`_OUT_OF_RANGE`, or None (as the C fast path and :func:`_split_events` give it)."""
        if eof is None:
            return Outcome.RECORDS
        return Outcome.OUT_OF_RANGE if eof == _OUT_OF_RANGE else Outcome.LOG_END


class Taken(NamedTuple):
    """What one read of the consumer's queue gave the fetch loop."""

    outcome: Outcome
    #: The Arrow batch of its records in the range, or None.
    batch: pa.RecordBatch | None
    #: The next offset to read.
    next_offset: int
    #: Where the log ends, when the read ended there (:attr:`Outcome.LOG_END`), else None.
    log_end: int | None = None

    @staticmethod
    def of(eof: int | None, batch: pa.RecordBatch | None, next_offset: int) -> Taken:
        """A read that brought something, with its ``eof`` slot (see :meth:`Outcome.of`)."""
        outcome = Outcome.of(eof)
        return Taken(outcome, batch, next_offset, eof if outcome is Outcome.LOG_END else None)


def _timeout(
    rng: OffsetRange, nxt: int, poll_timeout_ms: int, events: ClientEvents | None
) -> FetchTimeoutError:
    said = events.summary() if events is not None else ""
    cause = (
        f"The consumer reported: {said}."
        if said
        else "The broker may be down, paused or overloaded."
    )
    return FetchTimeoutError(
        f"Timed out after {poll_timeout_ms} ms waiting for offset {nxt} of "
        f"{rng.topic}-{rng.partition} (reading range [{rng.from_offset}, {rng.until_offset})). "
        f"{cause} Raise the source option 'kafkaConsumer.pollTimeoutMs' to wait longer.",
        code="_TIMED_OUT",
        retriable=True,
    )
