"""Rows in and out of a SecuredKafkaCluster's topics for the secured-Kafka tests, through its
PLAINTEXT admin listener (the user's test process)."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from kafka_direct.testing.secured_cluster import SecuredKafkaCluster

#: The passwords of the secured cluster's users (the tests check that errors never show them).
ALICE, BOB = "alice-s3cr3t-pw", "bob-s3cr3t-pw"


def produce(cluster: SecuredKafkaCluster, topic: str, n: int, tag: str) -> list[bytes]:
    """``n`` values ``<tag>-0000``... across partitions 0 and 1; returns them in order."""
    values = [f"{tag}-{i:04d}".encode() for i in range(n)]
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for i, value in enumerate(values):
        producer.produce(topic, value, partition=i % 2)
    assert producer.flush(30) == 0
    return values


def read_back(cluster: SecuredKafkaCluster, topic: str, n: int) -> list[bytes]:
    """The values of partitions 0 and 1, once ``n`` arrived (or after 60 s)."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": topic})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(2)])
    seen: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(seen) < n and time.monotonic() < deadline:
        seen += [m.value() for m in consumer.consume(500, 0.5) if m.error() is None]
    consumer.close()
    return seen


def values(df: Any) -> list[bytes]:
    """A DataFrame's (or an RDD's rows') value column, sorted."""
    return sorted(bytes(r.value) for r in df.select("value").collect())
