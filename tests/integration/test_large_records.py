"""Large records on real Apache Kafka, through the shared local Spark under Spark's default
memory settings: every read and write is exact (count, bytes and content by crc32), and every
read task cuts its Arrow batches by ``maxBatchBytes`` as well as by rows.

Regression: a read of 1 MB records used to cut Arrow batches by rows only (and a 256 MB ceiling),
and failed with the JVM out of direct memory where ``format("kafka")`` read it. The batches'
bounds are read from the tasks' statistics lines (KAFKA_DIRECT_STATS_DIR): a task's record bytes
over its batch count must stay within one record of the budget. The memory peaks themselves are
measured by ``benchmarks/large_records.py``, not asserted here.
"""

from __future__ import annotations

import json
import random
import uuid
import zlib
from collections import defaultdict
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.integration.kafka_helpers import create_topic

MB = 1024 * 1024
BUDGET = 16 * MB  # maxBatchBytes by default
#: Topics here take records up to this size (Kafka's default is about 1 MB).
MAX_MESSAGE = str(10 * MB)


def _topic(bootstrap: str, partitions: int) -> str:
    name = f"large-{uuid.uuid4().hex[:10]}"
    create_topic(bootstrap, name, partitions=partitions, config={"max.message.bytes": MAX_MESSAGE})
    return name


def _produce(bootstrap: str, topic: str, partitions: int, per_partition: int, size: int) -> int:
    """``per_partition`` records of ``size`` random bytes in each partition; the expected sum
    of crc32(value) (Spark's crc32 is zlib's)."""
    rnd = random.Random(size + per_partition)
    values = [rnd.randbytes(size) for _ in range(7)]
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "message.max.bytes": MAX_MESSAGE}
    )
    crc = 0
    for p in range(partitions):
        for i in range(per_partition):
            value = values[(p * 3 + i) % len(values)]
            crc += zlib.crc32(value)
            while True:
                try:
                    producer.produce(topic, value, partition=p)
                    break
                except BufferError:
                    producer.poll(0.05)
    assert producer.flush(120) == 0
    return crc


def _summary(df: Any) -> tuple[int, int, int]:
    row = df.selectExpr("count(1)", "sum(length(value))", "sum(crc32(value))").collect()[0]
    return int(row[0]), int(row[1] or 0), int(row[2] or 0)


def _tasks(stats_dir: Path, topic: str) -> list[dict[str, Any]]:
    """The read tasks of ``topic``, one entry per task: rows and batches."""
    tasks: dict[str, dict[str, Any]] = defaultdict(dict)
    for path in stats_dir.glob("tasks-*.jsonl"):
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            if entry.get("role") is None and entry.get("topic") == topic:
                tasks[entry["task"]].update(
                    rows=entry["task_rows"], batches=entry["batches"], ranges=entry["ranges"]
                )
    return list(tasks.values())


def _assert_within_budget(tasks: list[dict[str, Any]], size: int, budget: int) -> None:
    """Every task's mean batch holds at most the budget plus one record."""
    assert tasks, "no task statistics were recorded"
    for task in tasks:
        assert task["rows"] * size <= task["batches"] * (budget + size), task


def test_1mb_records_are_read_exactly_in_batches_within_the_budget(
    reader: Any, kafka_bootstrap: str, task_stats_dir: Path
) -> None:
    topic = _topic(kafka_bootstrap, 2)
    crc = _produce(kafka_bootstrap, topic, 2, 48, MB)
    df = reader(subscribe=topic).load()
    assert _summary(df) == (96, 96 * MB, crc)
    tasks = _tasks(task_stats_dir, topic)
    _assert_within_budget(tasks, MB, BUDGET)
    # The bound really cut: 48 MB per task cannot fit fewer than three 16 MB batches.
    assert all(t["batches"] >= 3 for t in tasks), tasks


def test_8mb_records_alone_in_their_batches_when_larger_than_the_budget(
    reader: Any, kafka_bootstrap: str, task_stats_dir: Path
) -> None:
    topic = _topic(kafka_bootstrap, 1)
    size = 8 * MB
    crc = _produce(kafka_bootstrap, topic, 1, 6, size)
    assert _summary(reader(subscribe=topic).load()) == (6, 6 * size, crc)
    _assert_within_budget(_tasks(task_stats_dir, topic), size, BUDGET)
    # A budget smaller than one record: each record comes alone, none is split or stalls.
    small = _topic(kafka_bootstrap, 1)
    crc = _produce(kafka_bootstrap, small, 1, 6, size)
    assert _summary(reader(subscribe=small, maxBatchBytes="1m").load()) == (6, 6 * size, crc)
    (task,) = _tasks(task_stats_dir, small)
    assert task["batches"] == task["rows"] == 6


def test_a_packed_task_over_100_partitions_of_100kb_records(
    reader: Any, kafka_bootstrap: str, task_stats_dir: Path
) -> None:
    topic = _topic(kafka_bootstrap, 100)
    size = 100 * 1024
    crc = _produce(kafka_bootstrap, topic, 100, 10, size)
    assert _summary(reader(subscribe=topic).load()) == (1000, 1000 * size, crc)
    tasks = _tasks(task_stats_dir, topic)
    assert max(t["ranges"] for t in tasks) > 1, "the ranges were not packed"
    _assert_within_budget(tasks, size, BUDGET)


def test_a_stream_of_1mb_records_with_max_offsets_per_trigger_restarts_exactly(
    reader: Any, kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = _topic(kafka_bootstrap, 2)
    crc = _produce(kafka_bootstrap, topic, 2, 15, MB)
    batches: list[tuple[int, int, int]] = []

    def each(df: Any, _batch_id: int) -> None:
        batches.append(_summary(df))

    def run() -> None:
        query = (
            reader(
                stream=True, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="8"
            )
            .load()
            .writeStream.foreachBatch(each)
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(300)
        assert query.exception() is None

    run()
    crc += _produce(kafka_bootstrap, topic, 2, 5, MB)  # more, then a restart from the checkpoint
    run()
    assert all(n <= 8 for n, _, _ in batches), batches
    assert tuple(map(sum, zip(*batches, strict=True))) == (40, 40 * MB, crc)


def test_a_write_of_1mb_values_is_exact(spark: Any, kafka_bootstrap: str) -> None:
    from pyspark.sql import functions as F

    topic = _topic(kafka_bootstrap, 2)
    size, rows = 1_000_000, 200
    df = spark.range(0, rows, 1, 2).select(
        F.expr(f"cast(repeat(lpad(cast(id as string), 10, '0'), {size // 10}) as binary)").alias(
            "value"
        )
    )
    (
        df.write.format("kafka_direct")
        .mode("append")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("topic", topic)
        # librdkafka's (like Java's max.request.size) default refuses records over ~1 MB.
        .option("kafka.message.max.bytes", MAX_MESSAGE)
        .save()
    )
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": f"check-{topic}",
            "enable.partition.eof": True,
            "fetch.message.max.bytes": MAX_MESSAGE,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(2)])
    seen: list[bytes] = []
    ended: set[int] = set()
    try:
        while len(ended) < 2:
            for message in consumer.consume(50, 5.0):
                if message.error() is None:
                    seen.append(message.value())
                    ended.discard(message.partition())
                elif message.error().code() == -191:  # _PARTITION_EOF
                    ended.add(message.partition())
                else:
                    raise AssertionError(message.error())
    finally:
        consumer.close()
    expected = [str(i).zfill(10).encode() * (size // 10) for i in range(rows)]
    assert sorted(seen) == expected
