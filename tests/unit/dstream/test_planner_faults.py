"""The DStream-style direct stream's planner under broker faults (see test_planner_faults.py for
the structured source): partitions without an answer keep their position, a batch with no
answer at all reads nothing, and only a long outage fails the stream. No broker, no Spark."""

from __future__ import annotations

import pytest

from kafka_direct.dstream.planner import DirectStreamPlanner
from kafka_direct.dstream.strategies import ConsumerStrategies
from kafka_direct.errors import KafkaClientError
from kafka_direct.offsets import OffsetRange, TopicPartition
from kafka_direct.planning.patience import OffsetPatience
from tests.unit.fake_reader import FakeCluster
from tests.unit.planning.test_micro_batch_faults import SLOW, Clock

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
P = {"bootstrap.servers": "b:9092", "group.id": "g", "auto.offset.reset": "earliest"}


def planner(cluster: FakeCluster, clock: Clock, timeout_ms: int = 60_000) -> DirectStreamPlanner:
    return DirectStreamPlanner(
        ConsumerStrategies.Subscribe(["t"], P),
        cluster.reader(),
        lambda tps: {},
        batch_interval_s=1.0,
        max_rate=lambda _tp: 0.0,
        min_rate=lambda _tp: 1,
        fail_on_data_loss=True,
        patience=OffsetPatience(timeout_ms, clock_s=clock, sleep_s=clock.sleep),
    )


@pytest.fixture()
def cluster() -> FakeCluster:
    c = FakeCluster()
    c.create_topic("t", partitions=2, records=[10, 20])
    return c


def test_a_partition_without_an_answer_keeps_its_position_and_is_not_data_loss(
    cluster: FakeCluster,
) -> None:
    p = planner(cluster, Clock())
    cluster.unavailable[T0] = SLOW
    ranges = p.plan({T0: 4, T1: 5})
    assert ranges == [OffsetRange("t", 0, 4, 4), OffsetRange("t", 1, 5, 20)]
    assert all(r.from_offset >= 0 for r in ranges)
    cluster.unavailable.clear()
    assert p.plan({T0: 4, T1: 20}) == [OffsetRange("t", 0, 4, 10), OffsetRange("t", 1, 20, 20)]


def test_a_metadata_request_without_an_answer_plans_the_known_partitions(
    cluster: FakeCluster,
) -> None:
    p = planner(cluster, Clock())
    assert p.initial_offsets() == {T0: 0, T1: 0}
    cluster.unavailable[T0] = SLOW
    cluster.metadata_down = True
    assert p.plan({T0: 4, T1: 5}) == [OffsetRange("t", 0, 4, 4), OffsetRange("t", 1, 5, 20)]


def test_no_answer_at_all_gives_an_empty_batch_until_the_bound(cluster: FakeCluster) -> None:
    clock = Clock()
    p = planner(cluster, clock, timeout_ms=10_000)
    cluster.down = True
    assert p.plan({T0: 4, T1: 5}) == [OffsetRange("t", 0, 4, 4), OffsetRange("t", 1, 5, 5)]
    clock.now += 11
    with pytest.raises(KafkaClientError, match=r"fetchOffset\.unavailableTimeout"):
        p.plan({T0: 4, T1: 5})


def test_the_start_waits_out_an_outage(cluster: FakeCluster) -> None:
    clock = Clock()
    p = planner(cluster, clock)
    cluster.down = True

    def recover(seconds: float) -> None:
        clock.now += seconds
        clock.slept.append(seconds)
        cluster.down = len(clock.slept) < 2

    p._patience._sleep = recover
    assert p.initial_offsets() == {T0: 0, T1: 0}
    assert len(clock.slept) == 2
