"""The stream planner under broker faults: partitions without an answer, a cluster that does not
answer at all, checkpoints written under such a fault, and data deleted before it was read.
Against the in-memory cluster of ``fake_reader``; no broker, no Spark.

Regression tests carry the name of the bug they guard (issue "Faults"): a slow broker wrote
``{"t": {"0": -1001, ...}}`` to Spark's offset log and every restart failed on it; a 10-second
leader outage failed the stream in one second; DeleteRecords made a rate-limited stream crawl
through the deleted range 500 offsets at a time.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from kafka_direct.errors import (
    ConfigurationError,
    DataLossError,
    KafkaClientError,
    OffsetsUnavailableError,
)
from kafka_direct.offsets import LATEST, PartitionOffsets, TopicPartition
from kafka_direct.planning.micro_batch import StreamPlanner
from kafka_direct.planning.patience import OffsetPatience
from tests.unit.fake_reader import FakeCluster
from tests.unit.planning.test_micro_batch import (
    T0,
    T1,
    TWO_TOPICS,
    MicroBatches,
    spans,
    stream_options,
    through_json,
    two_topics,
)

SLOW = "no valid offset (OFFSET_INVALID: its leader did not answer in time)"


class Clock:
    """Seconds for OffsetPatience; time moves when ``sleep`` is called or the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def patient(
    cluster: FakeCluster, options: dict[str, str], clock: Clock, **kwargs: Any
) -> MicroBatches:
    q = MicroBatches(cluster, options, **kwargs)
    opts = q.planner.opts
    q.planner._patience = OffsetPatience(
        opts.fetch_offset.unavailable_timeout_ms, clock_s=clock, sleep_s=clock.sleep
    )
    return q


def never_negative(offsets: PartitionOffsets) -> None:
    assert all(off >= 0 for off in offsets.values()), offsets


@pytest.fixture
def two() -> FakeCluster:
    c = FakeCluster()
    c.create_topic("t", partitions=2, records=[5, 5])
    return c


def slow_t0_after_batch_0(two: FakeCluster) -> MicroBatches:
    """A stream past its first batch; then 3 new records per partition, and t-0's leader slow."""
    q = patient(two, {"subscribe": "t", "startingOffsets": "earliest"}, Clock())
    assert q.trigger() == [("t-0", 0, 5), ("t-1", 0, 5)]
    two.append("t", 0, 3)
    two.append("t", 1, 3)
    two.unavailable[T0] = SLOW
    return q


# --- a partition without an answer ----------------------------------------------------------------


def test_regression_slow_broker_bricks_checkpoint_unavailable_partition_does_not_advance(
    two: FakeCluster,
) -> None:
    q = slow_t0_after_batch_0(two)
    end = q.latest()
    never_negative(end)
    assert end == {T0: 5, T1: 8}  # t-0 stays where it was; t-1 advances
    assert spans(q.planner.plan_ranges(q.start, end)) == [("t-1", 5, 8)]
    q.start = end
    del two.unavailable[T0]
    assert q.trigger() == [("t-0", 5, 8)]  # nothing lost, nothing read twice


