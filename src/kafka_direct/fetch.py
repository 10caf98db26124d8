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
- An out-of-range position (the data is gone) goes through the ``failOnDataLoss`` policy, as on
  the driver.
- Batches hold at most ``arrowBatchSize`` rows, so memory does not grow with the range.

The loop is the executor's hot path (``benchmarks/run.py`` measures it against a raw consumer):
per batch of messages it makes one pass over them to find error events, checks the range bounds
on the first and last offsets only, and runs ``consume`` and the Arrow conversion with Python's
cyclic garbage collector paused (see :func:`_gc_paused`).
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from bisect import bisect_left
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import pyarrow as pa
from confluent_kafka import KafkaError
from confluent_kafka import TopicPartition as CkTopicPartition

from kafka_direct.errors import DataLossError, FetchTimeoutError
from kafka_direct.kafka_io import kafka_errors, translate
from kafka_direct.offsets import OffsetRange
from kafka_direct.rows import to_record_batch

__all__ = ["ConsumerLike", "PartitionConsumer", "fetch_range"]

log = logging.getLogger(__name__)

#: Longest single wait inside ``consume``; bounds the cost of a range that ends in a gap on a
#: broker that does not send EOF promptly, without busy-looping on an idle one.
CONSUME_SLICE_S = 0.2

#: Bound on a watermark lookup (only done on EOF before the range end, or out-of-range errors).
WATERMARK_TIMEOUT_S = 5.0


class ConsumerLike(Protocol):
    """The part of ``confluent_kafka.Consumer`` the fetcher uses (fakes implement it in tests)."""

    def assign(self, partitions: list[Any]) -> None: ...

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Any]: ...

    def get_watermark_offsets(
        self, partition: Any, timeout: float = ..., cached: bool = ...
    ) -> tuple[int, int]: ...

    def close(self) -> None: ...


class PartitionConsumer:
    """A consumer assigned to one topic-partition, plus what *we* know of its queue position.

    ``next_offset`` is the offset right after the last message taken off the consumer's queue.
    When the next range starts there, the prefetched queue is reused as-is (the common case of
    consecutive micro-batches); otherwise we reposition. We never ask librdkafka where it is.
    """

    def __init__(self, consumer: ConsumerLike) -> None:
        self.consumer = consumer
        self.next_offset: int | None = None
        self._assigned: tuple[str, int] | None = None

    def position_at(self, topic: str, partition: int, offset: int) -> None:
        if self._assigned == (topic, partition) and self.next_offset == offset:
            return
        with kafka_errors(f"Assigning {topic}-{partition} at offset {offset}"):
            self.consumer.assign([CkTopicPartition(topic, partition, offset)])
        self._assigned = (topic, partition)
        self.next_offset = offset

    def close(self) -> None:
        self.consumer.close()


def fetch_range(
    pc: PartitionConsumer,
    rng: OffsetRange,
    *,
    poll_timeout_ms: int,
    fail_on_data_loss: bool,
    batch_size: int,
    include_headers: bool,
) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``rng`` as Arrow batches of at most ``batch_size`` rows."""
    until = rng.until_offset
    nxt = rng.from_offset
    if nxt >= until:
        return
    pc.position_at(rng.topic, rng.partition, nxt)
    consumer = pc.consumer
    timeout_s = poll_timeout_ms / 1000.0
    slice_s = min(CONSUME_SLICE_S, timeout_s)
    deadline = time.monotonic() + timeout_s
    while nxt < until:
        with _gc_paused(), kafka_errors(f"Consuming {rng}"):
            msgs = consumer.consume(min(until - nxt, batch_size), slice_s)
        if not msgs:
            if time.monotonic() > deadline:
                raise _timeout(rng, nxt, poll_timeout_ms)
            continue
        deadline = time.monotonic() + timeout_s
        data, eof = _split_events(msgs, rng)
        if data:
            first, last = data[0].offset(), data[-1].offset()
            pc.next_offset = last + 1
            if first >= nxt and last < until:
                # The common case: every message is inside the range.
                lo, hi = 0, len(data)
                nxt = last + 1
            else:
                # Offsets only grow within a partition, so bisecting finds the range's bounds.
                offsets = [m.offset() for m in data]
                lo = bisect_left(offsets, nxt)
                hi = bisect_left(offsets, until)
                nxt = until if hi < len(offsets) else last + 1
            if hi > lo:
                with _gc_paused():
                    batch = to_record_batch(
                        rng.topic, rng.partition, data[lo:hi] if hi - lo < len(data) else data,
                        include_headers,
                    )
                del msgs, data  # free the messages before the batch goes downstream
                yield batch
                # Time spent downstream while suspended here is not time waiting on Kafka.
                deadline = time.monotonic() + timeout_s
        if eof == _OUT_OF_RANGE:
            # librdkafka stops fetching after this error (auto.offset.reset=error), so the
            # queue cannot be reused: the next read of this partition must re-assign.
            pc.next_offset = None
            if nxt < until:
                nxt = _out_of_range(pc, rng, nxt, fail_on_data_loss)
        elif eof is not None and nxt < until:
            # Everything before the log end has been delivered, so [nxt, eof) is a gap.
            pc.next_offset = eof
            nxt = (
                until
                if eof >= until
                else _check_short_log(pc, rng, max(nxt, eof), fail_on_data_loss)
            )


# Python's cyclic GC is process-wide; nested and concurrent pauses share one switch.
_gc_lock = threading.Lock()
_gc_pauses = 0
_gc_resume = False


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a block allocates many objects at once.

    ``consume(n)`` creates ``n`` message objects that the GC tracks, and each one counts towards
    its next collection. With thousands of messages per call, collections keep walking the live
    messages (and, in a Spark worker, a large heap of modules) for nothing: the loop makes no
    reference cycles, so reference counting frees everything anyway. Measured on 100-byte
    records, the GC alone took about half of the executor's CPU time. It is paused only around
    ``consume`` and the Arrow conversion, never while a batch is handed downstream, and resumed
    only if it was enabled; concurrent readers in threads share the pause.
    """
    global _gc_pauses, _gc_resume
    with _gc_lock:
        if _gc_pauses == 0:
            _gc_resume = gc.isenabled()
            gc.disable()
        _gc_pauses += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pauses -= 1
            if _gc_pauses == 0 and _gc_resume:
                gc.enable()


