"""Packed tasks end to end (kafka_direct.planning.packing): many partitions of several topics
read by few Spark tasks, through the batch source, the stream (with a restart from its
checkpoint) and the DStream API's createRDD, on the real broker and a local Spark. Exact rows
(count and content) every time; the task counts come from Spark's plan and the executors'
task statistics."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from kafka_direct import KafkaUtils, OffsetRange
from tests.integration.kafka_helpers import Record, produce_known
from tests.integration.streams import Collector, expected_keys, start, wait_for

pytestmark = pytest.mark.serial


def tasks_since(stats_dir: Path, topics: set[str], since: float) -> dict[str, set[tuple]]:
    """The executors' tasks since ``since`` that read ``topics``: task id -> its ranges."""
    out: dict[str, set[tuple]] = {}
    for path in stats_dir.glob("tasks-*.jsonl"):
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if rec["topic"] in topics and rec["start"] >= since:
                out.setdefault(rec["task"], set()).add(
                    (rec["topic"], rec["partition"], rec["from"], rec["until"])
                )
    return out


def rows(df: Any) -> list[tuple[str, int, int, bytes | None, bytes]]:
    cols = ("topic", "partition", "offset", "key", "value")
    return sorted(tuple(r) for r in df.select(*cols).collect())  # type: ignore[misc]


def test_a_batch_read_of_two_topics_packs_their_partitions_into_few_tasks(
    make_topic, reader, kafka_bootstrap, task_stats_dir
) -> None:
    a, b = make_topic(partitions=12, prefix="pk-a"), make_topic(partitions=5, prefix="pk-b")
    produced = produce_known(kafka_bootstrap, a, per_partition=21, partitions=12)
    produced += produce_known(kafka_bootstrap, b, per_partition=9, partitions=5)
    since = time.time()
    df = reader(subscribe=f"{a},{b}").load()
    # 17 ranges, local[2]: one task per core.
    assert df.rdd.getNumPartitions() == 2
    assert rows(df) == expected_keys(produced)
    tasks = tasks_since(task_stats_dir, {a, b}, since)
    ranges = [r for t in tasks.values() for r in t]
    # Every range read by exactly one task, per read (getNumPartitions plans, rows reads once).
    assert len(ranges) == len(set(ranges)) == 17
    assert all(len(t) > 1 for t in tasks.values())

    # One task per range, as Spark's connector plans: the same rows.
    one_each = reader(subscribe=f"{a},{b}", maxRecordsPerTask="1").load()
    assert one_each.rdd.getNumPartitions() == 17
    assert rows(one_each) == expected_keys(produced)


def test_min_partitions_and_max_records_per_partition_still_bound_tasks(
    make_topic, reader, kafka_bootstrap
) -> None:
    topic = make_topic(partitions=6, prefix="pk-bounds")
    produced = produce_known(kafka_bootstrap, topic, per_partition=10, partitions=6)
    at_least = reader(subscribe=topic, minPartitions="4").load()
    assert at_least.rdd.getNumPartitions() == 4
    assert rows(at_least) == expected_keys(produced)
    capped = reader(subscribe=topic, maxRecordsPerPartition="25").load()
    # Two tasks (one per core) would hold 30 records each: each is cut at 25, into two
    # ranges and one.
    assert capped.rdd.getNumPartitions() == 4
    assert rows(capped) == expected_keys(produced)


def test_a_stream_of_packed_tasks_restarts_from_its_checkpoint_exactly(
    make_topic, reader, kafka_bootstrap, tmp_path, task_stats_dir
) -> None:
    a, b = make_topic(partitions=8, prefix="pk-sa"), make_topic(partitions=3, prefix="pk-sb")
    first = produce_known(kafka_bootstrap, a, per_partition=15, partitions=8)
    first += produce_known(kafka_bootstrap, b, per_partition=7, partitions=3)
    checkpoint = str(tmp_path / "ck")
    sink = Collector()
    df = reader(stream=True, subscribe=f"{a},{b}", startingOffsets="earliest").load()
    since = time.time()
    query = start(df, sink, checkpoint)
    wait_for(lambda: len(sink.rows) >= len(first), query, what="the first records")
    query.stop()
    assert sink.keys() == expected_keys(first)
    # The first micro-batch read 11 ranges in packed tasks (fewer tasks than ranges).
    tasks = tasks_since(task_stats_dir, {a, b}, since)
    assert 0 < len(tasks) < 11

    second: list[Record] = produce_known(
        kafka_bootstrap, a, per_partition=5, partitions=8, start_index=15
    )
    second += produce_known(kafka_bootstrap, b, per_partition=4, partitions=3, start_index=7)
    query = start(df, sink, checkpoint)
    total = len(first) + len(second)
    wait_for(lambda: len(sink.rows) >= total, query, what="all records after the restart")
    time.sleep(1.5)  # give a wrongly re-read batch the chance to show up
    query.stop()
    assert sink.keys() == expected_keys(first + second)  # no loss, no duplicate
    assert sink.mismatches == []  # a batch Spark re-ran read the same records


def test_create_rdd_packs_the_given_ranges_and_reads_exactly_them(
    spark, kafka_bootstrap, make_topic
) -> None:
    a, b = make_topic(partitions=4, prefix="pk-ra"), make_topic(partitions=2, prefix="pk-rb")
    produced = produce_known(kafka_bootstrap, a, per_partition=20, partitions=4)
    produced += produce_known(kafka_bootstrap, b, per_partition=20, partitions=2)
    ranges = [
        OffsetRange(a, 0, 3, 7),
        OffsetRange(a, 0, 15, 20),  # a second stretch of the same partition
        OffsetRange(a, 1, 0, 20),
        OffsetRange(a, 3, 19, 20),
        OffsetRange(b, 0, 0, 1),
        OffsetRange(b, 1, 5, 15),
    ]
    df = KafkaUtils.createRDD(spark, {"bootstrap.servers": kafka_bootstrap}, ranges)
    assert df.rdd.getNumPartitions() == 2
    wanted = [
        r
        for r in expected_keys(produced)
        if any(
            r[0] == g.topic and r[1] == g.partition and g.from_offset <= r[2] < g.until_offset
            for g in ranges
        )
    ]
    assert len(wanted) == 4 + 5 + 20 + 1 + 1 + 10
    assert rows(df) == wanted
