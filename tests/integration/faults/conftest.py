"""Fixtures of the fault suite. Every broker, cluster and query started here is stopped at the
end of its test, whatever the test did to it (a broker left down, a query left running)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kafka_direct.testing import MockCluster
from tests.integration.faults.support import SHORT_LIVED_POOL
from tests.integration.kafka_helpers import new_topic_name

BROKERS = 3


class MockTopics:
    """Topics on the mock cluster with their leaders placed on purpose (partition p on broker
    ``p % brokers + 1``), so a fault on one broker hits known partitions only."""

    def __init__(self, cluster: MockCluster) -> None:
        self.cluster = cluster

    def create(self, partitions: int = 3, prefix: str = "f") -> str:
        topic = new_topic_name(prefix)
        self.cluster.create_topic(topic, partitions=partitions, replication_factor=BROKERS)
        for p in range(partitions):
            self.cluster.set_leader(topic, p, self.leader(p))
        return topic

    def leader(self, partition: int) -> int:
        return partition % BROKERS + 1


@pytest.fixture()
def mock_cluster() -> Iterator[MockCluster]:
    cluster = MockCluster(brokers=BROKERS).start()
    try:
        yield cluster
    finally:
        with contextlib.suppress(Exception):
            cluster.set_rtt(-1, 0)
        with contextlib.suppress(Exception):
            cluster.broker_up(-1)
        cluster.close()


@pytest.fixture()
def mock_topics(mock_cluster: MockCluster) -> MockTopics:
    return MockTopics(mock_cluster)


@pytest.fixture()
def queries(spark: Any) -> Iterator[Callable[[Any], Any]]:
    """``queries(q)`` registers a streaming query to be stopped when the test ends."""
    started: list[Any] = []

    def track(query: Any) -> Any:
        started.append(query)
        return query

    yield track
    for query in started:
        with contextlib.suppress(Exception):
            query.stop()


@pytest.fixture()
def mock_stream(spark: Any, mock_cluster: MockCluster) -> Callable[..., Any]:
    """``mock_stream(topic, **options)``: a kafka_direct stream DataFrame on the mock cluster,
    from the earliest offsets unless told otherwise."""

    def make(topic: str, **options: str) -> Any:
        reader = (
            spark.readStream.format("kafka_direct")
            .option("kafka.bootstrap.servers", mock_cluster.bootstrap_servers)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
        )
        for key, value in {**SHORT_LIVED_POOL, **options}.items():
            reader = reader.option(key, value)
        return reader.load()

    return make


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Faults are about timing (outages, slow brokers, killed processes): the whole suite runs
    # alone, after the parallel part (scripts/test.sh).
    here = __file__.rsplit("/", 1)[0]
    for item in items:
        if str(item.path).startswith(here):
            item.add_marker(pytest.mark.serial)
