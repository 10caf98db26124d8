"""Which metadata a stream's trigger asks for (kafka_direct.kafka.offset_reader): only the named
topics for ``subscribe`` and ``assign``, never a listing of the whole cluster after first
contact. A listing grows with every topic of the cluster (tens of milliseconds and a few of CPU
per trigger at 500 topics, docs/performance.md); a fake admin here records the calls."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from kafka_direct.config.kafka import Subscription
from kafka_direct.errors import KafkaClientError, TopicNotFoundError
from kafka_direct.kafka.offset_reader import AdminOffsetReader
from kafka_direct.offsets import TopicPartition

#: The cluster: topic -> partitions; "secret" exists but is not this principal's to describe.
CLUSTER = {"a": 2, "b": 3, "__consumer_offsets": 50, **{f"other-{i}": 4 for i in range(1000)}}
HIDDEN = {"secret"}


class RecordingAdmin:
    def __init__(
        self, transport_failures: int = 0, controller: int = 1, unknown_offsets: int = 0
    ) -> None:
        self.listings = 0
        self.offset_requests = 0
        #: How many ListOffsets requests a leader answers "unknown topic" before it knows it.
        self.unknown_offsets = unknown_offsets
        self.described: list[list[str]] = []
        self.transport_failures = transport_failures
        self.controller = controller

    def list_topics(self, timeout: float = -1) -> Any:
        self.listings += 1
        topics = {
            name: SimpleNamespace(partitions=dict.fromkeys(range(n)), error=None)
            for name, n in CLUSTER.items()
        }
        return SimpleNamespace(topics=topics, controller_id=self.controller, brokers={1: None})

    def describe_topics(self, topics: Any, request_timeout: float = -1) -> dict[str, Future[Any]]:
        names = list(topics.topic_names)
        self.described.append(names)
        out: dict[str, Future[Any]] = {}
        for name in names:
            future: Future[Any] = Future()
            if self.transport_failures:
                self.transport_failures -= 1
                future.set_exception(KafkaException(KafkaError(KafkaError._TRANSPORT, "down")))
            elif name in HIDDEN:
                error = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)
                future.set_exception(KafkaException(error))
            elif name in CLUSTER:
                parts = [SimpleNamespace(id=p) for p in range(CLUSTER[name])]
                future.set_result(SimpleNamespace(partitions=parts))
            else:
                future.set_exception(KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)))
            out[name] = future
        return out

    def list_offsets(self, request: Any, **_: Any) -> dict[Any, Future[Any]]:
        self.offset_requests += 1
        unknown = self.unknown_offsets > 0
        self.unknown_offsets -= 1
        out: dict[Any, Future[Any]] = {}
        for tp in request:
            future: Future[Any] = Future()
            if unknown:
                future.set_exception(KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)))
            else:
                future.set_result(SimpleNamespace(offset=7))
            out[tp] = future
        return out

    def poll(self, timeout: float = 0) -> int:
        return 0


def _reader(admin: RecordingAdmin) -> AdminOffsetReader:
    return AdminOffsetReader(
        {"bootstrap.servers": "b:9092"},
        retry_interval_ms=0,
        admin_factory=lambda kafka, events: admin,
    )


def _tps(*pairs: tuple[str, int]) -> set[TopicPartition]:
    return {TopicPartition(t, p) for t, p in pairs}


@pytest.mark.parametrize(
    ("strategy", "described", "expected"),
    [
        (Subscription("subscribe", topics=("a",)), ["a"], _tps(("a", 0), ("a", 1))),
        (
            Subscription("subscribe", topics=("b", "a")),
            ["a", "b"],
            _tps(("a", 0), ("a", 1), ("b", 0), ("b", 1), ("b", 2)),
        ),
        # Not there (yet), not this principal's to see, internal: left out, as a listing would.
        (
            Subscription("subscribe", topics=("a", "missing")),
            ["a", "missing"],
            _tps(("a", 0), ("a", 1)),
        ),
        (Subscription("subscribe", topics=("secret",)), ["secret"], set()),
        (Subscription("subscribe", topics=("__consumer_offsets",)), None, set()),
        (
            Subscription("assign", partitions=(TopicPartition("b", 2), TopicPartition("a", 0))),
            ["a", "b"],
            _tps(("b", 2), ("a", 0)),
        ),
    ],
)
def test_a_trigger_describes_only_the_named_topics(
    strategy: Subscription, described: list[str] | None, expected: set[TopicPartition]
) -> None:
    admin = RecordingAdmin()
    reader = _reader(admin)
    reader.connect()  # first contact: one listing, once per reader
    for _ in range(3):  # three triggers
        assert reader.partitions(strategy) == expected
    assert admin.listings == 1
    assert admin.described == ([described] * 3 if described else [])


def test_an_assigned_partition_the_cluster_does_not_have_is_named() -> None:
    reader = _reader(RecordingAdmin())
    strategy = Subscription("assign", partitions=(TopicPartition("a", 5),))
    with pytest.raises(TopicNotFoundError, match=r"Option 'assign' names a-5"):
        reader.partitions(strategy)


def test_a_pattern_still_lists_every_topic() -> None:
    admin = RecordingAdmin()
    reader = _reader(admin)
    reader.connect()
    assert reader.partitions(Subscription("subscribePattern", pattern="a.*")) == A_PARTITIONS
    assert (admin.listings, admin.described) == (2, [])


A_ONLY = Subscription("subscribe", topics=("a", "missing"))
A_PARTITIONS = _tps(("a", 0), ("a", 1))


def test_a_cluster_that_names_no_controller_is_listed() -> None:
    # librdkafka sends DescribeTopics to the controller; its mock cluster names broker 0 of 1..3.
    admin = RecordingAdmin(controller=0)
    reader = _reader(admin)
    assert [reader.partitions(A_ONLY) for _ in range(3)] == [A_PARTITIONS] * 3
    assert (admin.listings, admin.described) == (4, [])


def test_a_failed_describe_falls_back_to_listing_for_good() -> None:
    admin = RecordingAdmin(transport_failures=1)
    reader = _reader(admin)
    assert [reader.partitions(A_ONLY) for _ in range(3)] == [A_PARTITIONS] * 3
    assert admin.described == [["a", "missing"]]  # once, then listings only
    assert admin.listings == 4  # first contact, then one per trigger


def test_a_leader_that_does_not_know_a_described_topic_yet_is_asked_again() -> None:
    # The controller describes a recreated topic a moment before its leader knows it.
    admin = RecordingAdmin(unknown_offsets=2)
    reader = _reader(admin)
    assert reader.latest(A_PARTITIONS) == dict.fromkeys(A_PARTITIONS, 7)
    assert admin.offset_requests == 3


def test_a_leader_that_goes_on_not_knowing_it_is_an_outage_a_stream_waits_out() -> None:
    # Retriable, not TopicNotFoundError: a stream plans nothing this trigger and asks again
    # (planning/patience.py), and a topic that is really gone drops out of the next description.
    admin = RecordingAdmin(unknown_offsets=100)
    reader = _reader(admin)
    with pytest.raises(KafkaClientError, match=r"a-0.*its leader does not know") as caught:
        reader.latest(A_PARTITIONS)
    assert caught.value.retriable
    assert not isinstance(caught.value, TopicNotFoundError)
    assert admin.offset_requests == 4  # fetchOffset.numRetries (3) + 1
