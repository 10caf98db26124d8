"""A share receiver: a member of a share group (KIP-932) that writes what it acquires to the
log and acknowledges it only then. Runs in a Spark executor (a Python worker), as one
long-running task, for as long as the stream runs; the driver starts and restarts it as it does
a consumer-group receiver (:mod:`~kafka_direct.dstream.receiver.supervisor`).

One turn of the loop (:meth:`ShareReceiver.step`):

1. ``poll``: the broker hands over a batch of records, each *acquired* (locked to this member)
   for the group's ``share.record.lock.duration.ms``;
2. each record is checked: one delivered more than ``maxDeliveryAttempts`` times is rejected
   unseen (every earlier delivery ended unlogged: a holder died, or a lock expired first);
   else ``recordCheck`` runs, if given, and a record it refuses is released for another
   attempt, or rejected on its last one (``maxDeliveryAttempts``, or the group's
   ``share.delivery.count.limit`` if lower: released there, the broker would archive it
   unnamed). A rejected record is named (topic, partition, offset, delivery count) in
   ``control/``;
3. if the batch was held as long as the lock, the broker has taken it back: a record it will
   deliver again is released, not logged, and the receiver warns with the setting to change
   (``lock_expired`` in its status; the driver counts it in the batch's
   ``lock_expired_records`` and warns too). A record on the group's last delivery
   (``share.delivery.count.limit``) is logged anyway (``logged_late``): the broker archives it
   and no receiver would ever see it again. Its ``ACCEPT`` may be refused, which counts it as
   a possible repeat;
4. the rest is logged as one block (:meth:`~kafka_direct.dstream.wal.BlockWriter.append`:
   fsynced when it returns), and **only then** acknowledged ``ACCEPT``. If the log cannot be
   written, the records on the group's last delivery are rejected and named before the
   receiver fails (the broker would archive them unnamed), and the others come back;
5. the acknowledgements travel with the next ``poll``, and with a ``commit_sync`` at least every
   ``ackCommitInterval`` (a quarter of the lock at most).

The preview client (confluent-kafka 2.16) requires every record of a poll to be acknowledged
before the next poll, so a block is one poll's records. It has no ``RENEW`` acknowledgement, so a
receiver cannot extend a lock; it never needs to, because a lock covers only poll-to-log, never
the batch that processes the records later. A record that is in the log but whose
acknowledgement did not reach the broker (the receiver died in between, or the lock expired) is
delivered again: a repeat, counted in the block's ``redelivered``, never a loss. The broker's
answer to each set of acknowledgements says which it refused; a refused ``ACCEPT`` is such a
repeat (``accept_refused``, the batch's ``ack_refused_records``), a refused ``RELEASE`` is not
(:mod:`~kafka_direct.dstream.receiver.share_acks` keeps what each acknowledgement said).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from kafka_direct.config.share import ShareRecord, ShareStreamConfig
from kafka_direct.consumer.rows import to_record_batch
from kafka_direct.dstream.receiver.base import PENDING_EVERY_S, BaseReceiver, ReceiverSpec
from kafka_direct.dstream.receiver.control import ReceiverSignals, ReceiverStatus, append_rejected
from kafka_direct.dstream.receiver.share_acks import ACCEPT, REJECT, RELEASE, AckLedger
from kafka_direct.dstream.receiver.wal import BlockMeta, BlockWriter

__all__ = ["AckTypes", "ShareReceiver"]

log = logging.getLogger(__name__)

_POLL_TIMEOUT_S = 0.5
#: Setting named when records outlive their lock.
LOCK_SETTING = "share.record.lock.duration.ms"


def _count(message: Any) -> int:
    """The record's delivery count (1 if the client does not say)."""
    return int(message.delivery_count() or 1)


class AckTypes:
    """The client's acknowledgement types (confluent_kafka.AcknowledgeType), injected."""

    def __init__(self, accept: Any, release: Any, reject: Any) -> None:
        self.accept, self.release, self.reject = accept, release, reject


