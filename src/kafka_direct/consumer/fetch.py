"""Read one offset range ``[from, until)`` into Arrow record batches. Runs in Spark executors
(Python workers).

The counterpart of Spark's ``KafkaRDDIterator`` and ``CompactedKafkaRDDIterator`` in one loop,
because librdkafka already hides control records and (under ``read_committed``) aborted ones:

- Gaps are normal (transaction markers, aborted records, compaction). The range is done when a
  message at or past ``until`` arrives, or the partition's end (EOF event) is at or past
  ``until``. Records are never counted to decide that.
- ``consume(n)`` waits for ``n`` messages or its timeout, so ``n`` is at most what remains, and
  each call waits a short slice; ``kafkaConsumer.pollTimeoutMs`` bounds the total time without
  progress, with a clear :class:`FetchTimeoutError`.
- An out-of-range position (the data is gone) or a log end short of the range goes through the
  ``failOnDataLoss`` policy, as on the driver, once the partition's leader has said so a few
  times (:mod:`~kafka_direct.consumer.loss`: a new leader's log end can lag for a moment).
- Batches hold at most ``arrowBatchSize`` rows and about ``maxBatchBytes`` of records (a record
  larger than that alone), so memory grows with neither the range nor the record size
  (:mod:`~kafka_direct.consumer.budget`).

The loop is the executor's hot path (``benchmarks/run.py`` measures it against a raw consumer):
per batch of messages it makes one pass over them to find error events, checks the range bounds
on the first and last offsets only, and runs ``consume`` and the Arrow conversion with Python's
cyclic garbage collector paused (see :class:`_GcPaused`).
"""

from __future__ import annotations

import gc
import logging
import threading
from bisect import bisect_left
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaError
from confluent_kafka import TopicPartition as CkTopicPartition

from kafka_direct.config.clients import DEFAULT_MAX_BATCH_BYTES
from kafka_direct.consumer.budget import consume_within
from kafka_direct.consumer.loss import ShortLog, check_short_log, out_of_range, short_log_suspect
from kafka_direct.consumer.native import NativeConsumer
from kafka_direct.consumer.rows import to_record_batch
from kafka_direct.consumer.task_consumer import (
    _OUT_OF_RANGE,
    POSITIONING,
    SKIP_AHEAD_BYTES,
    SKIP_AHEAD_MAX_RECORDS,
    KafkaConsumerLike,
    OnSkip,
    Outcome,
    Progress,
    ReadTask,
    Taken,
    TaskConsumer,
)
from kafka_direct.kafka.authorization import Access
from kafka_direct.kafka.events import ClientEvents
from kafka_direct.kafka.translate import kafka_errors, translate
from kafka_direct.offsets import OffsetRange

__all__ = [
    "CONSUME_SLICE_S",
    "GROUP_LOOKUP_ERRORS",
    "SKIP_AHEAD_BYTES",
    "SKIP_AHEAD_MAX_RECORDS",
    "PartitionConsumer",
    "fetch_range",
]

log = logging.getLogger(__name__)

#: Longest single wait inside ``consume``; bounds the cost of a range that ends in a gap on a
#: broker that does not send EOF promptly, without busy-looping on an idle one.
CONSUME_SLICE_S = 0.2

#: Executors' consumers only assign and never commit, yet librdkafka looks their group up as
#: they start: a principal without rights on that group gets this error event, which the fetch
#: does not need. The reads go on, as the JVM connector's executors (which never contact the
#: group) read with no rights on it. The C loops skip it too (_rdkafka_consume*.c).
GROUP_LOOKUP_ERRORS = frozenset({KafkaError.GROUP_AUTHORIZATION_FAILED})


