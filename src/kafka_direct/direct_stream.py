"""The DStream-style direct stream: ``KafkaUtils.createDirectStream`` for users who own their
offsets. Runs in the Spark driver (the user's process): a loop in a driver thread; executors only
run the batch reads it builds. This module is the stream's lifecycle (start, stop, failures,
retries, progress); the steps it runs live next door.

Each batch is the seeds' ``DirectKafkaInputDStream.compute`` followed by the user's output:

1. the batch's offset ranges: new topics and partitions, starting offsets, data loss, then the
   rate limits and the backpressure rate clamp each ``untilOffset``
   (:mod:`~kafka_direct.direct_planner`);
2. a batch DataFrame over exactly those ranges, through ``spark.read.format("kafka_direct")``;
3. the user's function ``fn(df, offsetRanges)``;
4. ``commitAll``: the ranges the user queued with :meth:`DirectKafkaStream.commitAsync` (the
   highest ``untilOffset`` per partition) go to the offset store, or to the Kafka group
   (:mod:`~kafka_direct.commit_queue`).

Nothing is committed unless the user asked, and a batch whose function raised is never
committed. Batches are due every ``batchInterval`` from the start; a batch that runs late starts
as soon as the previous one ends, and its scheduling delay says how late it is, as in DStreams.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from kafka_direct.commit_queue import CommitCallback, CommitQueue, describe_offsets
from kafka_direct.direct_planner import DirectStreamPlanner, RateController
from kafka_direct.errors import (
    BatchFailedError,
    ConfigurationError,
    DataLossError,
    StreamStateError,
)
from kafka_direct.offset_store import OffsetStore
from kafka_direct.offsets import OffsetRange, PartitionOffsets, TopicPartition
from kafka_direct.rate_estimator import PIDRateEstimator
from kafka_direct.strategies import ConsumerStrategy

__all__ = ["BatchFailedError", "BatchInfo", "DirectKafkaStream", "JobControl", "StreamStateError"]

log = logging.getLogger(__name__)

BatchFunction = Callable[[Any, list[OffsetRange]], object]
FailurePolicy = Literal["stop", "retry"]


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
        ranges = ", ".join(str(r) for r in self.offset_ranges if r.count() > 0) or "no new records"
        return (
            f"Batch {self.batch_id}: {self.num_records} records ({ranges}) in "
            f"{self.processing_time_s:.3f} s, scheduling delay {self.scheduling_delay_s:.3f} s"
            f"{rate}{committed}"
        )


@dataclass(frozen=True)
class JobControl:
    """Tags the loop thread's Spark jobs so that ``stop(graceful=False)`` can cancel them.

    Spark job tags are thread-local, so ``tag`` runs in the loop thread and ``interrupt`` in the
    thread that calls ``stop``. Built by :mod:`kafka_direct.kafka_utils` for the session at hand.
    """

    tag: Callable[[], object]
    interrupt: Callable[[], object]
    untag: Callable[[], object]


class _Stopped(Exception):
    """The running batch was abandoned by ``stop(graceful=False)``."""


class DirectKafkaStream:
    """A running (or runnable) direct stream. Build it with ``KafkaUtils.createDirectStream``."""

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
        self._jobs = jobs
        self._clock = clock
        self._fn: BatchFunction | None = None
        self._queue = CommitQueue()
        self._lock = threading.Lock()
        self._batches: deque[BatchInfo] = deque(maxlen=retained_batches)
        self._current: PartitionOffsets = {}
        self._thread: threading.Thread | None = None
        self._stop_requested = threading.Event()
        self._graceful = True
        self._behind = False
        self._terminated = threading.Event()
        self._error: BaseException | None = None

    def __repr__(self) -> str:
        state = "active" if self.isActive else ("stopped" if self._thread else "not started")
        return f"DirectKafkaStream({self._strategy.describe()}, {state})"

    # -- the DStream-shaped API ----------------------------------------------------------------

    @property
    def group_id(self) -> str:
        return self._strategy.group_id

    def foreachBatch(self, fn: BatchFunction) -> DirectKafkaStream:
        """Register ``fn(df, offsetRanges)``, called once per batch, even for an empty one."""
        if self._thread is not None:
            raise StreamStateError("foreachBatch() must be called before start().")
        if not callable(fn):
            raise ConfigurationError("foreachBatch", fn, "a function fn(df, offsetRanges)")
        self._fn = fn
        return self

    def commitAsync(
        self, offsetRanges: Iterable[OffsetRange], callback: CommitCallback | None = None
    ) -> None:
        """Queue ranges for commit; they are committed when the running batch's function returns
        (the highest ``untilOffset`` per partition), or at the end of the next batch. Threadsafe.
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
        if self._fn is None:
            raise StreamStateError(
                "No batch function registered: call stream.foreachBatch(fn) before start()."
            )
        if self._thread is not None or self._stop_requested.is_set():
            raise StreamStateError("A stream can be started only once; create a new one.")
        try:
            self._current = self._planner.initial_offsets()
        except BaseException:
            self._close_clients()
            raise
        self._thread = threading.Thread(
            target=self._run, name=f"kafka-direct-stream-{self.group_id}", daemon=True
        )
        self._thread.start()

    def stop(self, graceful: bool = True, timeout: float | None = None) -> None:
        """Stop the stream and wait (up to ``timeout`` s) for the loop to end.

        ``graceful=True`` lets the running batch finish and commit what it queued, then commits
        anything still queued. ``graceful=False`` cancels the running batch's Spark jobs; that
        batch is not committed unless its function had already returned.
        """
        self._graceful = self._graceful and graceful
        self._stop_requested.set()
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return  # not started, or called from the batch function: the loop ends after it
        deadline = None if timeout is None else time.monotonic() + timeout
        while thread.is_alive():
            if not graceful and self._jobs is not None:
                # Again and again: a job the batch submits after a cancel must be cancelled too
                # (a batch's first job can take seconds to plan).
                self._jobs.interrupt()
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            thread.join(0.2 if left is None else min(0.2, left))

    def awaitTermination(self, timeout: float | None = None) -> bool:
        """Wait until the stream stops; True if it has. Re-raises the error that stopped it."""
        if self._thread is None:
            raise StreamStateError("The stream was never started: call start() first.")
        done = self._terminated.wait(timeout)
        if self._error is not None:
            raise self._error
        return done

    def exception(self) -> BaseException | None:
        """The error that stopped the stream, or None."""
        return self._error

    @property
    def isActive(self) -> bool:
        return self._thread is not None and not self._terminated.is_set()

    @property
    def batches(self) -> list[BatchInfo]:
        """The finished batches, oldest first (the last ``retainedBatches``)."""
        with self._lock:
            return list(self._batches)

    recentProgress = batches

    @property
    def lastProgress(self) -> BatchInfo | None:
        with self._lock:
            return self._batches[-1] if self._batches else None

    @property
    def currentOffsets(self) -> dict[TopicPartition, int]:
        """The next offset to read per partition (what the next batch starts from)."""
        with self._lock:
            return dict(self._current)

    # -- the loop ------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            if self._jobs is not None:
                self._jobs.tag()
            started = self._clock()
            wall_started = time.time()
            batch_id = 0
            while True:
                due = started + batch_id * self._interval_s
                if self._stop_requested.wait(max(0.0, due - self._clock())):
                    break
                self._run_batch(batch_id, wall_started + (due - started), due)
                batch_id += 1
        except _Stopped:
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
            if self._jobs is not None:
                try:
                    self._jobs.untag()
                except Exception as exc:  # noqa: BLE001 - cleanup is best effort
                    log.debug("Removing the job tag of stream %s: %s", self.group_id, exc)
            self._close_clients()
            self._terminated.set()

    def _close_clients(self) -> None:
        self._planner.reader.close()
        if self._owns_store:
            self._store.close()

    def _run_batch(self, batch_id: int, batch_time: float, due: float) -> None:
        began = self._clock()
        rate = self._rate.current()
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
                    raise _Stopped from exc
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
                    log.warning("Stopped before retrying batch %d; not committed", batch_id)
                    raise _Stopped from exc
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