class ShareReceiver(BaseReceiver):
    """One share receiver's loop around an injected share consumer (the client's, or a fake)."""

    KIND = "Share receiver"

    def __init__(
        self,
        spec: ReceiverSpec,
        consumer: Any,
        writer: BlockWriter,
        signals: ReceiverSignals,
        *,
        acks: AckTypes,
        classify_error: Callable[[Any], BaseException | None] = lambda _error: None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        report: Callable[[ReceiverStatus], None] | None = None,
        name_rejected: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        assert isinstance(spec.config, ShareStreamConfig)
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
        self.config: ShareStreamConfig = spec.config
        self.acks = acks
        self._name_rejected = name_rejected or (
            lambda entry: append_rejected(spec.root, spec.run, spec.receiver, entry)
        )
        self._unflushed_acks = 0
        self._flushed_at = clock()
        self._ledger = AckLedger()

    # -- the loop ------------------------------------------------------------------------------

    def _start(self) -> None:
        self.consumer.set_acknowledgement_commit_callback(self.on_acknowledged)
        self.consumer.subscribe(list(self.config.topics))
        self.status.assignment = [f"{t} (shared)" for t in self.config.topics]

    def _finish(self) -> None:
        self.flush_acks(force=True)

    def closed(self) -> None:
        # close() delivers the answers to the last acknowledgements: count them.
        self.report()

    def step(self) -> None:
        """One turn: back-pressure, then poll, check, log, acknowledge."""
        now = self._clock()
        self._apply_pause(now)
        if self.paused:
            # Holding nothing: every record polled so far is logged and acknowledged.
            self.flush_acks()
            self._sleep(0.1)
            return
        messages = list(self.consumer.poll(_POLL_TIMEOUT_S))
        polled = self._clock()
        if messages:
            self.take(messages, polled)
        self.flush_acks()
        self._report_now(self._clock())

    def take(self, messages: list[Any], polled: float) -> None:
        """Check, log and acknowledge one poll's records (all of them, as the client requires)."""
        keep: dict[tuple[str, int], list[Any]] = {}
        for message in messages:
            error = message.error()
            if error is not None:
                self._consumer_error(error)
                continue
            count = _count(message)
            if count > self.config.max_delivery_attempts:
                self._reject(
                    message,
                    count,
                    "every earlier delivery ended unlogged: its holder died, or its lock "
                    "expired before the record was logged (a lock shorter than recordCheck "
                    "and the write-ahead log's sync take)",
                )
                continue
            if not self._passes(message, count):
                continue
            keep.setdefault((message.topic(), message.partition()), []).append(message)
        held = self._clock() - polled
        late = bool(keep) and held >= self.config.lock_duration_s
        if late:
            keep = self._expired(keep, held)
        elif held > self.config.lock_duration_s / 2:
            self._warn_lock(held, sum(map(len, keep.values())), "slow")
        if keep:
            self._log_or_name(keep)
            for message in (m for batch in keep.values() for m in batch):
                # Only now: the block is durable.
                if late:
                    self._accept_late(message)
                else:
                    self._acknowledge(message, ACCEPT)

    def flush_acks(self, *, force: bool = False) -> None:
        """Send pending acknowledgements when ``ackCommitInterval`` has passed (or ``force``)."""
        now = self._clock()
        if not self._unflushed_acks:
            self._flushed_at = now
            return
        if force or now - self._flushed_at >= self.config.ack_commit_interval_s:
            self.consumer.commit_sync(max(1.0, self.config.lock_duration_s / 2))
            self._unflushed_acks = 0
            self._flushed_at = now

    def on_acknowledged(self, offsets: Any, error: Any) -> None:
        """The broker's answer to a set of acknowledgements (the client's commit callback)."""
        outcome = self._ledger.settle(offsets, refused=error is not None)
        self.status.acked += outcome.confirmed
        self.status.ack_failures += outcome.refused_accepts + outcome.refused_others
        self.status.accept_refused += outcome.refused_accepts
        shown = ", ".join(f"{tp.topic}-{tp.partition}" for tp in (offsets or {})) or "?"
        if outcome.refused_others:
            # Released or rejected records: nothing of them was logged, so nothing repeats.
            log.info(
                "Share receiver %d: the broker refused %d release/reject acknowledgement(s) of "
                "%s (%s); those records were not logged",
                self.spec.receiver,
                outcome.refused_others,
                shown,
                error,
            )
        if not outcome.refused_accepts:
            return
        self._warnings.log(
            log,
            logging.WARNING,
            "ack",
            "Share receiver %d: the broker refused the acknowledgements of %d logged record(s) "
            "of %s (%s). They are in the log already, and the group delivers them again: a "
            "repeat, not a loss. If their lock had expired, raise the group config %s (now "
            "%.0f ms).",
            self.spec.receiver,
            outcome.refused_accepts,
            shown,
            error,
            LOCK_SETTING,
            self.config.lock_duration_s * 1000,
        )

    def _acknowledge(self, message: Any, kind: str) -> None:
        ack = {ACCEPT: self.acks.accept, RELEASE: self.acks.release, REJECT: self.acks.reject}
        self.consumer.acknowledge(message, ack[kind])
        self._ledger.note(message.topic(), message.partition(), message.offset(), kind)
        self._unflushed_acks += 1

    # -- per record ----------------------------------------------------------------------------

    def _passes(self, message: Any, count: int) -> bool:
        check = self.config.record_check
        if check is None:
            return True
        record = ShareRecord(
            message.topic(),
            message.partition(),
            message.offset(),
            message.key(),
            message.value(),
            count,
        )
        try:
            check(record)
        except Exception as exc:  # noqa: BLE001 - the user's check refused the record
            why = f"recordCheck raised {type(exc).__name__}: {exc}"
            if count >= self.config.last_attempt:
                # Released here, it would be archived unnamed by the broker at its limit.
                self._reject(message, count, why)
            else:
                self._acknowledge(message, RELEASE)
                self.status.released += 1
                log.info(
                    "Share receiver %d released %s-%d@%d (delivery %d of %d): %s",
                    self.spec.receiver,
                    message.topic(),
                    message.partition(),
                    message.offset(),
                    count,
                    self.config.last_attempt,
                    why,
                )
            return False
        return True

    def _reject(self, message: Any, count: int, why: str) -> None:
        self._acknowledge(message, REJECT)
        self.status.rejected += 1
        entry = {
            "topic": message.topic(),
            "partition": message.partition(),
            "offset": message.offset(),
            "delivery_count": count,
            "reason": why,
            "receiver": self.spec.receiver,
        }
        log.warning(
            "Share receiver %d rejected %s-%d@%d after %d deliveries (maxDeliveryAttempts=%d): %s",
            self.spec.receiver,
            entry["topic"],
            entry["partition"],
            entry["offset"],
            count,
            self.config.max_delivery_attempts,
            why,
        )
        try:
            self._name_rejected(entry)
        except OSError as exc:  # the warning above names it too
            log.warning("Could not record the rejected record in walDir: %s", exc)

    def _log_block(self, keep: dict[tuple[str, int], list[Any]]) -> None:
        batches, ranges, records = [], [], 0
        redelivered = sum(_count(m) > 1 for batch in keep.values() for m in batch)
        for (topic, partition), batch in sorted(keep.items()):
            batches.append(to_record_batch(topic, partition, batch, self.config.include_headers))
            offsets = [m.offset() for m in batch]
            ranges.append((topic, partition, min(offsets), max(offsets) + 1, len(batch)))
            records += len(batch)
        meta = BlockMeta(
            receiver=self.spec.receiver,
            run=self.spec.run,
            created_ns=time.time_ns(),
            records=records,
            ranges=tuple(ranges),
            redelivered=redelivered,
        )
        self.writer.append(batches, meta)  # durable when it returns
        self._pending_checked = -1e18
        self.status.records += records
        self.status.blocks += 1
        self.status.redelivered += redelivered

    def _expired(
        self, keep: dict[tuple[str, int], list[Any]], held: float
    ) -> dict[tuple[str, int], list[Any]]:
        """Records held past their lock: the broker has taken them back. Those it will deliver
        again are released, not logged (logging them now would only log a repeat); those on the
        group's last delivery it archives (KIP-932: a record back from a member with a delivery
        count at ``share.delivery.count.limit`` is archived, never delivered again), so they
        are the ones returned: logged anyway, or lost."""
        final: dict[tuple[str, int], list[Any]] = {}
        again = 0
        for tp, batch in keep.items():
            for message in batch:
                if _count(message) >= self.config.delivery_count_limit:
                    final.setdefault(tp, []).append(message)
                    continue
                again += 1
                # No longer in flight (the client may say so): there is nothing to hand back.
                with contextlib.suppress(Exception):
                    self._acknowledge(message, RELEASE)
        self.status.lock_expired += again
        if again:
            self._warn_lock(held, again, "expired")
        late = sum(map(len, final.values()))
        if late:
            self.status.logged_late += late
            self._warn_lock(held, late, "last")
        return final

    def _log_or_name(self, keep: dict[tuple[str, int], list[Any]]) -> None:
        """Log ``keep`` as one block. If the log cannot be written, the records on the group's
        last delivery are rejected and named before the failure ends the receiver: the broker
        archives them when they come back to it, so no receiver would ever see them again."""
        try:
            self._log_block(keep)
        except OSError as exc:
            for message in (m for batch in keep.values() for m in batch):
                count = _count(message)
                if count >= self.config.delivery_count_limit:
                    self._reject(
                        message,
                        count,
                        f"its last delivery (share.delivery.count.limit="
                        f"{self.config.delivery_count_limit}) could not be logged: "
                        f"{type(exc).__name__}: {exc}",
                    )
            raise

    def _accept_late(self, message: Any) -> None:
        try:
            self._acknowledge(message, ACCEPT)
        except Exception as exc:  # noqa: BLE001 - the client knows the lock expired
            # Logged already: counted as a refused ACCEPT (a possible repeat), as the broker's.
            self.status.ack_failures += 1
            self.status.accept_refused += 1
            log.info(
                "Share receiver %d: the client refused to acknowledge %s-%d@%d: %s",
                self.spec.receiver,
                message.topic(),
                message.partition(),
                message.offset(),
                exc,
            )

    def _warn_lock(self, held: float, records: int, kind: str) -> None:
        what = {
            "slow": f"took {held:.1f} s from poll to log, more than half the lock",
            "expired": f"held {records} record(s) for {held:.1f} s, past their lock: they were "
            "not logged and the group delivers them again",
            "last": f"held {records} record(s) for {held:.1f} s, past their lock, on their last "
            f"delivery (group config share.delivery.count.limit="
            f"{self.config.delivery_count_limit}): the broker archives them and never delivers "
            "them again, so they are logged anyway; their ACCEPT may be refused (counted as a "
            "possible repeat)",
        }[kind]
        self._warnings.log(
            log,
            logging.WARNING,
            f"lock {kind}",
            "Share receiver %d %s. Raise the group config %s (now %.0f ms; broker default "
            "group.share.record.lock.duration.ms), or make recordCheck faster.",
            self.spec.receiver,
            what,
            LOCK_SETTING,
            self.config.lock_duration_s * 1000,
        )

    # -- back-pressure, signals, status --------------------------------------------------------

    def _apply_pause(self, now: float) -> None:
        if now - self._pending_checked < PENDING_EVERY_S:
            return
        self._pending_checked = now
        should = self.writer.pending() >= self.config.max_pending_blocks
        if should != self.paused:
            self.paused = should
            self.status.pauses += should
            log.info(
                "Share receiver %d %s",
                self.spec.receiver,
                "paused: the log is full" if should else "resumed",
            )
            self._set_state("paused" if should else "running")
