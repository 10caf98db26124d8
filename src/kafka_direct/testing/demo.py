"""The demo's broker: the one ``kafka-direct wordcount`` and ``kafka-direct broker`` start when
no cluster is given. Runs in the user's process (the CLI), which owns the broker's lifetime.

Real Apache Kafka (:class:`~kafka_direct.testing.KafkaCluster`, one node) is the default: a
user's first write followed by a read must be exact, and on the embedded Tansu broker it is not
(its log end stops at the start of the last record batch, so a read bounded by "latest" misses
that batch's tail until more records arrive). Kafka's jars are fetched once into the user's
cache; every PySpark user already has the Java it needs. Tansu stays available
(``--broker tansu``) for a start without Java processes of its own or a first fetch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Literal

__all__ = ["DEMO_BROKERS", "DemoBroker", "bootstrap_or_embedded", "describe"]

DemoBroker = Literal["kafka", "tansu"]
DEMO_BROKERS: tuple[DemoBroker, ...] = ("kafka", "tansu")


def describe(broker: DemoBroker) -> str:
    """What is being started, for the line printed before it starts."""
    if broker == "tansu":
        return "the embedded Tansu broker"
    from kafka_direct.testing.kafka_cluster import KAFKA_VERSION

    return f"Apache Kafka {KAFKA_VERSION} (one node; its jars are fetched on the first run)"


@contextlib.contextmanager
def bootstrap_or_embedded(
    bootstrap_servers: str | None, broker: DemoBroker = "kafka"
) -> Iterator[str]:
    """``bootstrap_servers`` if given, else a demo broker of kind ``broker`` for the block."""
    if bootstrap_servers:
        yield bootstrap_servers
        return
    if broker == "tansu":
        from kafka_direct.testing.broker import EmbeddedBroker

        with EmbeddedBroker() as tansu:
            yield tansu.bootstrap_servers
        return
    from kafka_direct.testing.kafka_cluster import KafkaCluster

    with KafkaCluster(1) as cluster:
        yield cluster.bootstrap_servers