class PartitionConsumer(TaskConsumer):
    """A consumer assigned to one topic-partition, plus what *we* know of its queue position.

    ``next_offset`` is the offset right after the last message taken off the consumer's queue.
    When the next range starts there, the prefetched queue is reused as-is (the common case of
    consecutive micro-batches). When it starts a little ahead (this worker's consumer missed a
    micro-batch that another worker read), the fetch loop reads forward through the queue (see
    :data:`~kafka_direct.consumer.task_consumer.SKIP_AHEAD_BYTES`). Otherwise we reposition.
    We never ask librdkafka where it is.
    """

    def __init__(
        self, consumer: KafkaConsumerLike | NativeConsumer, events: ClientEvents | None = None
    ) -> None:
        super().__init__(consumer, events)
        self._assigned: tuple[str, int] | None = None

    def read(self, task: ReadTask) -> Iterator[pa.RecordBatch]:
        """The records of the task's one range, as Arrow batches (:func:`fetch_range`)."""
        (rng,) = task.ranges
        start = task.log_starts.get(rng.topic_partition)
        return fetch_range(self, rng, **task.options, log_start=start, on_skip=task.on_skip)

    def take(
        self,
        rng: OffsetRange,
        nxt: int,
        n: int,
        slice_s: float,
        headers: bool,
        max_bytes: int = DEFAULT_MAX_BATCH_BYTES,
    ) -> Taken:
        """One read of up to ``n`` records (and about ``max_bytes`` of them) of ``rng`` from
        ``nxt``, waiting up to ``slice_s`` (see :class:`Taken`). On the fast path the range
        filter and event scan run in C (:func:`_take_native`); here, through confluent-kafka's
        messages.

        Everything the messages are used for happens here, with the garbage collector paused,
        and they are freed before it resumes (see :class:`_GcPaused`).
        """
        if self._native is not None:
            return _take_native(self, self._native, rng, nxt, n, slice_s, headers, max_bytes)
        consumer = self.python_client
        until = rng.until_offset
        batch = None
        with _GcPaused():
            with kafka_errors(f"Consuming {rng}"):
                msgs = consume_within(
                    consumer.consume, n, slice_s, max_bytes, self.record_bytes, headers=headers
                )
            if not msgs:
                return Taken(Outcome.NOTHING, None, nxt)
            data, eof = _split_events(msgs, rng, self.access_to([rng.topic]))
            if data:
                first, last = data[0].offset(), data[-1].offset()
                self.next_offset = last + 1
                if first >= nxt and last < until:
                    # The common case: every message is inside the range.
                    lo, hi = 0, len(data)
                    nxt = last + 1
                else:
                    # Offsets only grow within a partition, so bisecting finds the range's bounds.
                    offsets = [m.offset() for m in data]
                    lo = bisect_left(offsets, nxt)
                    hi = bisect_left(offsets, until)
                    # max(): records before nxt (a skip ahead, see position_at) move nothing.
                    nxt = until if hi < len(offsets) else max(nxt, last + 1)
                if hi > lo:
                    rows = data if hi - lo == len(data) else data[lo:hi]
                    batch = to_record_batch(rng.topic, rng.partition, rows, headers)
                    del rows
                    self.note_sizes(batch)
            del msgs, data
        return Taken.of(eof, batch, nxt)

    def position_at(
        self, topic: str, partition: int, offset: int, log_start: int | None = None
    ) -> None:
        """Make ``offset`` the next record this consumer delivers for the range being read,
        reusing the queue when ``offset`` is where it stands or a little ahead (the fetch loop
        then drops the records before ``offset``).

        ``log_start`` is the partition's first offset when the driver planned the range. A
        queue standing below it was filled before a deletion: it is dropped rather than read
        through, so a pooled consumer never hands on records the broker no longer has.
        """
        if self._assigned == (topic, partition) and self.next_offset is not None:
            ahead = offset - self.next_offset
            stale = log_start is not None and self.next_offset < log_start
            if not stale and (ahead == 0 or 0 < ahead <= self.skip_ahead_limit()):
                POSITIONING["kept" if ahead == 0 else "skipped"] += 1
                return
        POSITIONING["assigned"] += 1
        with kafka_errors(f"Assigning {topic}-{partition} at offset {offset}"):
            self.consumer.assign([CkTopicPartition(topic, partition, offset)])
        self._assigned = (topic, partition)
        self.next_offset = offset


