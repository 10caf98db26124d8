"""The direct stream's batch loop: commit queue, failures, retries, stop, progress, backpressure.

No broker, no Spark: a DirectKafkaStream over a FakeCluster, a recording offset store and a
frame builder that returns the ranges instead of a DataFrame. Tests that count batches use a fake
clock that the batch function advances, so the loop never sleeps and nothing depends on speed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pytest

from kafka_direct.dstream.planner import DirectStreamPlanner
from kafka_direct.dstream.strategies import ConsumerStrategies
from kafka_direct.dstream.stream import (
    BatchFailedError,
    BatchInfo,
    DirectKafkaStream,
    JobControl,
    StreamStateError,
)
from kafka_direct.errors import (
    ConfigurationError,
    DataLossError,
    KafkaClientError,
    OffsetConflictError,
)
from kafka_direct.offsets import OffsetRange, PartitionOffsets, TopicPartition
from kafka_direct.planning.pid import PIDRateEstimator
from kafka_direct.stores.base import OffsetStore, ends_of
from tests.unit.fake_reader import FakeCluster

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)
PARAMS = {"bootstrap.servers": "b:9092", "group.id": "g", "auto.offset.reset": "earliest"}
WAIT = 10.0  # generous: only reached when something is broken


class RecordingStore(OffsetStore):
    """An offset store that records every save in a shared event list."""

    def __init__(self, events: list[Any], stored: PartitionOffsets | None = None) -> None:
        self.events = events
        self.stored: PartitionOffsets = dict(stored or {})
        self.saves: list[PartitionOffsets] = []
        self.fail_next: list[Exception] = []

    def load(self, group: str, tps: Iterable[TopicPartition] | None = None) -> PartitionOffsets:
        wanted = None if tps is None else set(tps)
        return {tp: o for tp, o in self.stored.items() if wanted is None or tp in wanted}

    def save(self, group: str, ranges: Sequence[OffsetRange]) -> None:
        assert group == "g"
        if self.fail_next:
            raise self.fail_next.pop(0)
        ends = ends_of(ranges)
        self.events.append(("save", ends))
        self.saves.append(ends)
        self.stored.update(ends)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeJobs:
    def __init__(self) -> None:
        self.interrupted = threading.Event()
        self.tagged: list[str] = []

    def tag(self) -> None:
        self.tagged.append(threading.current_thread().name)

    def interrupt(self) -> None:
        self.interrupted.set()

    def untag(self) -> None:
        self.tagged.append("untagged")

    def control(self) -> JobControl:
        return JobControl(self.tag, self.interrupt, self.untag)


def make_stream(
    cluster: FakeCluster,
    store: RecordingStore,
    *,
    interval: float = 1.0,
    clock: Callable[[], float] | None = None,
    estimator: PIDRateEstimator | None = None,
    initial_rate: float = 0,
    max_rate: float = 0,
    failure_policy: str = "stop",
    max_retries: int = 3,
    jobs: Any = None,
    fail_on_data_loss: bool = True,
) -> DirectKafkaStream:
    strategy = ConsumerStrategies.Subscribe(["t"], PARAMS)
    planner = DirectStreamPlanner(
        strategy,
        cluster.reader(),
        lambda tps: store.load("g", tps),
        batch_interval_s=interval,
        max_rate=lambda _tp: max_rate,
        min_rate=lambda _tp: 1,
        fail_on_data_loss=fail_on_data_loss,
    )
    return DirectKafkaStream(
        strategy,
        planner,
        lambda ranges: ("df", tuple(ranges)),
        batch_interval_s=interval,
        offset_store=store,
        owns_store=False,
        estimator=estimator,
        initial_rate=initial_rate,
        failure_policy=failure_policy,  # type: ignore[arg-type]
        max_retries=max_retries,
        retry_interval_s=0.0,
        jobs=jobs,
        clock=clock or FakeClock(),
    )


@pytest.fixture()
def cluster() -> FakeCluster:
    c = FakeCluster()
    c.create_topic("t", partitions=2, records=[10, 20])
    return c


def run_batches(
    stream: DirectKafkaStream,
    n: int,
    body: Callable[[int, Any, list[OffsetRange]], None],
    clock: FakeClock | None = None,
    interval: float = 1.0,
) -> list[list[OffsetRange]]:
    """Run ``n`` batches with ``body(i, df, ranges)``, then stop from inside the last one."""
    seen: list[list[OffsetRange]] = []

    def fn(df: Any, ranges: list[OffsetRange]) -> None:
        i = len(seen)
        seen.append(ranges)
        if clock is not None:
            clock.now += interval  # the batch took one interval: the next one is due at once
        body(i, df, ranges)
        if i == n - 1:
            stream.stop()

    stream.foreachBatch(fn)
    stream.start()
    assert stream.awaitTermination(WAIT)
    return seen


# --- the commit queue -----------------------------------------------------------------------------


def test_nothing_is_committed_without_commit_async(cluster: FakeCluster) -> None:
    store = RecordingStore([])
    clock = FakeClock()
    stream = make_stream(cluster, store, clock=clock)
    seen = run_batches(stream, 3, lambda *_: None, clock)
    assert len(seen) == 3
    assert store.saves == []
    assert all(not b.committed for b in stream.batches)


def test_commit_async_commits_the_highest_until_per_partition_after_the_function_returns(
    cluster: FakeCluster,
) -> None:
    events: list[Any] = []
    store = RecordingStore(events)
    clock = FakeClock()
    stream = make_stream(cluster, store, clock=clock)

    def body(i: int, df: Any, ranges: list[OffsetRange]) -> None:
        if i == 0:
            assert df == ("df", tuple(ranges))
            stream.commitAsync(ranges)
            stream.commitAsync([OffsetRange("t", 0, 0, 3)])  # lower: the max wins
            events.append("function returned")
        if i == 1:
            cluster.append("t", 0, 5)

    run_batches(stream, 2, body, clock)
    assert events == ["function returned", ("save", {T0: 10, T1: 20})]
    assert stream.batches[0].committed == {T0: 10, T1: 20}
    assert stream.batches[1].committed == {}


def test_commits_queued_outside_a_batch_are_committed_at_the_next_batch_end(
    cluster: FakeCluster,
) -> None:
    store = RecordingStore([])
    clock = FakeClock()
    stream = make_stream(cluster, store, clock=clock)
    first: list[OffsetRange] = []

    def body(i: int, _df: Any, ranges: list[OffsetRange]) -> None:
        if i == 0:
            first.extend(ranges)
        if i == 1:
            # As if another thread finished the first batch's output now.
            stream.commitAsync(first)

    run_batches(stream, 2, body, clock)
    assert store.saves == [{T0: 10, T1: 20}]
    assert stream.batches[1].committed == {T0: 10, T1: 20}


def test_a_failed_batch_is_not_committed_and_stops_the_stream(cluster: FakeCluster) -> None:
    store = RecordingStore([])
    clock = FakeClock()
    stream = make_stream(cluster, store, clock=clock)
    calls: list[list[OffsetRange]] = []

    def fn(_df: Any, ranges: list[OffsetRange]) -> None:
        calls.append(ranges)
        clock.now += 1
        if len(calls) == 1:
            stream.commitAsync(ranges)
            cluster.append("t", 0, 5)
            return
        stream.commitAsync(ranges)  # queued, then the function fails: must not be committed
        raise ValueError("sink is down")

    stream.foreachBatch(fn)
    stream.start()
    with pytest.raises(BatchFailedError) as info:
        stream.awaitTermination(WAIT)
    assert isinstance(info.value.__cause__, ValueError)
    assert "sink is down" in str(info.value)
    assert "were not committed" in str(info.value)
    assert "failurePolicy='retry'" in str(info.value)
    assert info.value.batch_id == 1
    assert info.value.offset_ranges == calls[1]
    assert store.saves == [{T0: 10, T1: 20}]  # batch 0 only
    assert len(calls) == 2
    assert not stream.isActive
    assert stream.exception() is info.value
    with pytest.raises(BatchFailedError):
        stream.awaitTermination(0)  # raised again, as Spark does


def test_retry_policy_retries_the_same_ranges_and_commits_once(cluster: FakeCluster) -> None:
    store = RecordingStore([])
    clock = FakeClock()
    stream = make_stream(cluster, store, clock=clock, failure_policy="retry", max_retries=2)
    calls: list[list[OffsetRange]] = []

    def fn(_df: Any, ranges: list[OffsetRange]) -> None:
        calls.append(ranges)
        clock.now += 1
        stream.commitAsync(ranges)
        if len(calls) == 1:
            cluster.append("t", 0, 5)  # new data between attempts must not change the ranges
            raise ConnectionError("flaky sink")
        stream.stop()

    stream.foreachBatch(fn)
    stream.start()
    assert stream.awaitTermination(WAIT)
    assert calls[0] == calls[1] == [OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 0, 20)]
    assert store.saves == [{T0: 10, T1: 20}]
    assert stream.lastProgress is not None
    assert stream.lastProgress.attempts == 2


def test_retries_exhausted_stop_the_stream(cluster: FakeCluster) -> None:
    store = RecordingStore([])
    stream = make_stream(cluster, store, failure_policy="retry", max_retries=2)
    calls = []

    def fn(_df: Any, ranges: list[OffsetRange]) -> None:
        calls.append(ranges)
        stream.commitAsync(ranges)
        raise RuntimeError("always")

    stream.foreachBatch(fn)
    stream.start()
    with pytest.raises(BatchFailedError, match="after 3 attempt") as info:
        stream.awaitTermination(WAIT)
    assert info.value.attempts == 3
    assert len(calls) == 3
    assert store.saves == []


def test_a_graceful_stop_during_a_retried_failure_still_reports_the_failure(
    cluster: FakeCluster,
) -> None:
    # Regression (review): the stop ended the retries and hid the failure (awaitTermination
    # returned True, exception() was None), so a shutdown hook made a failed batch look done.
    store = RecordingStore([])
    stream = make_stream(cluster, store, failure_policy="retry", max_retries=3)
    calls: list[list[OffsetRange]] = []

    def fn(_df: Any, ranges: list[OffsetRange]) -> None:
        calls.append(ranges)
        stream.stop()  # graceful, e.g. from a shutdown hook while the sink fails
        raise RuntimeError("output failed")

    stream.foreachBatch(fn)
    stream.start()
    with pytest.raises(BatchFailedError, match="output failed") as info:
        stream.awaitTermination(WAIT)
    assert stream.exception() is info.value
    assert info.value.attempts == 1 and len(calls) == 1  # the stop ended the retries
    assert store.saves == []


def test_a_planning_error_stops_the_stream_with_our_own_error(cluster: FakeCluster) -> None:
    store = RecordingStore([])
    clock = FakeClock()
    stream = make_stream(cluster, store, clock=clock)

    def fn(_df: Any, _ranges: list[OffsetRange]) -> None:
        clock.now += 1
        cluster.recreate_topic("t", partitions=2)  # offsets go backwards: data loss

    stream.foreachBatch(fn)
    stream.start()
    with pytest.raises(DataLossError, match="t-0"):
        stream.awaitTermination(WAIT)


# --- commit failures ------------------------------------------------------------------------------


def test_a_failed_commit_is_reported_and_retried_after_the_next_batch(cluster: FakeCluster) -> None:
    store = RecordingStore([])
    store.fail_next.append(KafkaClientError("broker away", retriable=True))
    clock = FakeClock()
    stream = make_stream(cluster, store, clock=clock)
    results: list[tuple[PartitionOffsets, Exception | None]] = []

    def body(i: int, _df: Any, ranges: list[OffsetRange]) -> None:
        if i == 0:
            stream.commitAsync(ranges, lambda offsets, err: results.append((offsets, err)))

    run_batches(stream, 2, body, clock)
    assert [(o, type(e).__name__ if e else None) for o, e in results] == [
        ({T0: 10, T1: 20}, "KafkaClientError"),
        ({T0: 10, T1: 20}, None),
    ]
    assert store.saves == [{T0: 10, T1: 20}]
    assert stream.batches[0].committed == {}
    assert stream.batches[1].committed == {T0: 10, T1: 20}


def test_an_offset_conflict_stops_the_stream(cluster: FakeCluster) -> None:
    store = RecordingStore([])
    store.fail_next.append(OffsetConflictError("g", "stored 3, batch starts at 0"))
    stream = make_stream(cluster, store)
    results: list[Exception | None] = []

    def fn(_df: Any, ranges: list[OffsetRange]) -> None:
        stream.commitAsync(ranges, lambda _offsets, err: results.append(err))

    stream.foreachBatch(fn)
    stream.start()
    with pytest.raises(OffsetConflictError) as info:
        stream.awaitTermination(WAIT)
    assert results == [info.value]  # the callback hears of it too


def test_commit_async_without_a_callback_drops_the_previous_one(cluster: FakeCluster) -> None:
    # Spark's commitAsync(offsetRanges) is commitAsync(offsetRanges, null): only the most
    # recent callback is used, and none was given last.
    store = RecordingStore([])
    clock = FakeClock()
    stream = make_stream(cluster, store, clock=clock)
    heard: list[PartitionOffsets] = []

    def body(i: int, _df: Any, ranges: list[OffsetRange]) -> None:
        cluster.append("t", 0, 1)
        if i == 0:
            stream.commitAsync(ranges, lambda offsets, _err: heard.append(offsets))
        else:
            stream.commitAsync(ranges)

    run_batches(stream, 3, body, clock)
    assert heard == [{T0: 10, T1: 20}]
    assert len(store.saves) == 3


# --- stopping -------------------------------------------------------------------------------------


def test_graceful_stop_finishes_the_running_batch_and_commits_it(cluster: FakeCluster) -> None:
    store = RecordingStore([])
    stream = make_stream(cluster, store, interval=0.01, clock=None)
    entered, release = threading.Event(), threading.Event()
    finished: list[int] = []

    def fn(_df: Any, ranges: list[OffsetRange]) -> None:
        entered.set()
        assert release.wait(WAIT)
        stream.commitAsync(ranges)
        finished.append(len(ranges))

    stream.foreachBatch(fn)
    stream.start()
    assert entered.wait(WAIT)
    stopper = threading.Thread(target=stream.stop, kwargs={"graceful": True})
    stopper.start()
    release.set()
    stopper.join(WAIT)
    assert not stream.isActive
    assert finished == [2]  # the running batch finished; no other batch started
    assert store.saves == [{T0: 10, T1: 20}]
    assert len(stream.batches) == 1


def test_stop_from_inside_the_batch_function_does_not_deadlock(cluster: FakeCluster) -> None:
    store = RecordingStore([])
    stream = make_stream(cluster, store)

    def fn(_df: Any, ranges: list[OffsetRange]) -> None:
        stream.commitAsync(ranges)
        stream.stop()

    stream.foreachBatch(fn)
    stream.start()
    assert stream.awaitTermination(WAIT)
    assert store.saves == [{T0: 10, T1: 20}]


def test_non_graceful_stop_cancels_the_batch_and_commits_nothing_of_it(
    cluster: FakeCluster,
) -> None:
    store = RecordingStore([])
    jobs = FakeJobs()
    stream = make_stream(cluster, store, interval=0.01, clock=None, jobs=jobs.control())
    entered = threading.Event()

    def fn(_df: Any, ranges: list[OffsetRange]) -> None:
        stream.commitAsync(ranges)
        entered.set()
        # A Spark action, until stop(graceful=False) cancels the thread's jobs.
        assert jobs.interrupted.wait(WAIT)
        raise RuntimeError("Job cancelled because the tag was interrupted")

    stream.foreachBatch(fn)
    stream.start()
    assert entered.wait(WAIT)
    stream.stop(graceful=False, timeout=WAIT)
    assert stream.awaitTermination(0)  # a stop, not a failure: nothing raised
    assert stream.exception() is None
    assert store.saves == []
    assert jobs.tagged == ["kafka-direct-stream-g", "untagged"]


def test_lifecycle_misuse_is_refused(cluster: FakeCluster) -> None:
    stream = make_stream(cluster, RecordingStore([]))
    with pytest.raises(StreamStateError, match="foreachBatch"):
        stream.start()
    with pytest.raises(StreamStateError, match="never started"):
        stream.awaitTermination(0)
    stream.foreachBatch(lambda _df, _r: stream.stop())
    stream.start()
    with pytest.raises(StreamStateError, match="only once"):
        stream.start()
    with pytest.raises(StreamStateError, match="before start"):
        stream.foreachBatch(lambda _df, _r: None)
    assert stream.awaitTermination(WAIT)


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_start_attaches_the_stream_to_its_store_first(
    cluster: FakeCluster, fail_on_data_loss: bool
) -> None:
    # The Kafka group store refuses a group with active members there; a SQL store learns
    # whether the stream's batches may start past its stored offsets.
    store = RecordingStore([])
    attached: list[tuple[str, bool]] = []

    def attach(group: str, *, fail_on_data_loss: bool) -> None:
        attached.append((group, fail_on_data_loss))
        raise ConfigurationError("group.id", group, "a consumer group without active members")

    store.attach_stream = attach  # type: ignore[method-assign]
    stream = make_stream(cluster, store, fail_on_data_loss=fail_on_data_loss)
    stream.foreachBatch(lambda _df, _r: None)
    with pytest.raises(ConfigurationError, match="without active members"):
        stream.start()
    assert attached == [("g", fail_on_data_loss)]
    assert not stream.isActive


def test_start_resolves_offsets_synchronously_and_reports_errors_there(
    cluster: FakeCluster,
) -> None:
    store = RecordingStore([], stored={T0: 99})  # beyond the log end
    stream = make_stream(cluster, store)
    stream.foreachBatch(lambda _df, _r: None)
    with pytest.raises(Exception, match="log end offset 10 of t-0"):
        stream.start()
    assert not stream.isActive


def test_the_stream_starts_from_the_stored_offsets(cluster: FakeCluster) -> None:
    store = RecordingStore([], stored={T0: 4, T1: 15})
    clock = FakeClock()
    stream = make_stream(cluster, store, clock=clock)
    seen = run_batches(stream, 1, lambda *_: None, clock)
    assert seen == [[OffsetRange("t", 0, 4, 10), OffsetRange("t", 1, 15, 20)]]


# --- progress -------------------------------------------------------------------------------------


def test_progress_per_batch_and_empty_batches_still_call_the_function(
    cluster: FakeCluster,
) -> None:
    store = RecordingStore([])
    clock = FakeClock()
    stream = make_stream(cluster, store, clock=clock, max_rate=4)  # 4/s × 1 s

    def body(i: int, _df: Any, ranges: list[OffsetRange]) -> None:
        clock.now += 1  # each batch takes two intervals: the scheduling delay grows

    seen = run_batches(stream, 8, body, clock)
    sizes = [sum(r.count() for r in ranges) for ranges in seen]
    assert sizes == [8, 8, 6, 4, 4, 0, 0, 0]  # t-0 has 10, t-1 has 20; then empty batches
    infos = stream.batches
    assert [b.batch_id for b in infos] == list(range(8))
    assert [b.num_records for b in infos] == sizes
    assert [b.schedulingDelay for b in infos] == [i * 1000 for i in range(8)]
    assert all(b.processingDelay == 2000 for b in infos)
    assert stream.lastProgress == infos[-1]
    assert stream.currentOffsets == {T0: 10, T1: 20}
    b: BatchInfo = infos[0]
    assert b.offsetRanges == [OffsetRange("t", 0, 0, 4), OffsetRange("t", 1, 0, 4)]
    assert b.totalDelay == 2000
    assert "Batch 0: 8 records" in b.describe()


def test_backpressure_uses_the_initial_rate_then_the_estimators(cluster: FakeCluster) -> None:
    cluster.append("t", 0, 10_000)
    cluster.append("t", 1, 10_000)
    store = RecordingStore([])
    clock = FakeClock()
    estimator = PIDRateEstimator(1000, min_rate=1)
    stream = make_stream(cluster, store, clock=clock, estimator=estimator, initial_rate=400)

    def body(_i: int, _df: Any, ranges: list[OffsetRange]) -> None:
        records = sum(r.count() for r in ranges)
        clock.now += records / 100 - 1  # the function handles 100 records/s

    run_batches(stream, 10, body, clock)
    infos = stream.batches
    # Replay Spark's estimator on what the stream reported: each batch must have been planned
    # with the rate the previous batches gave (Spark keeps it as a Long).
    replay = PIDRateEstimator(1000, min_rate=1)
    expected_rate = 400.0
    for k, info in enumerate(infos):
        assert info.rate == expected_rate
        assert abs(info.num_records - expected_rate) <= 2  # spread over 2 partitions, truncated
        ended_ms = round((k + info.scheduling_delay_s + info.processing_time_s) * 1000)
        estimate = replay.compute(
            ended_ms, info.num_records, info.processingDelay, info.schedulingDelay
        )
        if estimate is not None:
            expected_rate = float(int(estimate))
    assert infos[1].rate == 400.0  # the first batch only seeds the estimator
    assert infos[-1].rate is not None and infos[-1].rate < 150


def test_a_batch_reports_the_offsets_it_skipped_once(cluster: FakeCluster) -> None:
    """failOnDataLoss=false: offsets deleted before the batch read them show in its BatchInfo,
    and only in that batch's."""
    clock = FakeClock()
    stream = make_stream(cluster, RecordingStore([]), clock=clock, fail_on_data_loss=False)

    def body(i: int, df: Any, ranges: list[OffsetRange]) -> None:
        if i == 0:
            cluster.append("t", 0, 10)
            cluster.age_out("t", 0, 15)  # offsets 10..14 go before batch 1 reads them

    run_batches(stream, 3, body, clock)
    assert [dict(b.lost) for b in stream.batches] == [{}, {T0: 5}, {}]
    assert stream.batches[1].offset_ranges[0] == OffsetRange("t", 0, 15, 20)
    assert "data loss: skipped" in stream.batches[1].describe()
