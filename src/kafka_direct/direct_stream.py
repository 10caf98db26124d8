"""The DStream-style direct stream: ``KafkaUtils.createDirectStream`` for users who own their
offsets. Runs in the Spark driver (the user's process): a loop in a driver thread; executors only
run the batch reads it builds.

Each batch is the seeds' ``DirectKafkaInputDStream.compute`` followed by the user's output:

1. partitions of the strategy (new topics for a pattern, new partitions), their latest and
   earliest offsets, one request each for all partitions; new partitions start as
   :func:`~kafka_direct.strategies.resolve_new_partition_offsets` says, data loss follows
   ``failOnDataLoss``;
2. the rate limits and the backpressure rate (:mod:`~kafka_direct.rate_estimator`), which clamp
   each partition's ``untilOffset``;
3. a batch DataFrame over exactly those ranges, through ``spark.read.format("kafka_direct")``;
4. the user's function ``fn(df, offsetRanges)``;
5. ``commitAll``: the ranges the user queued with :meth:`DirectKafkaStream.commitAsync` (the
   highest ``untilOffset`` per partition) go to the offset store, or to the Kafka group.

Nothing is committed unless the user asked, and a batch whose function raised is never
committed. Batches are due every ``batchInterval`` from the start; a batch that runs late starts
as soon as the previous one ends, and its scheduling delay says how late it is, as in DStreams.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from kafka_direct.errors import (
    BatchFailedError,
    ConfigurationError,
    DataLossError,
    OffsetConflictError,
    StreamStateError,
)
from kafka_direct.offset_store import OffsetStore, ends_of
from kafka_direct.offsets import OffsetRange, PartitionOffsets, TopicPartition
from kafka_direct.planning import apply_data_loss_policy, detect_data_loss
from kafka_direct.positions import OffsetReader
from kafka_direct.rate_estimator import (
    PIDRateEstimator,
    RateFunction,
    clamp,
    max_messages_per_partition,
)
from kafka_direct.strategies import (
    ConsumerStrategy,
    resolve_new_partition_offsets,
    resolve_start_offsets,
)

__all__ = [
    "BatchFailedError",
    "BatchInfo",
    "CommitCallback",
    "DirectKafkaStream",
    "DirectStreamPlanner",
    "JobControl",
    "StreamStateError",
]

log = logging.getLogger(__name__)

BatchFunction = Callable[[Any, list[OffsetRange]], object]
#: Spark's ``OffsetCommitCallback.onComplete``: the offsets, and the error or None.
CommitCallback = Callable[[dict[TopicPartition, int], "Exception | None"], object]
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
            f", committed {_show(self.committed)}" if self.committed else ", nothing committed"
        )
        ranges = ", ".join(str(r) for r in self.offset_ranges if r.count() > 0) or "no new records"
        return (
            f"Batch {self.batch_id}: {self.num_records} records ({ranges}) in "
            f"{self.processing_time_s:.3f} s, scheduling delay {self.scheduling_delay_s:.3f} s"
            f"{rate}{committed}"
        )


def _show(offsets: Mapping[TopicPartition, int]) -> str:
    return "{" + ", ".join(f"{tp}: {off}" for tp, off in sorted(offsets.items())) + "}"


class DirectStreamPlanner:
    """Plans each batch's offset ranges (``latestOffsets`` + ``clamp``). Driver, pure apart from
    the injected offset reader and stored-offset lookup."""

    def __init__(
        self,
        strategy: ConsumerStrategy,
        reader: OffsetReader,
        load_stored: Callable[[list[TopicPartition]], PartitionOffsets],
        *,
        batch_interval_s: float,
        max_rate: RateFunction,
        min_rate: Callable[[TopicPartition], int],
        fail_on_data_loss: bool,
    ) -> None:
        self.strategy = strategy
        self.reader = reader
        self._load_stored = load_stored
        self._interval_s = batch_interval_s
        self._max_rate = max_rate
        self._min_rate = min_rate
        self._fail_on_data_loss = fail_on_data_loss

    def initial_offsets(self) -> PartitionOffsets:
        """Where the stream starts: given > stored > ``auto.offset.reset``."""
        tps = sorted(self.reader.partitions(self.strategy.subscription))
        stored = self._load_stored(tps) if tps else {}
        return resolve_start_offsets(
            self.strategy, tps, stored, self.reader, fail_on_data_loss=self._fail_on_data_loss
        )

    def plan(
        self, current: Mapping[TopicPartition, int], backpressure_rate: float | None = None
    ) -> list[OffsetRange]:
        """The next batch's ranges, one per partition (empty ones included), from ``current``."""
        tps = self.reader.partitions(self.strategy.subscription)
        latest = self.reader.latest(tps, known=current)
        earliest = self.reader.earliest(tps)
        start = dict(current)
        losses = detect_data_loss(start, earliest, latest)
        if losses:
            start = apply_data_loss_policy(
                losses, start, earliest, fail_on_data_loss=self._fail_on_data_loss, logger=log
            )
        new = sorted(set(latest) - set(start))
        if new:
            start.update(
                resolve_new_partition_offsets(
                    self.strategy,
                    new,
                    self._load_stored(new),
                    earliest,
                    latest,
                    fail_on_data_loss=self._fail_on_data_loss,
                )
            )
        ends = {tp: latest[tp] for tp in start}
        messages = max_messages_per_partition(
            start,
            ends,
            batch_interval_s=self._interval_s,
            max_rate=self._max_rate,
            min_messages=self._min_rate,
            backpressure_rate=backpressure_rate,
        )
        until = clamp(start, ends, messages)
        return [OffsetRange(tp.topic, tp.partition, start[tp], until[tp]) for tp in sorted(start)]


