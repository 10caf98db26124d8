"""Read the ranges of one packed task (several topic-partitions) with one consumer. Runs in
Spark executors (Python workers).

The driver packs small ranges into one task (:mod:`kafka_direct.planning.packing`). Reading
them one after the other, re-assigning the consumer each time, would pay a fetch round trip per
range; instead every range's partition is assigned to one consumer at once, so librdkafka
fetches all of a broker's partitions in one request and queues their records on the one
consumer queue. One loop takes records off that queue and keeps each against its own range:

- the contract of :func:`~kafka_direct.consumer.fetch.fetch_range` holds per range: a range is
  done when a record at or past its ``until`` arrives or its log end (EOF) is at or past
  ``until``, never by counting records; an EOF short of ``until`` or an out-of-range position
  goes through the same data-loss checks (``failOnDataLoss``), with the same messages;
- ``kafkaConsumer.pollTimeoutMs`` bounds the time without progress of the task as a whole.
  Progress is news of a range not yet done: its records (even those before its start, read
  through in a bounded skip ahead, as ``fetch_range`` counts them), its log end, an
  out-of-range position. Records of a range already done are not: librdkafka keeps fetching
  its partition, and a busy one kept a task whose other partition's leader was unreachable
  waiting for as long as they came;
- on the fast path (:mod:`kafka_direct.consumer.native`) the C loop does the keeping and
  returns one Arrow batch of rows of several partitions per read; on the Python path each read
  gives one batch per partition.

A pooled consumer keeps its assignment, and its queue, when the next task reads the same
partitions from where their queues stand (consecutive micro-batches of busy partitions, packed
the same way), or a little ahead of it (the micro-batch in between went to another Python
worker: the records before each range are read and dropped, within the skip-ahead bound of
:mod:`~kafka_direct.consumer.task_consumer`): re-assigning would throw the prefetched records
away and wait for the fetch in flight. Otherwise the task assigns its partitions afresh, to a
new client when the old one has been assigned before (see :meth:`GroupConsumer.start_at`).
That includes a consumer the pool hands over from another packed task's partitions
(:mod:`~kafka_direct.consumer.pool`). librdkafka's incremental assignment would keep the queues
of the partitions both tasks read, but the partitions it adds wait for the fetch in flight
(measured on Apache Kafka 4.1.1, 2026-11-30, a consumer of 10 partitions idle at the log end
given 5 others: its next records came after 553 ms, against 53 ms on a new client). A
partition that the data-loss policy repositions (records gone) is repositioned by assigning the
task's unfinished ranges again at their next offsets: losses are rare, and this needs no
per-partition seek.

Several ranges of one partition in one task (a filter narrowed it to stretches with gaps
between) are read in rounds, one range per partition per round.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaError
from confluent_kafka import TopicPartition as CkTopicPartition

from kafka_direct.config.clients import DEFAULT_MAX_BATCH_BYTES
from kafka_direct.consumer.budget import consume_within
from kafka_direct.consumer.fetch import CONSUME_SLICE_S, GROUP_LOOKUP_ERRORS, _GcPaused
from kafka_direct.consumer.loss import ShortLog, check_short_log, out_of_range, short_log_suspect
from kafka_direct.consumer.rows import to_record_batch
from kafka_direct.consumer.task_consumer import (
    _OUT_OF_RANGE,
    POSITIONING,
    OnSkip,
    Outcome,
    Progress,
    ReadTask,
    TaskConsumer,
)
from kafka_direct.kafka.translate import kafka_errors, translate
from kafka_direct.offsets import OffsetRange, TopicPartition

__all__ = ["GroupConsumer", "fetch_ranges", "rounds"]

#: The wait of a Python-path read while records are flowing. confluent-kafka's ``consume(n)``
#: returns once it has ``n`` records or its wait is over, and ``n`` covers every range of the
#: task; the partitions' records arrive over several fetch responses, so the full slice would
#: be waited out at almost every read. (The C loop returns at the first EOF or error event, and
#: otherwise fills its batch: larger batches cost Spark less.)
FLOWING_WAIT_S = 0.01

#: ``(slot, last, beyond, eof)``: what one read learned of one range (see ``NativeBatch``); its
#: ``eof`` is read by :meth:`~kafka_direct.consumer.task_consumer.Outcome.of`.
News = tuple[int, int, bool, int | None]


class GroupConsumer(TaskConsumer):
    """A consumer assigned to the partitions of a packed task, plus what *we* know of its
    queue: per partition, the offset after the last record (or the log end) taken off it. A
    pooled one whose assignment and positions are exactly where the next task starts keeps
    its queue, prefetched records included (see :meth:`stands_at`)."""

    def __init__(
        self, consumer: Any, events: Any = None, renew: Callable[[], Any] | None = None
    ) -> None:
        super().__init__(consumer, events)
        #: Builds a new client like ``consumer`` (see :meth:`start_at`); None: re-assign.
        self._renew = renew
        #: Partitions the data-loss checks moved, and where to: applied by re-assigning.
        self.moved: dict[tuple[str, int], int] = {}
        #: Where the queue stands, per assigned partition (absent: not known).
        self.positions: dict[tuple[str, int], int] = {}
        self._assignment: frozenset[tuple[str, int]] = frozenset()

    def stands_at(self, starts: Sequence[tuple[str, int, int]]) -> bool:
        """Whether the consumer is assigned exactly these partitions, each queue standing at
        its ``offset``: then the next records it delivers are those wanted, in order."""
        return self.behind_by(starts) == 0

    def behind_by(self, starts: Sequence[tuple[str, int, int]]) -> int | None:
        """How many offsets in all the queues stand behind ``starts``, when the consumer is
        assigned exactly these partitions and no queue stands past its start; else None."""
        if self._assignment != frozenset((t, p) for t, p, _ in starts):
            return None
        behind = 0
        for t, p, o in starts:
            at = self.positions.get((t, p))
            if at is None or at > o:
                return None
            behind += o - at
        return behind

    def start_at(self, starts: Sequence[tuple[str, int, int]]) -> None:
        """Make ``starts`` the next records delivered: the queue as it stands if it stands
        there, or a little behind (the fetch loop drops the records before each start, as
        :class:`~kafka_direct.consumer.fetch.PartitionConsumer` does: this worker missed a
        micro-batch another one read, and its queue holds the records wanted), else a fresh
        assignment. A client that was assigned before is replaced by a new one first: while
        its partitions sit at the log end, it has a fetch waiting at the broker (up to
        ``fetch.wait.max.ms``), which a new assignment would wait for; a new client connects
        and fetches sooner (measured in docs/performance-partitions.md)."""
        behind = self.behind_by(starts)
        if behind is not None and behind <= self.skip_ahead_limit():
            POSITIONING["kept" if behind == 0 else "skipped"] += 1
            return
        if self._assignment and self._renew is not None:
            POSITIONING["renewed"] += 1
            self._assignment = frozenset()
            self.consumer.close()
            self.consumer = self._renew()
        else:
            POSITIONING["assigned"] += 1
        self.assign_all(starts)

    def assign_all(self, starts: Sequence[tuple[str, int, int]]) -> None:
        """Assign exactly these ``(topic, partition, offset)``."""
        self.moved.clear()
        self.next_offset = None
        self._assignment = frozenset()
        self.positions = {}
        with kafka_errors(f"Assigning {len(starts)} partition(s)"):
            if self._native is not None:
                self._native.assign_many(list(starts))
            else:
                self.consumer.assign([CkTopicPartition(t, p, o) for t, p, o in starts])
        self._assignment = frozenset((t, p) for t, p, _ in starts)
        self.positions = {(t, p): o for t, p, o in starts}

    def read(self, task: ReadTask) -> Iterator[pa.RecordBatch]:
        """A packed task's records, as Arrow batches: its ranges read together
        (:func:`fetch_ranges`)."""
        starts, on_skip = task.log_starts, task.on_skip
        return fetch_ranges(self, task.ranges, **task.options, log_starts=starts, on_skip=on_skip)

    def take(
        self,
        rnd: _Round,
        n: int,
        slice_s: float,
        wait: float,
        headers: bool,
        max_bytes: int = DEFAULT_MAX_BATCH_BYTES,
    ) -> tuple[list[pa.RecordBatch], list[News]] | None:
        """One read of up to ``n`` records of the round's ranges: its batches, and what it
        learned of each range it touched (``None`` if nothing came). The C loop waits up to
        ``slice_s``; the Python path waits ``wait`` (short while records flow)."""
        native = self._native
        if native is None:
            return _take_python(self, rnd, n, wait, headers, max_bytes)
        bounds = array("q", [v for s in rnd.slots for v in (s.nxt, s.rng.until_offset)])
        with kafka_errors(rnd.what):
            got = native.consume_many(
                rnd.index,
                bounds.tobytes(),
                rnd.topics,
                rnd.partitions,
                n,
                slice_s,
                headers,
                max_bytes,
            )
        if got is None:
            return None
        if got.error is not None:
            topics = (slot.rng.topic for slot in rnd.slots)
            raise translate(KafkaError(*got.error), rnd.what, access=self.access_to(topics))
        if got.batch is not None:
            self.note_sizes(got.batch)  # bounds a later skip ahead (skip_ahead_limit)
        return ([got.batch] if got.batch else []), got.news

    def position_at(
        self, topic: str, partition: int, offset: int, log_start: int | None = None
    ) -> None:
        # Called by fetch's data-loss checks; the read loop re-assigns once it has them all.
        self.moved[(topic, partition)] = offset
        self.positions.pop((topic, partition), None)


def rounds(ranges: Sequence[OffsetRange]) -> list[list[OffsetRange]]:
    """The task's non-empty ranges in rounds: at most one range per partition in each, in
    offset order per partition."""
    by_tp: dict[TopicPartition, list[OffsetRange]] = {}
    for r in sorted(r for r in ranges if r.count() > 0):
        by_tp.setdefault(r.topic_partition, []).append(r)
    depth = max((len(v) for v in by_tp.values()), default=0)
    return [[v[j] for v in by_tp.values() if len(v) > j] for j in range(depth)]


@dataclass
class _Slot:
    rng: OffsetRange
    nxt: int
    #: A log end short of the range, not yet believed (see short_log_suspect).
    suspect: ShortLog | None = None

    @property
    def done(self) -> bool:
        return self.nxt >= self.rng.until_offset


class _Round:
    """The ranges of one round, as a read of the queue needs them."""

    def __init__(self, slots: list[_Slot], what: str) -> None:
        self.slots = slots
        #: ``(topic, partition)`` to slot.
        self.index = {(s.rng.topic, s.rng.partition): i for i, s in enumerate(slots)}
        #: Each slot's topic and partition, for the rows' columns on the fast path.
        self.topics = pa.array([s.rng.topic for s in slots], pa.string())
        self.partitions = pa.array([s.rng.partition for s in slots], pa.int32())
        self.what = what


def fetch_ranges(
    pc: GroupConsumer,
    ranges: Sequence[OffsetRange],
    *,
    poll_timeout_ms: int,
    fail_on_data_loss: bool,
    batch_size: int,
    include_headers: bool,
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
    log_starts: Mapping[TopicPartition, int] | None = None,
    on_skip: OnSkip | None = None,
) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``ranges`` as Arrow batches of at most ``batch_size`` rows (and
    about ``max_batch_bytes`` of records), reading
    them together with ``pc`` (see the module docstring). ``log_starts``: the partitions' first
    offsets where the driver knew them; a queue standing below one was filled before a
    deletion and is not reused."""
    starts = log_starts or {}
    for t, p in list(pc.positions):
        first = starts.get(TopicPartition(t, p))
        if first is not None and pc.positions[(t, p)] < first:
            pc.positions.pop((t, p))
    for ranges_of_round in rounds(ranges):
        yield from _fetch_round(
            pc,
            ranges_of_round,
            poll_timeout_ms=poll_timeout_ms,
            fail_on_data_loss=fail_on_data_loss,
            batch_size=batch_size,
            include_headers=include_headers,
            max_batch_bytes=max_batch_bytes,
            on_skip=on_skip,
        )