_OUT_OF_RANGE = -1


def _split_events(msgs: list[Any], rng: OffsetRange) -> tuple[list[Any], int | None]:
    """Data messages, and the log-end offset if the batch ends in an EOF event (or
    ``_OUT_OF_RANGE``, after the data queued before the error).

    An EOF followed by data is stale (the log has grown since), so only a trailing one counts.
    """
    # One pass in C over the messages' error() (all of one type, as one consumer returns them).
    if list(map(type(msgs[0]).error, msgs)).count(None) == len(msgs):
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
        else:
            raise translate(err, f"Consuming {rng}")
    return data, eof


def _timeout(rng: OffsetRange, nxt: int, poll_timeout_ms: int) -> FetchTimeoutError:
    return FetchTimeoutError(
        f"Timed out after {poll_timeout_ms} ms waiting for offset {nxt} of "
        f"{rng.topic}-{rng.partition} (reading range [{rng.from_offset}, {rng.until_offset})). "
        "The broker may be down, paused or overloaded. Raise the source option "
        "'kafkaConsumer.pollTimeoutMs' to wait longer.",
        code="_TIMED_OUT",
        retriable=True,
    )


def _watermarks(pc: PartitionConsumer, rng: OffsetRange) -> tuple[int, int]:
    tp = CkTopicPartition(rng.topic, rng.partition)
    with kafka_errors(f"Fetching watermarks of {rng.topic}-{rng.partition}"):
        low, high = pc.consumer.get_watermark_offsets(tp, timeout=WATERMARK_TIMEOUT_S, cached=False)
    return int(low), int(high)


def _check_short_log(pc: PartitionConsumer, rng: OffsetRange, nxt: int, fail: bool) -> int:
    """EOF before ``until``: more data is on its way, or the log shrank (topic recreated)."""
    _low, high = _watermarks(pc, rng)
    if high >= rng.until_offset:
        return nxt  # the records exist; librdkafka is still fetching them
    detail = (
        f"the range [{rng.from_offset}, {rng.until_offset}) was planned but the log now ends at "
        f"{high}; the topic may have been recreated"
    )
    return _lost(pc, rng, nxt, rng.until_offset, fail, detail)


def _out_of_range(pc: PartitionConsumer, rng: OffsetRange, nxt: int, fail: bool) -> int:
    low, high = _watermarks(pc, rng)
    if low <= nxt < high:
        # The log moved between the error and our look (e.g. a recreated topic refilled): the
        # position is valid again, so nothing is lost; read on from it.
        log.info("Offset %d of %s-%s is readable again; resuming", nxt, rng.topic, rng.partition)
        pc.position_at(rng.topic, rng.partition, nxt)
        return nxt
    detail = f"offset {nxt} is out of range; the broker has [{low}, {high})"
    resume = low if nxt < low else rng.until_offset
    return _lost(pc, rng, nxt, min(resume, rng.until_offset), fail, detail)


def _lost(
    pc: PartitionConsumer, rng: OffsetRange, nxt: int, resume: int, fail: bool, detail: str
) -> int:
    if fail:
        raise DataLossError(rng.topic, rng.partition, detail)
    log.warning(
        "Data loss on %s-%s: %s. Skipping %d offsets (failOnDataLoss=false).",
        rng.topic,
        rng.partition,
        detail,
        resume - nxt,
    )
    pc.next_offset = None
    if resume < rng.until_offset:
        pc.position_at(rng.topic, rng.partition, resume)
    return resume
