"""Offsets with gaps, read through both formats: transaction markers and aborted transactions
under both isolation levels, and a compacted topic."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from tests.integration.differential.both import (
    assert_same_rows,
    assign_json,
    new_name,
    offsets_json,
    read_both,
)

from kafka_direct.testing.broker import create_topic


@pytest.fixture(scope="module")
def transactional_topic(kafka_bootstrap: str) -> str:
    """Two partitions: committed, aborted, committed; partition 1 ends in an aborted transaction."""
    topic = new_name("diff-txn")
    create_topic(kafka_bootstrap, topic, partitions=2)
    producer = Producer(
        {"bootstrap.servers": kafka_bootstrap, "transactional.id": new_name("diff-txn-id")}
    )
    producer.init_transactions(30)
    plan = [
        ("commit", [(0, 3), (1, 2)]),
        ("abort", [(0, 2), (1, 1)]),
        ("commit", [(0, 1)]),
        ("abort", [(1, 2)]),
    ]
    for n, (outcome, parts) in enumerate(plan):
        producer.begin_transaction()
        for partition, count in parts:
            for i in range(count):
                producer.produce(
                    topic,
                    key=f"t{n}-{i}".encode(),
                    value=f"{outcome}|{partition}|{n}|{i}".encode(),
                    partition=partition,
                    headers=[("txn", str(n).encode())],
                )
        producer.flush(30)
        if outcome == "commit":
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    return topic


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_transactional_topic(
    isolation: str, spark: Any, kafka_bootstrap: str, transactional_topic: str
) -> None:
    both = read_both(
        spark,
        kafka_bootstrap,
        {
            "subscribe": transactional_topic,
            "kafka.isolation.level": isolation,
            "includeHeaders": "true",
        },
    )
    aborted = sum(1 for r in both.jvm if r[1].startswith(b"abort"))
    assert len(both.jvm) == (6 if isolation == "read_committed" else 11)
    assert aborted == (0 if isolation == "read_committed" else 5)
    assert_same_rows(both)


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_transactional_ranges_ending_on_markers(
    isolation: str, spark: Any, kafka_bootstrap: str, transactional_topic: str
) -> None:
    """Ranges that start and end on control records and aborted records (SPARK-25005)."""
    both = read_both(
        spark,
        kafka_bootstrap,
        {
            "assign": assign_json({transactional_topic: [0, 1]}),
            "startingOffsets": offsets_json({transactional_topic: {0: 3, 1: 2}}),
            "endingOffsets": offsets_json({transactional_topic: {0: 7, 1: 5}}),
            "kafka.isolation.level": isolation,
        },
    )
    assert_same_rows(both)


def _wait_for_compaction(bootstrap: str, topic: str, log_end: int, timeout_s: float = 90) -> int:
    """Wait until the log cleaner has removed records and stopped (two reads 2 s apart see the
    same count); return that count."""
    deadline = time.monotonic() + timeout_s
    seen = previous = log_end
    while time.monotonic() < deadline:
        consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": new_name("g"), "enable.auto.commit": False}
        )
        consumer.assign([KafkaTopicPartition(topic, 0, 0)])
        seen = 0
        last = -1
        while last < log_end - 1:
            msgs = consumer.consume(500, 5)
            if not msgs:
                break
            seen += len(msgs)
            last = msgs[-1].offset()
        consumer.close()
        if seen == previous < log_end:
            return seen
        previous = seen
        time.sleep(2)
    raise AssertionError(f"the log cleaner did not compact {topic} within {timeout_s} s")


def test_compacted_topic(spark: Any, kafka_bootstrap: str) -> None:
    topic = new_name("diff-compact")
    create_topic(
        kafka_bootstrap,
        topic,
        partitions=1,
        config={
            "cleanup.policy": "compact",
            "segment.ms": "100",
            "min.cleanable.dirty.ratio": "0.001",
            "delete.retention.ms": "100",
            "min.compaction.lag.ms": "0",
        },
    )
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": "0"})
    n = 0
    for round_ in range(4):
        for k in range(5):
            value = None if (k == 1 and round_ == 3) else f"v{round_}-{k}".encode()
            producer.produce(topic, key=f"k{k}".encode(), value=value, partition=0)
            n += 1
        producer.flush(30)
        time.sleep(0.3)  # let each round land in a segment of its own
    # Only closed segments are cleaned: one more record rolls the last one.
    producer.produce(topic, key=b"roll", value=b"roll", partition=0)
    producer.flush(30)
    n += 1
    seen = _wait_for_compaction(kafka_bootstrap, topic, n)
    both = read_both(spark, kafka_bootstrap, {"subscribe": topic, "failOnDataLoss": "false"})
    assert len(both.jvm) == seen
    assert_same_rows(both)