def _fetch_round(
    pc: GroupConsumer,
    ranges: list[OffsetRange],
    *,
    poll_timeout_ms: int,
    fail_on_data_loss: bool,
    batch_size: int,
    include_headers: bool,
    max_batch_bytes: int,
    on_skip: OnSkip | None,
) -> Iterator[pa.RecordBatch]:
    slots = [_Slot(r, r.from_offset) for r in ranges]
    pc.start_at([(s.rng.topic, s.rng.partition, s.nxt) for s in slots])
    rnd = _Round(slots, f"Consuming {len(slots)} range(s) of a packed task")
    slice_s = min(CONSUME_SLICE_S, poll_timeout_ms / 1000.0)
    progress = Progress(pc.events, poll_timeout_ms)
    active = [s for s in slots if not s.done]
    wait = slice_s
    while active:
        n = min(sum(s.rng.until_offset - s.nxt for s in active), batch_size)
        taken = pc.take(rnd, n, slice_s, wait, include_headers, max_batch_bytes)
        batches: list[pa.RecordBatch] = []
        moved = False
        if taken is not None:
            batches, news = taken
            # Only news of a range not yet done is progress (see the module docstring).
            moved = any(not slots[i].done for i, *_ in news)
            for i, last, beyond, eof in news:
                _advance(
                    pc, slots[i], last, beyond, eof, fail_on_data_loss, on_skip, poll_timeout_ms
                )
        # While records of the active ranges flow, the Python path's reads wait briefly.
        wait = min(slice_s, FLOWING_WAIT_S) if moved else slice_s
        if moved:
            progress.made()
        else:
            # Nothing more of the active ranges is queued: a log end short of one is now worth
            # asking about; else the wait without progress is checked.
            pending, settled = _check_suspects(pc, active, fail_on_data_loss, on_skip)
            if settled:
                progress.restart()  # the wait for records (or the rest) starts now
            elif not pending:
                first = active[0]
                progress.check(first.rng, first.nxt)
            # Pending: the answers are spread over at most pollTimeoutMs (loss.ShortLog), and
            # reads go on meanwhile (records that come settle it).
        if pc.moved:
            active = [s for s in slots if not s.done]
            pc.assign_all([(s.rng.topic, s.rng.partition, s.nxt) for s in active])
        active = [s for s in active if not s.done]
        if batches:
            yield from batches
            del batches, taken
            progress.restart()