class _CommitQueue:
    """``commitAsync``'s queue: thread-safe; drained into one range per partition."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[OffsetRange] = []
        self.callback: CommitCallback | None = None

    def add(self, ranges: Iterable[OffsetRange], callback: CommitCallback | None) -> None:
        with self._lock:
            if callback is not None:
                self.callback = callback  # Spark: only the most recent callback is used
            self._items.extend(ranges)

    def drain(self) -> list[OffsetRange]:
        with self._lock:
            items, self._items = self._items, []
        merged: dict[TopicPartition, OffsetRange] = {}
        for r in items:
            m = merged.get(r.topic_partition, r)
            merged[r.topic_partition] = OffsetRange(
                r.topic,
                r.partition,
                min(m.from_offset, r.from_offset),
                max(m.until_offset, r.until_offset),
            )
        return [merged[tp] for tp in sorted(merged)]

    def discard_batch(self, batch: Sequence[OffsetRange]) -> list[OffsetRange]:
        """Drop the queued ranges of a failed batch: its own, and any reaching past its start."""
        own = set(batch)
        start = {r.topic_partition: r.from_offset for r in batch}
        with self._lock:
            dropped = [
                r
                for r in self._items
                if r in own or r.until_offset > start.get(r.topic_partition, r.until_offset)
            ]
            self._items = [r for r in self._items if r not in dropped]
        return dropped


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
        self._estimator = estimator
        self._initial_rate = initial_rate
        self._latest_rate = -1  # Spark keeps the estimate as a Long, -1 until the first one
        self._failure_policy = failure_policy
        self._max_retries = max_retries
        self._retry_interval_s = retry_interval_s
        self._jobs = jobs
        self._clock = clock
        self._fn: BatchFunction | None = None
        self._queue = _CommitQueue()
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
            self._commit_queued()
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
        rate = self._backpressure_rate()
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
        committed = self._commit_queued()
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
        self._update_rate(info, ended)

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

    def _backpressure_rate(self) -> float | None:
        if self._estimator is None:
            return None
        # DirectKafkaInputDStream: the latest estimate if there is one, else initialRate.
        rate = self._latest_rate if self._latest_rate > 0 else self._initial_rate
        return float(rate) if rate > 0 else None

    def _update_rate(self, info: BatchInfo, ended: float) -> None:
        if self._estimator is None:
            return
        new_rate = self._estimator.compute(
            round(ended * 1000), info.num_records, info.processingDelay, info.schedulingDelay
        )
        if new_rate is not None:
            self._latest_rate = int(new_rate)
            log.debug("Backpressure: rate %d records/s", self._latest_rate)

    def _commit_queued(self) -> dict[TopicPartition, int]:
        """``commitAll``: commit what the user queued; a failed commit is queued again."""
        ranges = self._queue.drain()
        if not ranges:
            return {}
        offsets = ends_of(ranges)
        callback = self._queue.callback
        try:
            self._store.save(self.group_id, ranges)
        except OffsetConflictError:
            raise  # another writer owns the group: committing on would hide duplicates
        except Exception as exc:  # noqa: BLE001 - any store's failure: keep the offsets queued
            self._queue.add(ranges, None)
            log.warning(
                "Committing %s for group %s failed; retrying after the next batch: %s",
                _show(offsets),
                self.group_id,
                exc,
            )
            self._notify(callback, offsets, exc)
            return {}
        log.debug("Committed %s for group %s", _show(offsets), self.group_id)
        self._notify(callback, offsets, None)
        return offsets

    def _notify(
        self,
        callback: CommitCallback | None,
        offsets: dict[TopicPartition, int],
        error: Exception | None,
    ) -> None:
        if callback is None:
            return
        try:
            callback(offsets, error)
        except Exception:  # a broken callback must not undo a commit that was made
            log.warning(
                "The commitAsync callback of stream %s raised", self.group_id, exc_info=True
            )
