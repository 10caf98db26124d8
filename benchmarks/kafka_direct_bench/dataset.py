"""Topics and the data set. Runs in the benchmark process.

:func:`produce_dataset` writes N records of S random bytes (fixed seed) over P partitions and
checks that the log ends are exact (:func:`produce_small`: a new topic of short values);
:func:`new_topic` and :func:`create_topic` give every phase its own topic, and
:func:`delete_topics` removes them from a cluster the run did not start.
"""

from __future__ import annotations

import random
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from kafka_direct_bench.common import log


def per_partition_counts(records: int, partitions: int) -> list[int]:
    base, extra = divmod(records, partitions)
    return [base + (1 if p < extra else 0) for p in range(partitions)]


def new_topic(prefix: str) -> str:
    return f"bench-{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(
    bootstrap: str, topic: str, partitions: int, config: dict[str, str] | None = None
) -> None:
    """``config``: topic settings (``compression.type``, ``max.message.bytes``)."""
    from kafka_direct.testing.broker import create_topic as create

    create(bootstrap, topic, partitions=partitions, config=config)


def delete_topics(bootstrap: str, topics: list[str]) -> None:
    """Best effort: a run on a shared cluster leaves none of its topics behind."""
    from confluent_kafka import KafkaException

    from kafka_direct.errors import KafkaClientError
    from kafka_direct.testing.broker import delete_topic

    for topic in topics:
        try:
            delete_topic(bootstrap, topic)
        except (KafkaClientError, KafkaException) as exc:
            log(f"could not delete topic {topic}: {exc}")


def produce_dataset(
    bootstrap: str,
    topic: str,
    records: int,
    size: int,
    partitions: int,
    seed: int,
    values: list[bytes] | None = None,
    settings: dict[str, str] | None = None,
) -> dict[str, Any]:
    """N records of ``size`` random bytes (fixed seed) with 8-byte keys, partition by partition.

    ``values``: the records cycle through these instead (the suite's JSON-like and 1 MiB data
    sets); ``settings``: librdkafka settings over the defaults below (a codec, a larger
    ``message.max.bytes``). The result's ``bytes`` is the sum of the value lengths produced.

    The embedded broker reports the log end as the start of the last record batch (BROKER.md),
    so each partition's final record is flushed on its own: the log end is then exact.
    """
    rnd = random.Random(seed)
    if values is None:
        values = [rnd.randbytes(size) for _ in range(1024)]
    keys = [rnd.randbytes(8) for _ in range(1024)]
    distinct = len(values)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": "50",
            "batch.num.messages": "10000",
            "batch.size": "1000000",
            "queue.buffering.max.messages": "1000000",
            "queue.buffering.max.kbytes": "1048576",
            "client.id": "kafka-direct-bench-producer",
            **(settings or {}),
        }
    )
    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    counts = per_partition_counts(records, partitions)
    total = sum(len(values[i % distinct]) for c in counts for i in range(c - 1))
    total += sum(len(values[0]) for c in counts if c > 0)
    started = time.perf_counter()
    for p, count in enumerate(counts):
        for i in range(count - 1):
            while True:
                try:
                    value, key = values[i % distinct], keys[i & 1023]
                    producer.produce(topic, value, key, partition=p, on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.05)
    producer.flush(120)
    for p, count in enumerate(counts):
        if count > 0:
            producer.produce(topic, values[0], keys[0], partition=p, on_delivery=on_delivery)
            producer.flush(60)
    elapsed = time.perf_counter() - started
    if errors:
        raise RuntimeError(f"producing the data set failed: {errors[:3]}")
    ends = latest_offsets(bootstrap, topic, partitions)
    if ends != counts:
        raise RuntimeError(f"the log ends at {ends}, expected {counts}: the data set is incomplete")
    return {
        "seconds": elapsed,
        "rate": records / elapsed,
        "per_partition": counts,
        "bytes": total,
    }


def produce_small(bootstrap: str, topic: str, partitions: int, records: int) -> None:
    """A new topic of ``records`` short values (``v0`` to ``v1023``), for benchmarks that time
    Spark's own costs rather than reading."""
    create_topic(bootstrap, topic, partitions)
    produce_dataset(
        bootstrap, topic, records, 0, partitions, seed=0, values=[b"v%d" % i for i in range(1024)]
    )


def latest_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kafka-direct-bench-probe"})
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)[1]
            for p in range(partitions)
        ]
    finally:
        consumer.close()