def _check_suspects(
    pc: GroupConsumer, active: list[_Slot], fail: bool, on_skip: OnSkip | None
) -> tuple[bool, bool]:
    """Check the short log ends the active slots suspect (see short_log_suspect): whether any
    is still not settled, and whether any was settled."""
    pending = settled = False
    for slot in active:
        if slot.suspect is None:
            continue
        at = check_short_log(pc, slot.rng, slot.suspect, fail, on_skip)
        if at is None:
            pending = True
        else:
            slot.nxt, slot.suspect = at, None
            settled = True
    return pending, settled


def _advance(
    pc: GroupConsumer,
    slot: _Slot,
    last: int,
    beyond: bool,
    eof: int | None,
    fail: bool,
    on_skip: OnSkip | None,
    poll_timeout_ms: int,
) -> None:
    """Move ``slot`` on by what one read learned of it (as ``fetch_range`` does for a range)."""
    until = slot.rng.until_offset
    tp = (slot.rng.topic, slot.rng.partition)
    if last >= 0:
        slot.nxt = until if beyond else max(slot.nxt, last + 1)
        pc.positions[tp] = last + 1
        if slot.suspect is not None and last >= slot.suspect.at:
            slot.suspect = None  # records at or past that log end came: it was stale
    outcome = Outcome.of(eof)
    if outcome is Outcome.OUT_OF_RANGE:
        # librdkafka stops fetching the partition: its queue cannot be reused.
        pc.positions.pop(tp, None)
    elif eof is not None:
        # A trailing EOF: the queue stands at the log end, even when the range was already
        # complete (librdkafka sends one EOF per log end; a reused queue must know it).
        pc.positions[tp] = eof
    if slot.nxt >= until:
        return
    if outcome is Outcome.OUT_OF_RANGE:
        slot.nxt = out_of_range(
            pc, slot.rng, slot.nxt, fail, on_skip, poll_timeout_ms=poll_timeout_ms
        )
    elif eof is not None:
        # Everything before the log end has been delivered: [nxt, eof) is a gap, and the
        # range is done if the log ends at or past it.
        if eof >= until:
            slot.nxt = until
        else:
            slot.suspect = short_log_suspect(slot.nxt, eof, poll_timeout_ms)


