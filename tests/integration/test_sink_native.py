"""The sink's C write path (``kafka_direct.producer.native``) against the Python path, on the real
broker: the same rows written through each, read back with a plain consumer, must be the same
records (keys, values, headers, partitions, tombstones, topics).

- Through Spark: ``df.write.format("kafka_direct")`` with ``fastPath.enabled`` true and false,
  every column the sink writes, a topic column over two topics, and enough rows for many
  produce runs and polls per task. The task statistics say which path each write took.
- Without Spark: one producer of each kind, a queue far smaller than the write, so that both
  wait for room over and over; one producer per partition keeps every partition's order
  deterministic, so the two topics must hold the same records at the same offsets.

The fast path must be available here: without the extension these tests fail rather than
compare the Python path with itself.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, TopicPartition

from kafka_direct.config.sink import parse_sink_options
from kafka_direct.producer import native
from kafka_direct.producer.batch_producer import PythonBatchProducer
from kafka_direct.producer.columns import plan_columns
from kafka_direct.producer.native import NativeBatchProducer
from kafka_direct.producer.partitioning import murmur2_partition
from tests.integration.test_sink_batch import HEADERS, read_topic, writer

ROWS = 20_000  # per write: several produce runs (1,024) and polls (8,192) per task


@pytest.fixture(autouse=True)
def fast_path() -> None:
    assert native.available(), native.status()


def rows_for(topics: tuple[str, str]) -> list[tuple[Any, ...]]:
    """(topic, partition, key, value, headers) covering every shape, deterministic. A keyless
    record always names its partition: the partitioner would place it at random (sticky)."""
    out = []
    for i in range(ROWS):
        topic = topics[i % 7 == 0]  # a topic column: most rows to the first topic
        key = None if i % 5 == 0 else ("" if i % 11 == 0 else f"key-{i % 500}")
        partition = None if i % 3 and key is not None else i % 2  # the partitioner's, or given
        value = None if i % 13 == 0 else (b"" if i % 17 == 0 else f"value-{i}".encode() * 3)
        if i % 4 == 0:
            headers = None
        elif i % 4 == 1:
            headers = []
        else:
            headers = [("seq", str(i).encode()), ("null", None), ("empty", b"")][: i % 4]
        out.append((topic, partition, key, value, headers))
    return out


def comparable(records: list[Any]) -> Counter[Any]:
    """(partition, key, value, headers) records, counted: every record exactly once."""
    return Counter((p, k, v, tuple(h or ())) for p, k, v, h in records)


def expected(rows: list[Any], topic: str, partitions: int) -> list[Any]:
    out = []
    for t, p, k, v, h in rows:
        if t != topic:
            continue
        key = None if k is None else k.encode()
        out.append((p if p is not None else murmur2_partition(key, partitions), key, v, h))
    return out


def write_kinds(stats_dir: Path, topics: set[str]) -> set[str]:
    kinds = set()
    for path in stats_dir.glob("tasks-*.jsonl"):
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("role") == "write" and rec.get("topic") in topics:
                kinds.add(rec["kind"])
    return kinds


def test_both_paths_write_the_same_records_through_spark(
    spark: Any, kafka_bootstrap: str, make_topic: Any, task_stats_dir: Path
) -> None:
    written: dict[str, list[Any]] = {}
    for kind, fast in (("native", "true"), ("python", "false")):
        topics = (make_topic(partitions=2), make_topic(partitions=2))
        rows = rows_for(topics)
        df = spark.createDataFrame(
            rows, f"topic string, partition int, key string, value binary, headers {HEADERS}"
        ).repartition(2)
        # The topic option would win over the column: the column says where each row goes.
        writer(df, kafka_bootstrap, **{"fastPath.enabled": fast}).save()
        for i, topic in enumerate(topics):
            got = read_topic(kafka_bootstrap, topic, sum(1 for r in rows if r[0] == topic))
            assert comparable(got) == comparable(expected(rows, topic, 2)), (kind, i)
            written[f"{kind}-{i}"] = got
    # And the same between the two paths, topic by topic.
    for i in (0, 1):
        assert comparable(written[f"native-{i}"]) == comparable(written[f"python-{i}"])
    assert sum(len(v) for v in written.values()) == 2 * ROWS


def test_each_path_is_the_one_asked_for(
    spark: Any, kafka_bootstrap: str, make_topic: Any, task_stats_dir: Path
) -> None:
    for kind, fast in (("native", "true"), ("python", "false")):
        topic = make_topic(partitions=2)
        df = spark.range(0, 1000, numPartitions=2).selectExpr("cast(id as string) as value")
        writer(df, kafka_bootstrap, topic=topic, **{"fastPath.enabled": fast}).save()
        assert len(read_topic(kafka_bootstrap, topic, 1000)) == 1000
        assert write_kinds(task_stats_dir, {topic}) == {kind}


def read_by_offset(bootstrap: str, topic: str, partition: int, count: int) -> list[Any]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "sink-native-reader"})
    consumer.assign([TopicPartition(topic, partition, 0)])
    got: list[Any] = []
    deadline = time.monotonic() + 60
    while len(got) < count and time.monotonic() < deadline:
        got += [m for m in consumer.consume(10_000, 0.2) if m.error() is None]
    consumer.close()
    return [(m.offset(), m.key(), m.value(), m.headers()) for m in got]


def test_both_paths_give_the_same_offsets_through_a_full_queue(
    kafka_bootstrap: str, make_topic: Any
) -> None:
    """Without Spark: 30,000 records with keys and headers through a 500-record queue, one
    partition per producer, so that each partition's order (and so its offsets) is fixed."""
    n = 30_000
    headers_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    batch = pa.record_batch(
        [
            pa.array([f"{i:06d}".encode() * 16 for i in range(n)]),
            pa.array([None if i % 9 == 0 else f"k{i}".encode() for i in range(n)]),
            pa.array(
                [[("i", str(i).encode())] if i % 10 == 0 else None for i in range(n)], headers_type
            ),
        ],
        names=["value", "key", "headers"],
    )
    fields = [("value", "binary"), ("key", "binary"), ("headers", HEADERS)]
    small = {
        "kafka.bootstrap.servers": kafka_bootstrap,
        "kafka.queue.buffering.max.messages": "500",
        "kafka.linger.ms": "1",
    }
    got = {}
    for kind, cls in (("native", NativeBatchProducer), ("python", PythonBatchProducer)):
        topic = make_topic(partitions=1)
        producer = cls(parse_sink_options({**small, "topic": topic}).producer)
        for start in range(0, n, 10_000):  # as Spark hands them over
            producer.produce_batch(batch.slice(start, 10_000), plan_columns(fields, topic))
        producer.flush(60)
        if kind == "native":
            assert producer._impl.full_waits > 0  # it did wait for room
        producer.close()
        got[kind] = read_by_offset(kafka_bootstrap, topic, 0, n)
    assert len(got["native"]) == n
    assert got["native"] == got["python"]
