"""The DStream-style direct stream: ``KafkaUtils.createDirectStream`` for users who own their
offsets. Runs in the Spark driver (the user's process): a loop in a driver thread; executors only
run the batch reads it builds. This module is the direct stream's loop (failures, retries,
commits, progress); the lifecycle it shares with the receiver stream (``foreachBatch``, ``stop``,
``awaitTermination``) is :mod:`~kafka_direct.dstream.lifecycle`, and the steps it runs live
next door.

Each batch is Spark's ``DirectKafkaInputDStream.compute`` followed by the user's output:

1. the batch's offset ranges: new topics and partitions, starting offsets, data loss, then the
   rate limits and the backpressure rate clamp each ``untilOffset``
   (:mod:`~kafka_direct.dstream.planner`);
2. a batch DataFrame over exactly those ranges, through ``spark.read.format("kafka_direct")``;
3. the user's function ``fn(df, offsetRanges)``;
4. ``commitAll``: the ranges the user queued with :meth:`DirectKafkaStream.commitAsync` (the
   highest ``untilOffset`` per partition) go to the offset store, or to the Kafka group
   (:mod:`~kafka_direct.dstream.commit_queue`).

Nothing is committed unless the user asked, and a batch whose function raised is never
committed. Batches are due every ``batchInterval`` from the start; a batch that runs late starts
as soon as the previous one ends, and its scheduling delay says how late it is, as in DStreams.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka_direct.config.dstream import FailurePolicy
from kafka_direct.dstream.commit_queue import CommitCallback, CommitQueue, describe_offsets
from kafka_direct.dstream.lifecycle import JobControl, Stopped, StreamLifecycle
from kafka_direct.dstream.planner import DirectStreamPlanner, RateController
from kafka_direct.dstream.strategies import ConsumerStrategy
from kafka_direct.errors import (
    BatchFailedError,
    ConfigurationError,
    DataLossError,
    StreamStateError,
)
from kafka_direct.offsets import OffsetRange, PartitionOffsets, TopicPartition
from kafka_direct.planning.pid import PIDRateEstimator
from kafka_direct.stores.base import OffsetStore

__all__ = ["BatchFailedError", "BatchInfo", "DirectKafkaStream", "JobControl", "StreamStateError"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchInfo:
    """Progress of one finished batch (Spark's ``BatchInfo`` for one input stream).

    ``num_records`` counts the offsets in the ranges, which is what Spark reports for a KafkaRDD:
    an upper bound on rows, since transaction markers and compaction leave gaps.
    ``processing_time_s`` is the whole batch (planning, the user's function, the commit);
    ``scheduling_delay_s`` is how late the batch started after its due time.
    """

    batch_id: int
    batch_time: float  # when the batch was due, seconds since the epoch
    offset_ranges: tuple[OffsetRange, ...]
    num_records: int
    processing_time_s: float
    scheduling_delay_s: float
    attempts: int = 1
    rate: float | None = None  # the backpressure rate this batch was planned with, records/s
    committed: Mapping[TopicPartition, int] = field(default_factory=dict)
    #: Offsets skipped because they were deleted before this batch read them (failOnDataLoss
    #: false), per partition; empty when nothing was lost.
    lost: Mapping[TopicPartition, int] = field(default_factory=dict)

    # camelCase views mirror Spark's BatchInfo (delays in milliseconds).
    @property
    def offsetRanges(self) -> list[OffsetRange]:
        return list(self.offset_ranges)

    @property
    def numRecords(self) -> int:
        return self.num_records

    @property
    def processingDelay(self) -> int:
        return round(self.processing_time_s * 1000)

    @property
    def schedulingDelay(self) -> int:
        return round(self.scheduling_delay_s * 1000)

    @property
    def totalDelay(self) -> int:
        return self.processingDelay + self.schedulingDelay

    def describe(self) -> str:
        rate = "" if self.rate is None else f", backpressure rate {self.rate:.0f}/s"
        committed = (
            f", committed {describe_offsets(self.committed)}"
            if self.committed
            else ", nothing committed"
        )
        if self.lost:
            committed += f", data loss: skipped {describe_offsets(self.lost)} deleted offsets"
        ranges = ", ".join(str(r) for r in self.offset_ranges if r.count() > 0) or "no new records"
        return (
            f"Batch {self.batch_id}: {self.num_records} records ({ranges}) in "
            f"{self.processing_time_s:.3f} s, scheduling delay {self.scheduling_delay_s:.3f} s"
            f"{rate}{committed}"
        )


class DirectKafkaStream(StreamLifecycle[BatchInfo]):
    """A running (or runnable) direct stream. Build it with ``KafkaUtils.createDirectStream``.

    ``stop(graceful=True)`` lets the running batch finish and commit what it queued, then
    commits anything still queued. ``stop(graceful=False)`` cancels the running batch's Spark
    jobs; that batch is not committed unless its function had already returned.
    """

    def __init__(
        self,
        strategy: ConsumerStrategy,
        planner: DirectStreamPlanner,
        frame_builder: Callable[[list[OffsetRange]], Any],
        *,
        batch_interval_s: float,
        offset_store: OffsetStore,
        owns_store: bool,
        estimator: PIDRateEstimator | None,
        initial_rate: float,
        failure_policy: FailurePolicy,
        max_retries: int,
        retry_interval_s: float,
        retained_batches: int = 1000,
        jobs: JobControl | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(jobs=jobs, clock=clock, retained_batches=retained_batches)
        self._strategy = strategy
        self._planner = planner
        self._frame_builder = frame_builder
        self._interval_s = batch_interval_s
        self._store = offset_store
        self._owns_store = owns_store
        self._rate = RateController(estimator, initial_rate)
        self._failure_policy = failure_policy
        self._max_retries = max_retries
        self._retry_interval_s = retry_interval_s
        self._queue = CommitQueue()
        self._current: PartitionOffsets = {}
        self._behind = False

    def __repr__(self) -> str:
        return f"DirectKafkaStream({self._strategy.describe()}, {self._state()})"

    # -- the DStream-shaped API ----------------------------------------------------------------

    @property
    def group_id(self) -> str:
        return self._strategy.group_id

    def commitAsync(
        self, offsetRanges: Iterable[OffsetRange], callback: CommitCallback | None = None
    ) -> None:
        """Queue ranges for commit; they are committed when the running batch's function returns
        (the highest ``untilOffset`` per partition), or at the end of the next batch. Threadsafe.

        As in Spark, only the most recent ``callback`` is used: ``commitAsync(ranges)`` without
        one means no callback for the commits that follow, not the previous one.
        """
        ranges = list(offsetRanges)
        bad = [r for r in ranges if not isinstance(r, OffsetRange)]
        if bad:
            raise ConfigurationError(
                "offsetRanges", bad[0], "the OffsetRange objects passed to your batch function"
            )
        self._queue.add(ranges, callback)

    def start(self) -> None:
        """Resolve the starting offsets (errors surface here) and start the batch loop."""
        self._check_startable()
        try:
            self._store.check_access(self.group_id)
            self._store.attach_stream(
                self.group_id, fail_on_data_loss=self._planner.fail_on_data_loss
            )
            self._current = self._planner.initial_offsets()
        except BaseException:
            self._close_clients()
            raise
        self._start_loop(self._run, f"kafka-direct-stream-{self.group_id}")

    @property
    def currentOffsets(self) -> dict[TopicPartition, int]:
        """The next offset to read per partition (what the next batch starts from)."""
        with self._lock:
            return dict(self._current)

    # -- the loop ------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._tag_jobs()
            for batch_id, batch_time, due in self._batch_times(self._interval_s):
                self._run_batch(batch_id, batch_time, due)
        except Stopped:
            log.info("Stream %s stopped; the running batch was not committed", self.group_id)
        except BaseException as exc:  # noqa: BLE001 - handed to awaitTermination, never lost
            self._error = exc
            log.error("Stream %s stopped: %s", self.group_id, exc)
        finally:
            self._shutdown()

    def _shutdown(self) -> None:
        try:
            # What is still queued belongs to batches that succeeded: a failed or cancelled
            # batch's own ranges were dropped when it failed.
            self._queue.commit_all(self._store, self.group_id)
        except Exception as exc:  # noqa: BLE001 - the final commit must not hide the stop
            log.warning("Final commit of stream %s failed: %s", self.group_id, exc)
        finally:
            self._untag_jobs()
            self._close_clients()
            self._terminated.set()

    def _close_clients(self) -> None:
        self._planner.reader.close()
        if self._owns_store:
            self._store.close()

    def _run_batch(self, batch_id: int, batch_time: float, due: float) -> None:
        began = self._clock()
        rate = self._rate.current()
        lost_before = dict(self._planner.losses.lost)
        ranges: list[OffsetRange] | None = None
        attempts = 0
        while True:
            attempts += 1
            try:
                if ranges is None:
                    ranges = self._planner.plan(self.currentOffsets, rate)
                self._call_user(ranges)
                break
            except Exception as exc:
                if self._stop_requested.is_set() and not self._graceful:
                    raise Stopped from exc
                planning = ranges is None
                # A bad option or lost data is the same on every attempt: fail at once.
                hopeless = planning and isinstance(exc, ConfigurationError | DataLossError)
                if self._failure_policy != "retry" or attempts > self._max_retries or hopeless:
                    if planning:
                        raise  # our own error from planning, already clear
                    assert ranges is not None
                    raise BatchFailedError(batch_id, ranges, attempts, exc) from exc
                log.warning(
                    "Batch %d failed (attempt %d of %d); retrying %s in %.1f s: %s",
                    batch_id,
                    attempts,
                    self._max_retries + 1,
                    "its planning" if planning else "the same ranges",
                    self._retry_interval_s,
                    exc,
                )
                if self._stop_requested.wait(self._retry_interval_s):
                    # The batch failed before the stop came: a stop ends the retries, it does
                    # not make the failure go away (awaitTermination must raise it).
                    log.warning("Stopped before retrying batch %d; not committed", batch_id)
                    if planning:
                        raise
                    assert ranges is not None
                    raise BatchFailedError(batch_id, ranges, attempts, exc) from exc
        committed = self._queue.commit_all(self._store, self.group_id)
        with self._lock:
            self._current = {r.topic_partition: r.until_offset for r in ranges}
        ended = self._clock()
        info = BatchInfo(
            batch_id=batch_id,
            batch_time=batch_time,
            offset_ranges=tuple(ranges),
            num_records=sum(r.count() for r in ranges),
            processing_time_s=ended - began,
            scheduling_delay_s=max(0.0, began - due),
            attempts=attempts,
            rate=rate,
            committed=committed,
            lost={
                tp: n - lost_before.get(tp, 0)
                for tp, n in self._planner.losses.lost.items()
                if n != lost_before.get(tp, 0)
            },
        )
        with self._lock:
            self._batches.append(info)
        log.info("%s", info.describe())
        self._warn_if_behind(info)
        self._rate.update(ended, info.num_records, info.processingDelay, info.schedulingDelay)

    def _warn_if_behind(self, info: BatchInfo) -> None:
        # Once per episode: batches start late because earlier ones outlasted the interval.
        late = info.scheduling_delay_s > self._interval_s
        if late and not self._behind:
            log.warning(
                "Stream %s is falling behind: batch %d started %.1f s late, because batches "
                "take longer than batchInterval (%.1f s). Lower maxRatePerPartition, pass "
                "backpressure=True, or raise batchInterval.",
                self.group_id,
                info.batch_id,
                info.scheduling_delay_s,
                self._interval_s,
            )
        if late:
            self._behind = True
        elif info.scheduling_delay_s == 0:
            self._behind = False

    def _call_user(self, ranges: list[OffsetRange]) -> None:
        """Build the batch's DataFrame and call the user's function; a failure commits nothing."""
        assert self._fn is not None
        try:
            self._fn(self._frame_builder(ranges), list(ranges))
        except BaseException:
            # commitAsync calls made by the failed attempt must not commit its data.
            dropped = self._queue.discard_batch(ranges)
            if dropped:
                log.info("Dropped %d queued commit(s) of a failed batch", len(dropped))
            raise