def _take_python(
    pc: GroupConsumer, rnd: _Round, n: int, slice_s: float, headers: bool, max_bytes: int
) -> tuple[list[pa.RecordBatch], list[News]] | None:
    """:meth:`GroupConsumer.take` through confluent-kafka's messages: one batch per partition."""
    slots, index, what = rnd.slots, rnd.index, rnd.what
    consumer = pc.python_client
    with _GcPaused():
        with kafka_errors(what):
            msgs = consume_within(
                consumer.consume, n, slice_s, max_bytes, pc.record_bytes, headers=headers
            )
        if not msgs:
            return None
        rows: dict[int, list[Any]] = {}
        # slot -> [last, beyond, eof, out_of_range]
        seen: dict[int, list[Any]] = {}
        for m in msgs:
            err = m.error()
            i = index.get((m.topic(), m.partition()))
            if err is not None:
                code = err.code()
                if i is not None and code == KafkaError._PARTITION_EOF:
                    seen.setdefault(i, [-1, False, None, False])[2] = m.offset()
                elif i is not None and code == KafkaError._AUTO_OFFSET_RESET:
                    seen.setdefault(i, [-1, False, None, False])[3] = True
                elif code in GROUP_LOOKUP_ERRORS:
                    pass  # an assign-only consumer's group lookup (fetch.GROUP_LOOKUP_ERRORS)
                else:
                    raise translate(err, what, access=pc.access_to(s.rng.topic for s in slots))
                continue
            if i is None:
                continue
            state = seen.setdefault(i, [-1, False, None, False])
            if state[3]:
                continue
            offset = m.offset()
            state[0], state[2] = offset, None  # data after an EOF makes it stale
            slot = slots[i]
            if offset >= slot.rng.until_offset:
                state[1] = True
            elif offset >= slot.nxt:
                rows.setdefault(i, []).append(m)
        batches = [
            to_record_batch(slots[i].rng.topic, slots[i].rng.partition, kept, headers)
            for i, kept in rows.items()
        ]
        del msgs, rows
        for batch in batches:
            pc.note_sizes(batch)
    news = [
        (i, last, beyond, _OUT_OF_RANGE if out else eof)
        for i, (last, beyond, eof, out) in seen.items()
    ]
    return batches, news
