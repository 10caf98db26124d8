"""The DStream-style direct stream's planner under broker faults (see test_planner_faults.py for
the structured source): partitions without an answer keep their position, a batch with no
answer at all reads nothing, and only a long outage fails the stream. No broker, no Spark."""

from __future__ import annotations

import pytest

from kafka_direct.dstream.planner import DirectStreamPlanner
from kafka_direct.dstream.strategies import ConsumerStrategies
from kafka_direct.errors import KafkaClientError, NotAuthorizedError
from kafka_direct.offsets import OffsetRange, PartitionOffsets, TopicPartition
from kafka_direct.planning.patience import OffsetPatience
from kafka_direct.stores.base import OffsetStoreError
from tests.unit.fake_reader import FakeCluster
from tests.unit.planning.test_micro_batch_faults import SLOW, Clock

T0, T1, T2 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)
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


class FlakyStore:
    """The stored-offset lookup of a planner: raises ``error`` while it is set."""

    def __init__(self, stored: PartitionOffsets) -> None:
        self.stored = stored
        self.error: Exception | None = None

    def __call__(self, tps: list[TopicPartition]) -> PartitionOffsets:
        if self.error is not None:
            raise self.error
        return {tp: off for tp, off in self.stored.items() if tp in tps}


def flaky_planner(cluster: FakeCluster, clock: Clock, store: FlakyStore) -> DirectStreamPlanner:
    p = planner(cluster, clock, timeout_ms=10_000)
    p._load_stored = store
    return p


@pytest.mark.parametrize(
    "error",
    [
        KafkaClientError("coordinator not available", code="COORDINATOR_NOT_AVAILABLE",
                         retriable=True),
        OffsetStoreError("Could not connect to the offset store SqlOffsetStore(...): refused"),
    ],
    ids=["kafka-group", "sql-store"],
)  # fmt: skip
def test_a_new_partition_whose_stored_offset_cannot_be_read_waits_as_unanswered(
    cluster: FakeCluster, error: Exception
) -> None:
    # Regression (review): a store outage while a partition appeared stopped the stream at once.
    clock = Clock()
    store = FlakyStore({T2: 3})
    p = flaky_planner(cluster, clock, store)
    cluster.add_partitions("t")
    cluster.append("t", 2, 5)
    store.error = error
    old = [OffsetRange("t", 0, 4, 10), OffsetRange("t", 1, 5, 20)]
    assert p.plan({T0: 4, T1: 5}) == old  # t-2 left out: still new next batch
    clock.now += 9
    assert p.plan({T0: 4, T1: 5}) == old
    store.error = None  # back: t-2 starts at its stored offset, not at earliest
    assert p.plan({T0: 4, T1: 5}) == [*old, OffsetRange("t", 2, 3, 5)]


def test_a_store_outage_for_a_new_partition_fails_after_the_unavailable_timeout(
    cluster: FakeCluster,
) -> None:
    clock = Clock()
    store = FlakyStore({})
    p = flaky_planner(cluster, clock, store)
    cluster.add_partitions("t")
    store.error = KafkaClientError("timed out", code="_TIMED_OUT", retriable=True)
    p.plan({T0: 4, T1: 5})
    clock.now += 5
    p.plan({T0: 4, T1: 5})  # the other partitions' answers do not restart t-2's waiting
    clock.now += 6
    with pytest.raises(KafkaClientError, match=r"t-2.*fetchOffset\.unavailableTimeout"):
        p.plan({T0: 4, T1: 5})


def test_a_refused_stored_offset_lookup_fails_at_once(cluster: FakeCluster) -> None:
    store = FlakyStore({})
    p = flaky_planner(cluster, Clock(), store)
    cluster.add_partitions("t")
    store.error = NotAuthorizedError(
        "refused", code="GROUP_AUTHORIZATION_FAILED", principal="User:x",
        operations=["READ"], resource="group", names=["g"],
    )  # fmt: skip
    with pytest.raises(NotAuthorizedError):
        p.plan({T0: 4, T1: 5})