def test_regression_slow_broker_stopped_every_partition_discovery_uses_the_last_answer(
    two: FakeCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """librdkafka sends each metadata request to the broker it used last: under a slow broker,
    discovery timed out at every trigger and no partition advanced, not only the slow one's."""
    q = slow_t0_after_batch_0(two)
    two.metadata_down = True
    with caplog.at_level(logging.WARNING, logger="kafka_direct.planning.patience"):
        assert q.trigger() == [("t-1", 5, 8)]
        two.append("t", 1, 2)
        assert q.trigger() == [("t-1", 8, 10)]
    said = [r.getMessage() for r in caplog.records]
    warned = [m for m in said if "could not list the partitions" in m]
    assert len(warned) == 1 and "planning the 2 known so far" in warned[0]
    two.metadata_down = False
    del two.unavailable[T0]
    two.add_partitions("t")  # a partition added while discovery was out
    two.append("t", 2, 4)
    assert q.trigger() == [("t-0", 5, 8), ("t-2", 0, 4)]


def test_discovery_without_an_earlier_answer_is_an_outage(two: FakeCluster) -> None:
    clock = Clock()
    q = patient(two, {"subscribe": "t", "startingOffsets": "earliest"}, clock)
    q.start = {T0: 0, T1: 0}  # a restart: batch 0 is in the checkpoint, discovery never answered
    two.metadata_down = True
    assert q.trigger() is None
    two.metadata_down = False
    assert q.trigger() == [("t-0", 0, 5), ("t-1", 0, 5)]


def test_a_partition_unavailable_longer_than_the_bound_fails_the_stream(two: FakeCluster) -> None:
    clock = Clock()
    q = patient(two, {"subscribe": "t", "fetchOffset.unavailableTimeout": "2m"}, clock)
    q.trigger()  # batch 0 pins
    two.unavailable[T1] = SLOW
    assert q.trigger() is None
    clock.now += 119
    assert q.trigger() is None
    clock.now += 2
    with pytest.raises(KafkaClientError) as info:
        q.trigger()
    message = str(info.value)
    assert "t-1" in message and "'fetchOffset.unavailableTimeout'" in message
    assert "OFFSET_INVALID" in message
    assert info.value.retriable is False


def _recovers_after(clock: Clock, q: MicroBatches, sleeps: int, recover: Any) -> None:
    """Make the ``sleeps``-th pause of the planner's patience call ``recover()``."""

    def sleep(seconds: float) -> None:
        clock.slept.append(seconds)
        clock.now += seconds
        if len(clock.slept) == sleeps:
            recover()

    q.planner._patience._sleep = sleep


@pytest.mark.parametrize("fault", ["slow leader", "cluster down"])
def test_regression_batch_0_pins_every_partition_and_never_writes_a_placeholder(
    two: FakeCluster, fault: str
) -> None:
    """PySpark never lets a query's first trigger pass without a batch: what the first
    latestOffset answers is batch 0's end in the offset log. It used to answer the -1
    placeholders when a partition gave no offset ({"t": {"0": -1, ...}} in the checkpoint).
    Pinning only the partitions that answer would pin the others later, at another moment: the
    trigger waits until every one answers."""
    clock = Clock()
    q = patient(two, {"subscribe": "t"}, clock)
    assert q.start == {T0: LATEST, T1: LATEST}
    if fault == "slow leader":
        two.unavailable[T0] = SLOW
        _recovers_after(clock, q, 4, lambda: two.unavailable.clear())
    else:
        two.down = True
        _recovers_after(clock, q, 4, lambda: setattr(two, "down", False))
    pinned = q.latest()
    assert pinned == {T0: 5, T1: 5}
    assert len(clock.slept) == 4


def test_batch_0_fails_without_a_placeholder_when_a_leader_stays_down(two: FakeCluster) -> None:
    clock = Clock()
    q = patient(two, {"subscribe": "t", "fetchOffset.unavailableTimeout": "30s"}, clock)
    two.unavailable[T0] = SLOW
    with pytest.raises(KafkaClientError, match=r"'fetchOffset.unavailableTimeout' \(30 s\)"):
        q.latest()
    assert 30 <= sum(clock.slept) < 40


# --- no answer at all -----------------------------------------------------------------------------


def test_regression_ten_second_outage_killed_the_stream_in_one_second(
    two: FakeCluster, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    q = patient(two, {"subscribe": "t", "startingOffsets": "earliest"}, clock)
    q.trigger()
    two.down = True
    with caplog.at_level(logging.WARNING, logger="kafka_direct.planning.patience"):
        for _ in range(10):
            assert q.trigger() is None  # no batch, no error
            clock.now += 1
    warned = [r for r in caplog.records if "gets no offsets from the cluster" in r.getMessage()]
    assert len(warned) == 1  # once per WARN_EVERY_S, not once per trigger
    two.down = False
    two.append("t", 0, 2)
    assert q.trigger() == [("t-0", 5, 7)]


def test_an_outage_longer_than_the_bound_fails_naming_the_option(two: FakeCluster) -> None:
    clock = Clock()
    q = patient(two, {"subscribe": "t", "fetchOffset.unavailableTimeout": "30s"}, clock)
    q.trigger()
    two.down = True
    assert q.trigger() is None
    clock.now += 31
    with pytest.raises(KafkaClientError, match=r"longer than 'fetchOffset.unavailableTimeout'"):
        q.trigger()


def test_new_partitions_earliest_is_waited_for_while_the_batch_is_planned() -> None:
    cluster = FakeCluster()
    cluster.create_topic("a", records=2)
    clock = Clock()
    q = patient(cluster, {"subscribePattern": "[ab]", "startingOffsets": "earliest"}, clock)
    q.trigger()
    cluster.create_topic("b", records=4)
    end = q.latest()
    cluster.down = True  # the batch is in the offset log; planning it must wait, not fail

    def recover(seconds: float) -> None:
        clock.now += seconds
        if len(clock.slept) == 3:
            cluster.down = False

    clock.sleep = lambda s: (clock.slept.append(s), recover(s))  # type: ignore[method-assign]
    q.planner._patience._sleep = clock.sleep
    assert spans(q.planner.plan_ranges(q.start, end)) == [("b-0", 0, 4)]
    assert len(clock.slept) == 3


# --- checkpoints that already hold an invalid offset ----------------------------------------------


def test_regression_slow_broker_bricks_checkpoint_invalid_end_is_repaired(two: FakeCluster) -> None:
    """Spark re-runs the uncommitted batch from the offset log: (valid start, end with -1001).
    It must plan, with t-0 not advanced, and the next trigger (start = that end) go on from
    where t-0 stood."""
    clock = Clock()
    q = patient(two, {"subscribe": "t", "startingOffsets": "earliest"}, clock)
    q.trigger()  # reads [0, 5) of both
    two.append("t", 0, 3)
    two.append("t", 1, 3)
    logged_start = {T0: 5, T1: 5}
    logged_end = through_json({T0: -1001, T1: 8})
    restarted = patient(two, {"subscribe": "t", "startingOffsets": "earliest"}, clock)
    assert spans(restarted.planner.plan_ranges(logged_start, logged_end)) == [("t-1", 5, 8)]
    restarted.start = logged_end
    end = restarted.latest()
    never_negative(end)
    assert end == {T0: 8, T1: 8}
    assert spans(restarted.planner.plan_ranges(logged_end, end)) == [("t-0", 5, 8)]


def test_an_invalid_start_not_seen_in_this_run_rereads_rather_than_skips(
    two: FakeCluster, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    q = patient(two, {"subscribe": "t"}, clock)
    q.start = {T0: -1001, T1: 5}
    with caplog.at_level(logging.WARNING, logger="kafka_direct.planning.micro_batch"):
        end = q.latest()
    never_negative(end)
    assert end == {T0: 5, T1: 5}  # t-0 from its earliest offset (0): re-read, never skipped
    assert spans(q.planner.plan_ranges(q.start, end)) == [("t-0", 0, 5)]
    assert any("invalid offset -1001 for t-0" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("group", "resumes_at"),
    [
        ({"commitOffsetsToGroup": "g"}, 3),
        # kafka.group.id alone commits nothing: the group's offsets are not this query's.
        ({"kafka.group.id": "g"}, 0),
    ],
)
def test_an_invalid_start_uses_the_groups_commit_when_the_query_commits(
    two: FakeCluster, group: dict[str, str], resumes_at: int
) -> None:
    two.groups["g"] = {T0: 3}
    q = patient(two, {"subscribe": "t", **group}, Clock())
    q.start = {T0: -1001, T1: 5}
    assert spans(q.planner.plan_ranges(q.start, q.latest())) == [("t-0", resumes_at, 5)]


# --- data deleted before it was read --------------------------------------------------------------


def test_regression_delete_records_crawled_through_the_gap_500_offsets_at_a_time() -> None:
    cluster = FakeCluster()
    cluster.create_topic("t", records=10_000)
    options = {
        "subscribe": "t",
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": "500",
        "failOnDataLoss": "false",
    }
    q = patient(cluster, options, Clock())
    assert q.trigger() == [("t-0", 0, 500)]
    cluster.age_out("t", 0, 9_000)
    assert q.trigger() == [("t-0", 9_000, 9_500)]  # one step to the log start, then the limit
    assert q.planner.losses.lost == {TopicPartition("t", 0): 8_500}


def test_lost_offsets_are_reported_once_even_when_a_batch_is_planned_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster = FakeCluster()
    cluster.create_topic("t", records=100)
    heard: list[tuple[str, int]] = []
    planner = StreamPlanner(
        stream_options({"subscribe": "t", "failOnDataLoss": "false"}),
        cluster.reader,
        on_loss=lambda loss, count: heard.append((str(loss.topic_partition), count)),
    )
    cluster.age_out("t", 0, 40)
    with caplog.at_level(logging.WARNING, logger="kafka_direct.planning.micro_batch"):
        first = planner.plan_ranges({T0: 10}, {T0: 100})
        again = planner.plan_ranges({T0: 10}, {T0: 100})  # Spark re-runs the batch
    assert spans(first) == spans(again) == [("t-0", 40, 100)]
    assert heard == [("t-0", 30)]
    assert len([r for r in caplog.records if "Data loss on t-0" in r.getMessage()]) == 1


def test_deleted_start_fails_on_the_driver_with_fail_on_data_loss() -> None:
    """Whatever an executor still holds in its prefetch queue, the batch fails before any task
    runs (the policy used to depend on the queue's timing)."""
    cluster = FakeCluster()
    cluster.create_topic("t", records=100)
    planner = StreamPlanner(stream_options({"subscribe": "t"}), cluster.reader)
    cluster.age_out("t", 0, 40)
    with pytest.raises(DataLossError, match="earliest available is 40"):
        planner.plan_ranges({T0: 10}, {T0: 100})


def test_an_unanswered_log_start_leaves_the_check_to_the_executors() -> None:
    cluster = FakeCluster()
    cluster.create_topic("t", partitions=2, records=[100, 100])
    planner = StreamPlanner(stream_options({"subscribe": "t"}), cluster.reader)
    cluster.age_out("t", 1, 40)
    cluster.unavailable[T1] = SLOW
    ranges = planner.plan_ranges({T0: 10, T1: 10}, {T0: 100, T1: 100})
    # Planned as asked: the executor reading t-1 meets "out of range" and applies the policy.
    assert spans(ranges) == [("t-0", 10, 100), ("t-1", 10, 100)]


# --- a log end behind what was read: a new leader that lags (KAFKA-7703) -------------------------


def test_a_stale_log_end_in_a_partial_answer_does_not_move_a_partition_back(
    two: FakeCluster,
) -> None:
    # A leader moving: t-0 gets no answer, t-1's new leader answers a log end below what batch 0
    # read. The complete answer's re-check does not run on a partial one; believed, the end
    # went into the offset log below its start, and failOnDataLoss failed every restart.
    q = slow_t0_after_batch_0(two)
    two.stale_latest[T1] = 2
    end = q.latest()
    assert end == {T0: 5, T1: 5}  # neither moves in this trigger; nothing lies behind a start
    assert spans(q.planner.plan_ranges(q.start, end)) == []
    q.start = end
    del two.unavailable[T0]
    assert q.trigger() == [("t-0", 5, 8), ("t-1", 5, 8)]  # nothing lost, nothing read twice


def _restarted_with_a_stale_target(two: FakeCluster) -> MicroBatches:
    """A query past batch 0 (both partitions read to 5), 2 more records on t-0, restarted under
    Trigger.AvailableNow while t-1's new leader answers a log end of 1 (its target)."""
    first = MicroBatches(two, {"subscribe": "t", "startingOffsets": "earliest"})
    assert first.trigger() == [("t-0", 0, 5), ("t-1", 0, 5)]
    two.append("t", 0, 2)
    two.stale_latest[T1] = 1
    restarted = MicroBatches(
        two, {"subscribe": "t", "startingOffsets": "earliest"}, available_now=True
    )
    restarted.start = first.start
    return restarted


def test_a_stale_available_now_target_is_asked_again_before_it_is_believed(
    two: FakeCluster,
) -> None:
    # A restart under Trigger.AvailableNow: the target is fixed before the query knows where its
    # checkpoint stands, so it got no re-check, and t-1's stale end planned a reset.
    restarted = _restarted_with_a_stale_target(two)
    assert restarted.drain() == [[("t-0", 5, 7)]]
    assert restarted.planner.latest_offsets(restarted.start, read_all=False) == {T0: 7, T1: 5}


def test_a_committed_start_past_the_available_now_target_reads_nothing_there() -> None:
    # The group committed past the target between prepareForTriggerAvailableNow and the first
    # trigger: batch 0 pins the commit, and no later trigger takes the target for a log that
    # went backwards (a reset: data loss, or a re-read from earliest).
    cluster = FakeCluster()
    cluster.create_topic("t", records=5)
    options = {
        "subscribe": "t",
        "startingOffsets": "committed",
        "kafka.group.id": "g",
        "commitOffsets": "false",
    }
    q = MicroBatches(cluster, options, available_now=True)
    cluster.append("t", 0, 3)
    cluster.groups["g"] = {T0: 7}
    assert q.drain() == [[]]  # only the pinned, empty batch 0
    assert q.start == {T0: 7}


def test_a_timestamp_start_missing_a_partition_is_refused_by_name() -> None:
    cluster = FakeCluster()
    cluster.create_topic("t", partitions=2, records=3)
    planner = StreamPlanner(
        stream_options({"subscribe": "t", "startingOffsetsByTimestamp": '{"t": {"0": 0}}'}),
        cluster.reader,
    )
    start = planner.initial_offsets()
    with pytest.raises(ConfigurationError, match="startingOffsetsByTimestamp"):
        planner.latest_offsets(start, read_all=False)


def test_a_committed_start_waits_out_a_leader_moving_at_the_first_trigger() -> None:
    # Resolving the start is an offset request like any other: a coordinator or leader that
    # moves at that moment is waited out (fetchOffset.unavailableTimeout), not fatal.
    cluster = FakeCluster()
    cluster.create_topic("t", partitions=2, records=4)
    cluster.groups["g"] = {T0: 1, T1: 2}
    options = {
        "subscribe": "t",
        "startingOffsets": "committed",
        "kafka.group.id": "g",
        "commitOffsets": "false",
    }
    q = patient(cluster, options, Clock())
    answers = q.reader.committed
    moving = [True]

    def committed(group: str, tps: Any) -> PartitionOffsets:
        if moving.pop() if moving else False:
            raise KafkaClientError(
                "Broker: Not coordinator (NOT_COORDINATOR)", code="NOT_COORDINATOR", retriable=True
            )
        return answers(group, tps)

    q.reader.committed = committed  # type: ignore[method-assign]
    assert q.latest() == {T0: 1, T1: 2}
    assert not moving  # the first attempt did fail


# --- a logged batch replayed after one of its topics was deleted ----------------------------------


def _logged_batch_then_deleted(fail_on_data_loss: str) -> tuple[FakeCluster, Any, Any, Any]:
    """Batch 1 logged over t and u (the driver died before its commit); u deleted; a restart."""
    cluster, first = two_topics(fail_on_data_loss)
    cluster.append("t", 0, 2)
    cluster.append("u", 0, 2)
    start, logged_end = first.start, first.latest()  # in the offset log, never committed
    cluster.delete_topic("u")
    restarted = MicroBatches(cluster, {**TWO_TOPICS, "failOnDataLoss": fail_on_data_loss})
    return cluster, restarted, start, logged_end


def test_a_replayed_batch_whose_topic_was_deleted_is_data_loss() -> None:
    # Regression (review): the replay asked the deleted topic's log start, the request failed
    # (unknown topic), and so did every restart, whatever failOnDataLoss said.
    _, q, start, end = _logged_batch_then_deleted("true")
    U0 = TopicPartition("u", 0)
    with pytest.raises(DataLossError, match=r"u-0 is gone \(offset 4 was expected\)") as err:
        q.planner.plan_ranges(start, end)
    assert (err.value.topic, err.value.partition) == (U0.topic, U0.partition)


def test_a_replayed_batch_whose_topic_was_deleted_reads_the_rest_without_fail() -> None:
    _, q, start, end = _logged_batch_then_deleted("false")
    assert spans(q.planner.plan_ranges(start, end)) == [("t-0", 3, 5)]


def test_a_stale_available_now_target_whose_re_check_gets_no_answer_does_not_advance(
    two: FakeCluster,
) -> None:
    # Regression (review of the change): the re-check failing (its leader still moving) let the
    # stale target through, and the end went below the start.
    restarted = _restarted_with_a_stale_target(two)
    two.unavailable[T1] = SLOW  # the re-check's answer for t-1
    end = restarted.latest()
    never_negative(end)
    assert end == {T0: 7, T1: 5}  # t-1 does not advance in this run; nothing read again


def _new_topic_logged_then_deleted(
    fail_on_data_loss: str, code: str | None
) -> tuple[MicroBatches, Clock, PartitionOffsets, PartitionOffsets]:
    """A batch logged with a new topic u (the driver died before its commit); u deleted; a
    restart. ``code``: the not-found answer for u, as the real reader reports it (a retriable
    KafkaClientError), or None for TopicNotFoundError."""
    cluster = FakeCluster()
    cluster.create_topic("t", records=3)
    options = {
        "subscribePattern": "[tu]",
        "startingOffsets": "earliest",
        "failOnDataLoss": fail_on_data_loss,
    }
    first = MicroBatches(cluster, options)
    assert first.trigger() == [("t-0", 0, 3)]
    cluster.create_topic("u", records=4)
    cluster.append("t", 0, 1)
    start, logged_end = first.start, first.latest()
    assert TopicPartition("u", 0) in logged_end
    cluster.delete_topic("u")
    clock = Clock()
    restarted = patient(cluster, options, clock)
    if code is not None:
        answers = restarted.reader.earliest

        def earliest(tps: Any) -> PartitionOffsets:
            deleted = [tp for tp in tps if tp.topic == "u"]
            if deleted and code == "_NOENT":
                # Once the client's metadata lacks the topic: no leader, in a partial answer.
                raise OffsetsUnavailableError(
                    "no valid earliest offset for 1 partition(s)",
                    offsets=answers([tp for tp in tps if tp.topic != "u"]),
                    unavailable={deleted[0]: "No leaders found (_NOENT)"},
                    code=code,
                )
            if deleted:
                message = f"Listing offsets of u-0: ({code})"
                raise KafkaClientError(message, code=code, retriable=True)
            return answers(tps)

        restarted.reader.earliest = earliest  # type: ignore[method-assign]
    return restarted, clock, start, logged_end


#: How the deleted topic's partition is answered: the fake's TopicNotFoundError (None), the
#: real reader's retriable not-found errors, and librdkafka's "no leader" in a partial answer.
NOT_FOUND = [None, "UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC", "_UNKNOWN_PARTITION", "_NOENT"]


@pytest.mark.parametrize("code", NOT_FOUND)
def test_regression_a_replayed_batch_whose_new_topic_was_deleted_is_data_loss(
    code: str | None,
) -> None:
    # Regression (review): the new partition's earliest offset was waited for, 10 minutes, then
    # the replay failed, on every restart, whatever failOnDataLoss said. Spark's
    # fetchEarliestOffsets leaves it out and reports "Cannot find earliest offsets".
    q, clock, start, end = _new_topic_logged_then_deleted("true", code)
    with pytest.raises(DataLossError, match=r"Cannot find earliest offsets of u-0"):
        q.planner.plan_ranges(start, end)
    assert clock.slept == []


@pytest.mark.parametrize("code", NOT_FOUND)
def test_a_replayed_batch_whose_new_topic_was_deleted_reads_the_rest_without_fail(
    code: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    q, clock, start, end = _new_topic_logged_then_deleted("false", code)
    with caplog.at_level(logging.WARNING, logger="kafka_direct.planning.resolve"):
        assert spans(q.planner.plan_ranges(start, end)) == [("t-0", 3, 4)]
    assert "Cannot find earliest offsets of u-0" in caplog.text
    assert clock.slept == []


def test_a_new_topic_its_leader_does_not_know_yet_is_waited_for() -> None:
    # The cluster lists the topic, but the leader asked for its earliest offset does not know
    # it yet (brokers learn a new topic one by one): not data loss, the batch waits.
    cluster = FakeCluster()
    cluster.create_topic("t", records=3)
    clock = Clock()
    q = patient(cluster, {"subscribePattern": "[tu]", "startingOffsets": "earliest"}, clock)
    assert q.trigger() == [("t-0", 0, 3)]
    cluster.create_topic("u", records=4)
    end = q.latest()
    answers = q.reader.earliest
    unknown = [True, True]

    def earliest(tps: Any) -> PartitionOffsets:
        if unknown and any(tp.topic == "u" for tp in tps):
            unknown.pop()
            code = "UNKNOWN_TOPIC_OR_PART"
            raise KafkaClientError(f"Listing offsets of u-0: ({code})", code=code, retriable=True)
        return answers(tps)

    q.reader.earliest = earliest  # type: ignore[method-assign]
    assert spans(q.planner.plan_ranges(q.start, end)) == [("u-0", 0, 4)]
    assert not unknown and len(clock.slept) == 2


@pytest.mark.parametrize("code", ["UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC", "_UNKNOWN_PARTITION"])
def test_a_replayed_batch_whose_topic_was_deleted_as_the_real_reader_reports_it(code: str) -> None:
    # The real reader reports a topic it cannot find as a retriable KafkaClientError with
    # librdkafka's code, whichever of the three it is.
    _, q, start, end = _logged_batch_then_deleted("false")
    answers = q.reader.earliest

    def earliest(tps: Any) -> PartitionOffsets:
        if any(tp.topic == "u" for tp in tps):
            raise KafkaClientError(f"Listing offsets of u-0: ({code})", code=code, retriable=True)
        return answers(tps)

    q.reader.earliest = earliest  # type: ignore[method-assign]
    assert spans(q.planner.plan_ranges(start, end)) == [("t-0", 3, 5)]