def fetch_range(
    pc: PartitionConsumer,
    rng: OffsetRange,
    *,
    poll_timeout_ms: int,
    fail_on_data_loss: bool,
    batch_size: int,
    include_headers: bool,
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
    log_start: int | None = None,
    on_skip: OnSkip | None = None,
) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``rng`` as Arrow batches of at most ``batch_size`` rows and about
    ``max_batch_bytes`` of records.

    ``log_start``: the partition's first offset when the range was planned, if the driver knew
    it (see :meth:`PartitionConsumer.position_at`). ``on_skip`` hears of offsets skipped as lost
    (``fail_on_data_loss=False``): ``on_skip(rng, first_lost, resume)``.
    """
    until = rng.until_offset
    nxt = rng.from_offset
    if nxt >= until:
        return
    pc.position_at(rng.topic, rng.partition, nxt, log_start)
    slice_s = min(CONSUME_SLICE_S, poll_timeout_ms / 1000.0)
    progress = Progress(pc.events, poll_timeout_ms)
    # A log end short of the range, not yet believed (see short_log_suspect).
    suspect: ShortLog | None = None
    while nxt < until:
        n = min(until - nxt, batch_size)
        taken = pc.take(rng, nxt, n, slice_s, include_headers, max_batch_bytes)
        batch, nxt, outcome = taken.batch, taken.next_offset, taken.outcome
        if outcome is Outcome.NOTHING:
            if suspect is None:
                progress.check(rng, nxt)
                continue
            settled = check_short_log(pc, rng, suspect, fail_on_data_loss, on_skip)
            if settled is not None:
                nxt, suspect = settled, None
                # The wait for records (or for the rest of the range) starts now.
                progress.restart()
            # Not settled: read on (records that come settle it). The answers are spread over
            # at most pollTimeoutMs, so the wait without progress is not checked meanwhile.
            continue
        progress.made()
        if suspect is not None and nxt > suspect.at:
            suspect = None  # records at or past that log end came: it was stale
        log_end = taken.log_end
        if log_end is not None:
            # A trailing EOF: the queue now stands at the log end, even when the range was
            # already complete. librdkafka sends one EOF per log end, so a pooled consumer that
            # forgot it would wait the whole poll timeout on a next range ending at a marker.
            # (Set before the yield: the generator may be closed there.)
            pc.next_offset = log_end
        if outcome is Outcome.OUT_OF_RANGE:
            # librdkafka stops fetching after this error (auto.offset.reset=error), so the
            # queue cannot be reused: the next read of this partition must re-assign. Set
            # before the yield too: a generator closed there returns the consumer to the pool,
            # and a task reusing its stopped queue would wait out its poll timeout.
            pc.next_offset = None
        if batch is not None:
            yield batch
            del batch
            # Time spent downstream while suspended here is not time waiting on Kafka.
            progress.restart()
        if outcome is Outcome.OUT_OF_RANGE:
            if nxt < until:
                nxt = out_of_range(
                    pc, rng, nxt, fail_on_data_loss, on_skip, poll_timeout_ms=poll_timeout_ms
                )
                progress.restart()  # the answers' wait was not a wait for records
        elif log_end is not None and nxt < until:
            # Everything before the log end has been delivered: [nxt, log_end) is a gap, and
            # the range is done if the log ends at or past it.
            if log_end >= until:
                nxt = until
            else:
                suspect = short_log_suspect(nxt, log_end, poll_timeout_ms)


def _take_native(
    pc: PartitionConsumer,
    consumer: NativeConsumer,
    rng: OffsetRange,
    nxt: int,
    n: int,
    slice_s: float,
    headers: bool,
    max_bytes: int,
) -> Taken:
    """:meth:`PartitionConsumer.take` on the fast path: the range filter and event scan ran in C,
    with no message objects."""
    with kafka_errors(f"Consuming {rng}"):
        got = consumer.consume_batch(
            rng.topic, rng.partition, nxt, rng.until_offset, n, slice_s, headers, max_bytes
        )
    if got is None:
        return Taken(Outcome.NOTHING, None, nxt)
    if got.error is not None:
        raise translate(
            KafkaError(*got.error), f"Consuming {rng}", access=pc.access_to([rng.topic])
        )
    if got.last >= 0:
        pc.next_offset = got.last + 1
        # max(): records before nxt (a skip ahead, see position_at) move nothing.
        nxt = rng.until_offset if got.beyond else max(nxt, got.last + 1)
    if got.batch is not None:
        pc.note_sizes(got.batch)
    return Taken.of(got.eof, got.batch, nxt)


class _GcPaused:
    """Pause Python's cyclic garbage collector while the messages of one ``consume`` live.

    ``consume(n)`` creates ``n`` message objects that the collector tracks. Each one counts
    towards the next collection, so with thousands per call the collector keeps walking live
    messages (and, in a Spark worker, a large heap of modules) for nothing: the fetch loop makes
    no reference cycles, and reference counting frees everything. In a Spark worker the
    collections took a large share of the reader's CPU time (docs/performance.md).

    The pause covers ``consume``, the Arrow conversion and freeing the messages (freeing them
    takes back their count, so resuming triggers no collection); it never covers handing a
    batch downstream. The collector is resumed only if it was enabled, and concurrent readers
    in threads share one pause.
    """

    __slots__ = ()
    _lock = threading.Lock()
    _depth = 0
    _resume = False

    def __enter__(self) -> None:
        cls = _GcPaused
        with cls._lock:
            if cls._depth == 0:
                cls._resume = gc.isenabled()
                gc.disable()
            cls._depth += 1

    def __exit__(self, *exc: object) -> None:
        cls = _GcPaused
        with cls._lock:
            cls._depth -= 1
            if cls._depth == 0 and cls._resume:
                gc.enable()


def _split_events(
    msgs: list[Any], rng: OffsetRange, access: Access | None = None
) -> tuple[list[Any], int | None]:
    """Data messages, and the log-end offset if the batch ends in an EOF event (or
    ``_OUT_OF_RANGE``, after the data queued before the error).

    An EOF followed by data is stale (the log has grown since), so only a trailing one counts.
    """
    # One pass in C over error() of the messages, all of one type as one consumer returns them.
    # An error is a KafkaError object, which is always true (it has no __bool__ or __len__).
    if not any(map(type(msgs[0]).error, msgs)):
        return msgs, None
    data: list[Any] = []
    eof: int | None = None
    for m in msgs:
        err = m.error()
        if err is None:
            data.append(m)
            eof = None
        elif err.code() == KafkaError._PARTITION_EOF:
            eof = m.offset()
        elif err.code() == KafkaError._AUTO_OFFSET_RESET:
            return data, _OUT_OF_RANGE
        elif err.code() in GROUP_LOOKUP_ERRORS:
            continue
        else:
            raise translate(err, f"Consuming {rng}", access=access)
    return data, eof
