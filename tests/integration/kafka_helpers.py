"""Test utilities for the real broker: topics and producing known data.

On the embedded Tansu broker (`KAFKA_DIRECT_TEST_BROKER=tansu`, the smoke set), `produce_known`
applies the workaround from docs/brokers.md (Tansu reports the log end as the start of the last
record batch): each partition's final record is flushed on its own, so the log end is exact.
On Apache Kafka the data goes in ordinary batches. The library itself never works around it.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from kafka_direct.testing.broker import create_topic, delete_topic

__all__ = [
    "Record",
    "broker_kind",
    "create_topic",
    "delete_topic",
    "new_topic_name",
    "produce_known",
    "read_values",
    "tansu_log_end_workaround",
]


def broker_kind() -> str:
    """``external`` (KAFKA_BOOTSTRAP_SERVERS wins), else KAFKA_DIRECT_TEST_BROKER: kafka|tansu."""
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        return "external"
    kind = os.environ.get("KAFKA_DIRECT_TEST_BROKER", "kafka").strip().lower()
    if kind not in ("kafka", "tansu"):
        raise ValueError(
            f"KAFKA_DIRECT_TEST_BROKER={kind!r}: expected 'kafka' (Apache Kafka, the default) or "
            "'tansu' (the embedded broker)."
        )
    return kind


def tansu_log_end_workaround() -> bool:
    """Whether each partition's last record must go in a batch of its own (Tansu only)."""
    return broker_kind() == "tansu"


@dataclass(frozen=True)
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    timestamp_ms: int
    headers: tuple[tuple[str, bytes | None], ...] = ()


def new_topic_name(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def produce_known(
    bootstrap: str,
    topic: str,
    per_partition: int,
    partitions: int = 1,
    *,
    start_index: int = 0,
    headers: bool = False,
    base_ts_ms: int = 1_700_000_000_000,
) -> list[Record]:
    """Produce `per_partition` records to each partition; return them with their offsets.

    Values are `"{topic}|p{partition}|{i}"`, keys `"k{i}"` (every 7th key is null), timestamps
    `base_ts_ms + i` (CreateTime), headers `("h", b"{i}")` and a null-valued one when asked.
    """
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": "5", "acks": "all"})
    delivered: list[Record] = []
    errors: list[str] = []

    def on_delivery(err: object, msg: object, sent_headers: tuple = ()) -> None:
        if err is not None:
            errors.append(str(err))
            return
        delivered.append(
            Record(
                msg.topic(),  # type: ignore[attr-defined]
                msg.partition(),  # type: ignore[attr-defined]
                msg.offset(),  # type: ignore[attr-defined]
                msg.key(),  # type: ignore[attr-defined]
                msg.value(),  # type: ignore[attr-defined]
                msg.timestamp()[1],  # type: ignore[attr-defined]
                sent_headers,  # delivery reports do not carry headers
            )
        )

    def send(p: int, i: int) -> None:
        hdrs = [("h", str(i).encode()), ("null", None)] if headers else None
        producer.produce(
            topic,
            value=f"{topic}|p{p}|{i}".encode(),
            key=None if i % 7 == 3 else f"k{i}".encode(),
            partition=p,
            timestamp=base_ts_ms + i,
            headers=hdrs,
            on_delivery=lambda err, msg: on_delivery(err, msg, tuple(hdrs or ())),
        )

    alone = tansu_log_end_workaround()
    last = start_index + per_partition - (1 if alone else 0)
    for p in range(partitions):
        for i in range(start_index, last):
            send(p, i)
    producer.flush(30)
    for p in range(partitions):
        if alone and per_partition > 0:
            send(p, last)
            producer.flush(30)
    assert not errors, errors
    assert len(delivered) == per_partition * partitions
    return sorted(delivered, key=lambda r: (r.partition, r.offset))


def read_values(
    bootstrap: str,
    topic: str,
    isolation: str,
    partitions: int = 1,
    *,
    at_least: int = 0,
    timeout_s: float = 120.0,
) -> list[bytes]:
    """The values of partitions ``0 .. partitions - 1`` of ``topic`` under ``isolation``, read
    until every one of them is at its end and at least ``at_least`` came, or ``timeout_s``
    passed (the caller's assertions on exact content then say what is missing)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex[:6]}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while (len(at_end) < partitions or len(values) < at_least) and (
            time.monotonic() < deadline
        ):
            for message in consumer.consume(10_000, timeout=0.5):
                error = message.error()
                if error is None:
                    values.append(message.value())
                    at_end.discard(message.partition())
                elif error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
                else:
                    raise AssertionError(error)
    finally:
        consumer.close()
    return values
