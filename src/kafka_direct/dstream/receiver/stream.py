"""The receiver-based stream: ``KafkaUtils.createStream``, Spark's older approach. Runs in the
Spark driver (the user's process): a loop in a driver thread; receivers run on executors
(:mod:`~kafka_direct.dstream.receiver.supervisor`), batch reads too.

Receivers are members of the user's consumer group: Kafka assigns them partitions, they log
what they receive in blocks (:mod:`~kafka_direct.dstream.receiver.wal`) and commit each
block's offsets once it is logged. Every ``batchInterval`` this loop:

1. lists the blocks logged and not processed yet, oldest first (on the first batch after a
   restart, those of the earlier run: they are processed first);
2. builds the batch DataFrame over exactly those blocks: ``spark.read.format("kafka_direct_wal")``,
   read on executors, with the direct stream's schema (an empty batch is an empty DataFrame,
   and ``fn`` is still called);
3. calls ``fn(df, offsetRanges)``; the ranges describe the blocks (already committed);
4. marks the blocks done (``done/``) and deletes the previous batch's.

A crash between 3 and 4 processes the batch again: the guarantee is at-least-once. Without the
write-ahead log, what was received and not processed is lost when the driver dies, as in
Spark. The lifecycle is the direct stream's: ``foreachBatch``, ``start``, ``awaitTermination``,
``stop(graceful)``, and a :class:`~kafka_direct.dstream.receiver.progress.ReceiverBatchInfo`
per batch. ``stop(graceful=True)`` stops the receivers first (each logs and commits its last
block), then runs a last batch over what they logged, so a graceful stop loses nothing even
without the WAL.
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

from kafka_direct.config.receiver import ReceiverStreamConfig
from kafka_direct.dstream.lifecycle import JobControl, Stopped, StreamLifecycle
from kafka_direct.dstream.receiver.control import ReceiverStatus
from kafka_direct.dstream.receiver.progress import (
    ReceiverBatchFailedError,
    ReceiverBatchInfo,
    merge_ranges,
)
from kafka_direct.dstream.receiver.supervisor import ReceiverSupervisor, new_run_id
from kafka_direct.dstream.receiver.wal_log import BlockLog, PendingBlock, Recovery
from kafka_direct.errors import StreamStateError

__all__ = ["ReceiverKafkaStream"]

log = logging.getLogger(__name__)


class ReceiverKafkaStream(StreamLifecycle[ReceiverBatchInfo]):
    """A receiver-based stream. Build it with ``KafkaUtils.createStream``.

    ``stop(graceful=True)`` lets the running batch finish, stops the receivers (each logs and
    commits its last block, then leaves the group) and processes what they logged in a last
    batch. ``stop(graceful=False)`` cancels the running batch's Spark jobs and stops the
    receivers; unprocessed blocks stay in the log for the next run (with the WAL).
    """

    def __init__(
        self,
        spark: Any,
        config: ReceiverStreamConfig,
        *,
        jobs: JobControl | None = None,
        clock: Callable[[], float] = time.monotonic,
        supervisor_factory: Callable[..., ReceiverSupervisor] = ReceiverSupervisor,
        frame_builder: Callable[[Sequence[PendingBlock]], Any] | None = None,
    ) -> None:
        # The last two are for tests: the loop runs against fakes without Kafka or Spark.
        super().__init__(jobs=jobs, clock=clock, retained_batches=config.retained_batches)
        self._spark = spark
        self.config = config
        self._supervisor_factory = supervisor_factory
        self._frame_builder = frame_builder or self._frame
        self._run_id = new_run_id()
        self._failure: BaseException | None = None
        self._log: BlockLog | None = None
        self._supervisor: ReceiverSupervisor | None = None
        self._receivers_stopped = False
        self._empty: Any = None
        self._previous_done: list[str] = []
        self._behind = False
        self.recovery: Recovery | None = None
        #: walDir, or the scratch directory chosen at start (writeAheadLog=False, no walDir).
        self.wal_dir: str | None = config.wal_dir

    def __repr__(self) -> str:
        wal = "WAL" if self.config.write_ahead_log else "no WAL"
        return (
            f"ReceiverKafkaStream(group={self.config.group}, topics={','.join(self.config.topics)}"
            f", {self.config.num_receivers} receiver(s), {wal}, {self._state()})"
        )

    # -- the DStream-shaped API ----------------------------------------------------------------

    @property
    def group_id(self) -> str:
        return self.config.group

    def commitAsync(self, *_args: object, **_kwargs: object) -> None:
        raise StreamStateError(
            "A receiver stream commits by itself: each receiver commits a block's offsets to "
            "the group as soon as the block is in the write-ahead log. Remove the commitAsync "
            "call, or use KafkaUtils.createDirectStream to commit after your output."
        )

    def start(self) -> None:
        """Check everything that can be checked (walDir, topics, task slots), take walDir over
        (refused while another run's driver still beats there), recover the log of an earlier
        run, start the receivers and the batch loop. Errors are raised here."""
        self._check_startable()
        root = self.wal_dir or tempfile.mkdtemp(prefix="kafka-direct-blocks-")
        self.wal_dir = root
        self._log = BlockLog(root, self._run_id, durable=self.config.write_ahead_log)
        self._log.prepare(self.config.group, self.config.topics, self.config.include_headers)
        supervisor = self._supervisor_factory(
            self._spark, self.config, root, self._run_id, on_failure=self._receiver_failed
        )
        supervisor.check()
        # Before the log is touched: a run still beating here keeps its directory.
        supervisor.claim()
        try:
            self.recovery = self._log.recover()
            if self._frame_builder == self._frame:
                from kafka_direct.dstream.receiver.wal_source import register_wal_source

                register_wal_source(self._spark)
        except BaseException:
            supervisor.release()
            raise
        self._supervisor = supervisor
        log.info(
            "Stream %s: starting %d receiver(s) on %s, %s in %s",
            self.group_id,
            self.config.num_receivers,
            ", ".join(self.config.topics),
            "write-ahead log" if self.config.write_ahead_log else "no write-ahead log",
            root,
        )
        supervisor.start()
        self._start_loop(self._loop, f"kafka-direct-receiver-stream-{self.group_id}")

    @property
    def receivers(self) -> list[ReceiverStatus]:
        """Each receiver as it last reported itself (state, host, pid, assignment, counts)."""
        return [] if self._supervisor is None else self._supervisor.statuses()

    @property
    def receiver_restarts(self) -> list[int]:
        """How many times the driver has restarted each receiver."""
        return [] if self._supervisor is None else self._supervisor.restarts

    # -- the loop ------------------------------------------------------------------------------

    def _receiver_failed(self, error: BaseException) -> None:
        self._failure = error
        self._stop_requested.set()

    def _loop(self) -> None:
        try:
            self._tag_jobs()
            next_id = 0
            for batch_id, batch_time, due in self._batch_times(self.config.batch_interval_s):
                self._run_batch(batch_id, batch_time, due)
                next_id = batch_id + 1
            if self._failure is not None:
                raise self._failure
            if self._graceful:
                self._stop_receivers(graceful=True)
                assert self._log is not None
                if self._log.pending():
                    now = self._clock()
                    self._run_batch(next_id, time.time(), now)
        except Stopped:
            log.info("Stream %s stopped; the running batch's blocks stay in the log", self.group_id)
        except BaseException as exc:  # noqa: BLE001 - handed to awaitTermination, never lost
            self._error = exc
            log.error("Stream %s stopped: %s", self.group_id, exc)
        finally:
            self._shutdown()

    def _stop_receivers(self, *, graceful: bool) -> None:
        if self._supervisor is not None and not self._receivers_stopped:
            self._receivers_stopped = True
            self._supervisor.stop(graceful=graceful)

    def _shutdown(self) -> None:
        try:
            self._stop_receivers(graceful=False)
            if self._log is not None:
                self._log.purge_done(self._previous_done)
                self._discard_unprocessed()
        except Exception as exc:  # noqa: BLE001 - cleanup must not hide why the stream stopped
            log.warning("Cleaning up stream %s: %s", self.group_id, exc)
        finally:
            self._untag_jobs()
            self._terminated.set()

    def _discard_unprocessed(self) -> None:
        assert self._log is not None
        if self.config.write_ahead_log:
            return
        lost = [b for b in self._log.pending() if b.ref.startswith("volatile")]
        if lost:
            log.warning(
                "Stream %s stopped with %d received, committed and unprocessed record(s) in %d "
                "block(s): without the write-ahead log they are lost",
                self.group_id,
                sum(b.meta.records for b in lost),
                len(lost),
            )
        self._log.discard_run()

    def _run_batch(self, batch_id: int, batch_time: float, due: float) -> None:
        assert self._log is not None and self._fn is not None
        began = self._clock()
        paused = sum(1 for s in self.receivers if s.paused)
        blocks = self._log.pending()
        ranges = merge_ranges(r for b in blocks for r in b.meta.offset_ranges())
        try:
            self._fn(self._frame_builder(blocks), list(ranges))
        except Exception as exc:
            if self._stop_requested.is_set() and not self._graceful:
                raise Stopped from exc  # cancelled by stop(graceful=False): not a failure
            raise ReceiverBatchFailedError(
                batch_id, ranges, exc, durable=self.config.write_ahead_log
            ) from exc
        done = self._log.mark_done(blocks)
        lock_expired, ack_refused = self._lock_progress()
        self._log.purge_done(self._previous_done)
        self._previous_done = done
        info = ReceiverBatchInfo(
            batch_id=batch_id,
            batch_time=batch_time,
            offset_ranges=tuple(ranges),
            num_records=sum(b.meta.records for b in blocks),
            processing_time_s=self._clock() - began,
            scheduling_delay_s=max(0.0, began - due),
            blocks=len(blocks),
            recovered_blocks=sum(1 for b in blocks if b.meta.run != self._run_id),
            paused_receivers=paused,
            redelivered_records=sum(b.meta.redelivered for b in blocks),
            rejected_records=self._new_rejections(),
            lock_expired_records=lock_expired,
            ack_refused_records=ack_refused,
        )
        with self._lock:
            self._batches.append(info)
        log.info("%s", info.describe())
        self._warn_if_behind(info)

    def _new_rejections(self) -> int:
        """Records rejected since the last batch (a share stream's; none here)."""
        return 0

    def _lock_progress(self) -> tuple[int, int]:
        """A share stream's records held past their lock and refused ``ACCEPT``s since the
        last batch (none here)."""
        return 0, 0

    def _frame(self, blocks: Sequence[PendingBlock]) -> Any:
        if not blocks:
            if self._empty is None:
                # Built once: a receiver stream has many empty batches, and DataFrames are
                # immutable, so every empty batch can share one.
                from kafka_direct.consumer.rows import schema_ddl

                ddl = schema_ddl(self.config.include_headers)
                self._empty = self._spark.createDataFrame([], ddl)
            return self._empty
        assert self.wal_dir is not None
        slots = self._supervisor.slots if self._supervisor is not None else 1
        return (
            self._spark.read.format("kafka_direct_wal")
            .option("walDir", self.wal_dir)
            .option("blocks", json.dumps([b.ref for b in blocks]))
            .option("includeHeaders", str(self.config.include_headers).lower())
            .option("numPartitions", str(max(1, slots - self.config.num_receivers)))
            .load()
        )

    def _warn_if_behind(self, info: ReceiverBatchInfo) -> None:
        late = info.scheduling_delay_s > self.config.batch_interval_s
        if late and not self._behind:
            log.warning(
                "Stream %s is falling behind: batch %d started %.1f s late, because batches take "
                "longer than batchInterval (%.1f s). Receivers pause once the log holds "
                "maxPendingBlocks (%d) blocks; lower maxRatePerReceiver or raise batchInterval.",
                self.group_id,
                info.batch_id,
                info.scheduling_delay_s,
                self.config.batch_interval_s,
                self.config.max_pending_blocks,
            )
        if late:
            self._behind = True
        elif info.scheduling_delay_s == 0:
            self._behind = False
