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
from kafka_direct.planning.reader import DSTREAM, STRUCTURED, SubscriptionRules

#: The cluster: topic -> partitions; "secret" exists but is not this principal's to describe.
CLUSTER = {"a": 2, "b": 3, "__consumer_offsets": 50, **{f"other-{i}": 4 for i in range(1000)}}
HIDDEN = {"secret"}


class RecordingAdmin:
    def __init__(
        self,
        transport_failures: int = 0,
        controller: int = 1,
        unknown_offsets: int = 0,
        cluster: dict[str, int] | None = None,
    ) -> None:
        self.cluster = CLUSTER if cluster is None else cluster
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
            for name, n in self.cluster.items()
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
            elif name in self.cluster:
                parts = [SimpleNamespace(id=p) for p in range(self.cluster[name])]
                future.set_result(SimpleNamespace(partitions=parts))
            else:
                future.set_exception(KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)))
            out[name] = future
        return out

    def partitions(self) -> set[TopicPartition]:
        return {TopicPartition(t, p) for t, n in self.cluster.items() for p in range(n)}

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
        # Not there (yet), not this principal's to see: left out, as a listing would.
        (
            Subscription("subscribe", topics=("a", "missing")),
            ["a", "missing"],
            _tps(("a", 0), ("a", 1)),
        ),
        (Subscription("subscribe", topics=("secret",)), ["secret"], set()),
        # Named, an internal topic is read as given: "it is always possible to explicitly
        # subscribe to an internal topic" (the Java consumer's exclude.internal.topics).
        (
            Subscription("subscribe", topics=("__consumer_offsets",)),
            ["__consumer_offsets"],
            _tps(*(("__consumer_offsets", p) for p in range(50))),
        ),
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
        assert reader.partitions(strategy, rules=STRUCTURED) == expected
    assert admin.listings == 1
    assert admin.described == ([described] * 3 if described else [])


ASSIGN_A0_A5 = Subscription("assign", partitions=(TopicPartition("a", 0), TopicPartition("a", 5)))


def test_an_assigned_partition_its_topic_lacks_is_left_out_for_the_structured_source() -> None:
    # Spark's AssignStrategy keeps the assigned partitions that DescribeTopics lists.
    reader = _reader(RecordingAdmin())
    assert reader.partitions(ASSIGN_A0_A5, rules=STRUCTURED) == _tps(("a", 0))


@pytest.mark.parametrize(
    ("strategy", "rules", "named"),
    [
        # Spark Streaming's Assign fails on it too (the consumer's position times out).
        (ASSIGN_A0_A5, DSTREAM, "a-5"),
        # A topic the cluster does not have: Spark's DescribeTopics fails on it.
        (Subscription("assign", partitions=(TopicPartition("nope", 0),)), STRUCTURED, "nope-0"),
        (Subscription("assign", partitions=(TopicPartition("nope", 0),)), DSTREAM, "nope-0"),
    ],
)
def test_an_assigned_partition_the_cluster_does_not_have_is_named(
    strategy: Subscription, rules: SubscriptionRules, named: str
) -> None:
    reader = _reader(RecordingAdmin())
    with pytest.raises(TopicNotFoundError, match=rf"Option 'assign' names {named},"):
        reader.partitions(strategy, rules=rules)


@pytest.mark.parametrize(
    ("pattern", "rules", "topics"),
    [
        # Spark's structured source: findFirstIn, the pattern anywhere in the name.
        ("a", STRUCTURED, ["a", "bab"]),
        ("b", STRUCTURED, ["b", "bab"]),
        ("^b$", STRUCTURED, ["b"]),
        ("a.*", STRUCTURED, ["a", "bab"]),
        # Spark Streaming's SubscribePattern: Matcher.matches(), the whole name.
        ("a", DSTREAM, ["a"]),
        ("b", DSTREAM, ["b"]),
        ("b.*", DSTREAM, ["b", "bab"]),
    ],
)
def test_a_pattern_lists_every_topic_and_matches_as_the_api_it_mirrors(
    pattern: str, rules: SubscriptionRules, topics: list[str]
) -> None:
    admin = RecordingAdmin(cluster={"a": 2, "b": 3, "bab": 1, "__consumer_offsets": 1})
    reader = _reader(admin)
    reader.connect()
    found = reader.partitions(Subscription("subscribePattern", pattern=pattern), rules=rules)
    assert sorted({tp.topic for tp in found}) == topics
    assert found == {tp for tp in admin.partitions() if tp.topic in topics}
    assert (admin.listings, admin.described) == (2, [])  # a listing, whatever the rules


@pytest.mark.parametrize("rules", [STRUCTURED, DSTREAM])
def test_only_kafkas_internal_topics_are_left_out_and_only_from_patterns(
    rules: SubscriptionRules,
) -> None:
    # Regression (review): every name starting with "__" was dropped, so a stream subscribed
    # to Debezium's heartbeat topic waited for it forever.
    cluster = {"__debezium-heartbeat.db": 1, "__consumer_offsets": 2, "__transaction_state": 2}
    cluster |= {"__share_group_state": 2, "a": 1}
    admin = RecordingAdmin(cluster=cluster)
    reader = _reader(admin)
    pattern = reader.partitions(Subscription("subscribePattern", pattern="__.*"), rules=rules)
    assert pattern == _tps(("__debezium-heartbeat.db", 0))
    named = ("__debezium-heartbeat.db", "__transaction_state")
    # The describe path, then the listing path (a cluster that names no controller).
    for controller in (1, 0):
        reader = _reader(RecordingAdmin(cluster=cluster, controller=controller))
        found = reader.partitions(Subscription("subscribe", topics=named), rules=rules)
        assert {tp.topic for tp in found} == set(named)


@pytest.mark.parametrize(
    "strategy",
    [ASSIGN_A0_A5, Subscription("subscribePattern", pattern="a")],
    ids=["assign", "subscribePattern"],
)
def test_where_the_apis_differ_the_caller_must_say_which_it_mirrors(
    strategy: Subscription,
) -> None:
    with pytest.raises(ValueError, match=r"needs rules=STRUCTURED or rules=DSTREAM"):
        _reader(RecordingAdmin()).partitions(strategy)


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
    assert admin.offset_requests == 3  # fetchOffset.numRetries (3): attempts, as Spark counts
