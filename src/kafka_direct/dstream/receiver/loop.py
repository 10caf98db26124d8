"""A receiver: a member of the user's consumer group that writes what it receives to the log.
Runs in a Spark executor (a Python worker), as one long-running task, for as long as the stream
runs; the driver starts it (:mod:`~kafka_direct.dstream.receiver.supervisor`) and restarts it
when it dies.

The loop is Spark's ``KafkaReceiver`` with its ``ReliableKafkaReceiver`` rules:

- it ``subscribe``s, so Kafka assigns its partitions, and reading starts from the group's
  committed offsets (``auto.offset.reset`` where there are none);
- records go into a block, which is closed every ``blockInterval`` (or at 8 MB), appended to
  the log (durable, with the WAL: :meth:`~kafka_direct.dstream.wal.BlockWriter.append`), and
  only **then** are the block's offsets committed to the group;
- on revocation, the block being filled is logged and committed before the callback returns,
  so everything received from the revoked partitions is in the log before they are given up;
  on a lost assignment (the member was dropped), its records are discarded uncommitted, and the
  next owner reads them from the last commit. Rebalance callbacks run inside ``consume()``, and
  a read takes several calls (for its byte budget), so the callbacks also log (revoked) or drop
  (lost) what the read's earlier calls received; records that a call handed over *before* the
  callback that took their partition away are dropped, uncommitted: they are told apart by the
  partition's position when the callback ran (:mod:`~kafka_direct.dstream.receiver.rebalance`).
  A block's range per partition runs from its lowest offset to one past its highest;
- ``maxRatePerReceiver`` caps records per second, and while the log holds ``maxPendingBlocks``
  or more unprocessed blocks it pauses its partitions (``consumer.pause``), which also empties
  librdkafka's prefetch queue, so memory stays flat whatever the backlog;
- it ends when the stop marker appears, when a newer run owns the directory, or when the driver
  has been silent too long (:class:`~kafka_direct.dstream.receiver.control.ReceiverSignals`);
  then it logs its block, commits and leaves the group.

A failed commit is logged and owed (:mod:`~kafka_direct.dstream.receiver.commit_ledger`): the
block is in the log already, the next commit carries the offsets, and if the partition comes back
to this receiver first (it rejoined after its session expired), they are committed before it
fetches. Only a partition that another member reads meanwhile may repeat those records.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from kafka_direct.consumer.budget import consume_within
from kafka_direct.consumer.rows import to_record_batch
from kafka_direct.dstream.receiver.base import PENDING_EVERY_S, BaseReceiver, ReceiverSpec
from kafka_direct.dstream.receiver.commit_ledger import RETRY_EVERY_S, CommitLedger
from kafka_direct.dstream.receiver.control import ReceiverSignals, ReceiverStatus
from kafka_direct.dstream.receiver.policy import BlockCutter, PauseRule, RateLimiter
from kafka_direct.dstream.receiver.rebalance import Cut, split_at_rebalance
from kafka_direct.dstream.receiver.wal import BlockMeta, BlockWriter
from kafka_direct.errors import StreamStateError

__all__ = ["Receiver", "ReceiverSpec"]

log = logging.getLogger(__name__)

#: Most records taken from the consumer in one call: their Python objects are the receiver's
#: other transient memory, next to the block.
_MAX_CONSUME = 5_000


@dataclass
class _Block:
    batches: list[pa.RecordBatch] = field(default_factory=list)
    #: (topic, partition) -> [first offset, last offset + 1, records]
    ranges: dict[tuple[str, int], list[int]] = field(default_factory=dict)
    records: int = 0
    size: int = 0
    opened_at: float | None = None

    def add(self, tp: tuple[str, int], batch: pa.RecordBatch, low: int, high: int) -> None:
        self.batches.append(batch)
        seen = self.ranges.get(tp)
        if seen is None:
            self.ranges[tp] = [low, high + 1, batch.num_rows]
        else:
            # Lowest and highest, not first and last: a range is never inverted, whatever order
            # the records came in.
            seen[0], seen[1] = min(seen[0], low), max(seen[1], high + 1)
            seen[2] += batch.num_rows
        self.records += batch.num_rows
        self.size += batch.nbytes

    def mean_record_bytes(self) -> float | None:
        return self.size / self.records if self.records else None

    def drop(self, lost: set[tuple[str, int]]) -> int:
        keep = [b for b in self.batches if _tp_of(b) not in lost]
        dropped: int = self.records - sum(int(b.num_rows) for b in keep)
        self.batches = keep
        self.ranges = {tp: r for tp, r in self.ranges.items() if tp not in lost}
        self.records -= dropped
        self.size = sum(b.nbytes for b in keep)
        return dropped


def _tp_of(batch: pa.RecordBatch) -> tuple[str, int]:
    return str(batch.column(2)[0].as_py()), int(batch.column(3)[0].as_py())


class Receiver(BaseReceiver):
    """One receiver's loop around an injected consumer (confluent-kafka's, or a test fake)."""

    def __init__(
        self,
        spec: ReceiverSpec,
        consumer: Any,
        writer: BlockWriter,
        signals: ReceiverSignals,
        *,
        committer: Callable[[dict[tuple[str, int], int]], bool],
        committed: Callable[[list[tuple[str, int]]], dict[tuple[str, int], int | None] | None]
        | None = None,
        classify_error: Callable[[Any], BaseException | None] = lambda _error: None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        report: Callable[[ReceiverStatus], None] | None = None,
    ) -> None:
        super().__init__(
            spec,
            consumer,
            writer,
            signals,
            classify_error=classify_error,
            clock=clock,
            sleep=sleep,
            report=report,
        )
        config = spec.config
        self._commit_offsets = committer
        self._committed = committed
        #: Logged offsets whose commit failed: carried by the next commit, settled on return.
        self.ledger = CommitLedger()
        self._commit_tried = -1e18
        self.limiter = RateLimiter(config.max_rate_per_receiver, config.block_interval_s, clock)
        self.cutter = BlockCutter(config.block_interval_s)
        self.rule = PauseRule(config.max_pending_blocks)
        self.block = _Block()
        #: The last offset the consumer handed over, per partition, before the running call.
        self._handed: dict[tuple[str, int], int] = {}
        #: The running read's records, not in the block yet (a rebalance callback sees them).
        self._reading: list[Any] = []
        #: Partitions revoked or lost inside the running consume() call, each time it happened.
        self._cuts: dict[tuple[str, int], list[Cut]] = {}
        #: The mean size of the records received so far: sizes the first chunk of a read.
        self._record_bytes: float | None = None
        self._repause = False

    # -- the loop ------------------------------------------------------------------------------

    def _start(self) -> None:
        self.consumer.subscribe(
            list(self.spec.config.topics),
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )

    def _finish(self) -> None:
        self.flush("stop")

    def step(self) -> None:
        """One turn: close a due block, apply back-pressure, take what the rate allows."""
        now = self._clock()
        if self.cutter.due(self.block.opened_at, now, self.block.size):
            self.flush("interval")
        elif self.ledger and now - self._commit_tried >= RETRY_EVERY_S:
            self._commit({})
        self._apply_pause(now)
        if self.paused:
            # Serves rebalances; a partition assigned meanwhile may still hand over records.
            self._consume(_MAX_CONSUME, 0.1)
            self._take_read()
            if self._repause:
                self._pause_assignment()
            return
        allowed = self.limiter.allowance(_MAX_CONSUME)
        if allowed < 1:
            self._sleep(min(0.1, max(0.001, self.limiter.wait_s())))
            return
        timeout = self.spec.config.block_interval_s
        if self.block.opened_at is not None:
            timeout = max(0.0, self.block.opened_at + timeout - now)
        # At most what the block has room for: a block of large records stays near its bound
        # (the first record of a block comes whatever its size).
        room = max(self.cutter.max_bytes - self.block.size, 1)
        messages = consume_within(
            self._consume,
            allowed,
            min(0.1, timeout),
            room,
            self._record_bytes,
            headers=self.spec.config.include_headers,
        )
        self._take_read()
        if messages:
            self._record_bytes = self.block.mean_record_bytes() or self._record_bytes
        self.limiter.take(len(messages))
        self._report_now(self._clock())

    def flush(self, why: str) -> None:
        """Log the block being filled, then commit its offsets (in this order), with whatever
        an earlier failed commit still owes."""
        block = self.block
        if not block.records:
            if self.ledger:
                self._commit({})
            return
        meta = BlockMeta(
            receiver=self.spec.receiver,
            run=self.spec.run,
            created_ns=time.time_ns(),
            records=block.records,
            ranges=tuple((t, p, r[0], r[1], r[2]) for (t, p), r in sorted(block.ranges.items())),
        )
        self.writer.append(block.batches, meta)  # durable (with the WAL) when it returns
        self.block = _Block()
        self._pending_checked = -1e18  # count the log again before taking more
        self.status.records += meta.records
        self.status.blocks += 1
        self._commit({(t, p): until for t, p, _, until, _ in meta.ranges})
        log.debug("Receiver %d logged %d records (%s)", self.spec.receiver, meta.records, why)

    def _commit(self, logged: dict[tuple[str, int], int]) -> None:
        assigned = (
            [(p.topic, p.partition) for p in self.consumer.assignment()] if self.ledger else []
        )
        # Stamped even when nothing is due (a debt for a partition now elsewhere): the retry in
        # step() then asks for the assignment once a RETRY_EVERY_S, not on every turn.
        self._commit_tried = self._clock()
        offsets = self.ledger.request(logged, assigned)
        if offsets:
            self._send(offsets)

    def _send(self, offsets: dict[tuple[str, int], int]) -> bool:
        """Commit ``offsets``; what the group refused stays owed, and is counted."""
        ok = self._commit_offsets(offsets)
        self.ledger.settled(offsets, ok)
        if not ok:
            self.status.commit_failures += 1
        return ok

    # -- what the consumer hands over ----------------------------------------------------------

    def _consume(self, n: int, timeout: float) -> list[Any]:
        """One ``consume()`` call of a read. Its records join the read's, where a rebalance
        served by the read's next call finds them, less those of partitions that a rebalance
        inside this very call took away."""
        self._cuts = {}
        messages = list(self.consumer.consume(num_messages=n, timeout=timeout))
        cuts, self._cuts = self._cuts, {}
        self._reading.extend(self._after_rebalance(messages, cuts) if cuts else messages)
        for message in messages:
            if message.error() is None:
                self._handed[(message.topic(), message.partition())] = message.offset()
        return messages

    def _after_rebalance(
        self, messages: list[Any], cuts: dict[tuple[str, int], list[Cut]]
    ) -> list[Any]:
        """``messages`` less the records a rebalance inside their call made stale
        (:func:`~kafka_direct.dstream.receiver.rebalance.split_at_rebalance`)."""
        twice = sorted(f"{t}-{p}" for (t, p), seen in cuts.items() if len(seen) > 1)
        if twice:
            # Which record came from which assignment cannot be told: start again from the
            # group's commits (nothing this receiver has not logged was committed).
            raise StreamStateError(
                f"Receiver {self.spec.receiver}: partition(s) {', '.join(twice)} were revoked "
                "twice within one consume() call; the receiver restarts from the group's "
                "committed offsets"
            )
        assigned = {(p.topic, p.partition) for p in self.consumer.assignment()}
        kept, dropped = split_at_rebalance(
            messages, {tp: seen[0] for tp, seen in cuts.items()}, assigned
        )
        if dropped:
            log.info(
                "Receiver %d: %s came in the same read as the rebalance that took the partition "
                "away; not logged, not committed (its next owner reads them from the group's "
                "last commit)",
                self.spec.receiver,
                ", ".join(f"{n} record(s) of {t}-{p}" for (t, p), n in sorted(dropped.items())),
            )
        return kept

    def _take_read(self) -> None:
        reading, self._reading = self._reading, []
        self._take(reading)

    def _take(self, messages: Iterable[Any]) -> None:
        by_tp: dict[tuple[str, int], list[Any]] = {}
        for message in messages:
            error = message.error()
            if error is not None:
                self._consumer_error(error)
                continue
            by_tp.setdefault((message.topic(), message.partition()), []).append(message)
        if not by_tp:
            return
        if self.block.opened_at is None:
            self.block.opened_at = self._clock()
        for (topic, partition), batch in by_tp.items():
            record_batch = to_record_batch(
                topic, partition, batch, self.spec.config.include_headers
            )
            offsets = [m.offset() for m in batch]
            self.block.add((topic, partition), record_batch, min(offsets), max(offsets))

    def abandon(self) -> None:
        """Forget what is not logged yet (never committed: Kafka delivers it again), so that
        leaving the group after a failure logs and commits nothing more."""
        self.block = _Block()
        self._reading = []

    # -- rebalances ----------------------------------------------------------------------------

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        names = sorted(f"{p.topic}-{p.partition}" for p in partitions)
        log.info("Receiver %d assigned %s", self.spec.receiver, ", ".join(names) or "nothing")
        self.status.assignment = sorted({*self.status.assignment, *names})
        self._settle_returning([(p.topic, p.partition) for p in partitions])
        self._repause = self.paused
        self._report_now(self._clock(), force=True)

    def _settle_returning(self, assigned: list[tuple[str, int]]) -> None:
        """A partition back whose last commit failed: commit what this receiver logged of it
        before the consumer fetches, so that it does not read its own logged records again."""
        returning = self.ledger.returning(assigned)
        if not returning or self._committed is None:
            return
        committed = self._committed(returning)
        if committed is None:
            return  # not known: the debt stays, and the records may repeat
        ahead = self.ledger.reclaim(committed)
        if not ahead:
            return
        if self._send(ahead):
            log.info(
                "Receiver %d committed %s on assignment: it had logged those records before a "
                "commit failed, so it does not read them again",
                self.spec.receiver,
                ", ".join(f"{t}-{p}@{o}" for (t, p), o in sorted(ahead.items())),
            )

    def _cut(self, partitions: list[Any]) -> None:
        """Partitions going away inside the running consume() call: note where each stood, so
        that the records the call handed over before now can be told from later ones."""
        # A local call; if it fails, the receiver fails and restarts from the group's commits.
        positions = {(p.topic, p.partition): p.offset for p in self.consumer.position(partitions)}
        for p in partitions:
            tp = (p.topic, p.partition)
            self._cuts.setdefault(tp, []).append((self._handed.get(tp), positions.get(tp)))

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        self._cut(partitions)
        # Before the partitions go: everything received is logged, then committed.
        self._take_read()
        self.flush("revoked")
        gone = {f"{p.topic}-{p.partition}" for p in partitions}
        self.status.assignment = [n for n in self.status.assignment if n not in gone]
        log.info("Receiver %d gives up %s", self.spec.receiver, ", ".join(sorted(gone)))

    def _on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        self._cut(partitions)
        lost = {(p.topic, p.partition) for p in partitions}
        reading = [m for m in self._reading if (m.topic(), m.partition()) not in lost]
        dropped = self.block.drop(lost) + len(self._reading) - len(reading)
        self._reading = reading
        gone = {f"{t}-{p}" for t, p in lost}
        self.status.assignment = [n for n in self.status.assignment if n not in gone]
        log.warning(
            "Receiver %d lost %s (dropped from the group); %d received records of them were "
            "not logged: their next owner reads them from the group's last commit",
            self.spec.receiver,
            ", ".join(sorted(gone)),
            dropped,
        )

    # -- back-pressure, signals, status --------------------------------------------------------

    def _apply_pause(self, now: float) -> None:
        if now - self._pending_checked < PENDING_EVERY_S:
            return
        self._pending_checked = now
        should = self.rule.paused(self.writer.pending())
        if should and not self.paused:
            self.paused = True
            self.status.pauses += 1
            self._pause_assignment()
            log.info(
                "Receiver %d paused: the log holds %d or more unprocessed blocks",
                self.spec.receiver,
                self.rule.max_pending,
            )
            self._set_state("paused")
        elif not should and self.paused:
            self.paused = False
            self.consumer.resume(self.consumer.assignment())
            log.info("Receiver %d resumed", self.spec.receiver)
            self._set_state("running")

    def _pause_assignment(self) -> None:
        self._repause = False
        assignment = self.consumer.assignment()
        if assignment:
            self.consumer.pause(assignment)
