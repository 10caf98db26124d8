"""Filter pushdown on the test broker (real Kafka) and a real local Spark: exact output, and the
rows the read tasks actually read (their statistics, KAFKA_DIRECT_STATS_DIR).

Spark offers filters to Python data sources only with ``spark.sql.python.filterPushdown.enabled``
(false by default); the ``pushdown`` fixture switches it on for a test and back afterwards.

Timestamp narrowing against the broker's own lookups is checked in
test_real_kafka_behaviour.py and by the benchmark below; librdkafka's mock cluster answers -1
to every lookup, which is right only past the last record, and the mock test below checks that
case. The rules themselves are unit-tested in tests/unit/planning/test_pushdown*.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from kafka_direct import KafkaUtils, OffsetRange
from kafka_direct.kafka.offset_reader import AdminOffsetReader
from kafka_direct.testing import MockCluster
from tests.integration.kafka_helpers import Record, new_topic_name, produce_known

CONF = "spark.sql.python.filterPushdown.enabled"
BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "pushdown.py"


@pytest.fixture()
def pushdown(spark: Any) -> Iterator[Any]:
    previous = spark.conf.get(CONF)
    spark.conf.set(CONF, "true")
    yield spark
    spark.conf.set(CONF, previous)


@pytest.fixture()
def four_partitions(make_topic, kafka_bootstrap) -> tuple[str, list[Record]]:
    topic = make_topic(partitions=4)
    return topic, produce_known(kafka_bootstrap, topic, per_partition=30, partitions=4)


def keys(df: Any) -> list[tuple[int, int]]:
    return sorted((r["partition"], r["offset"]) for r in df.select("partition", "offset").collect())


def tasks_read(stats_dir: Path, topic: str, since: float) -> dict[tuple[int, int, int], int]:
    """Rows read per task range ``(partition, from, until)`` of ``topic`` since ``since``."""
    out: dict[tuple[int, int, int], int] = {}
    for path in stats_dir.glob("tasks-*.jsonl"):
        for line in path.read_text().splitlines():
            task = json.loads(line)
            if task["topic"] == topic and task["start"] >= since:
                key = (task["partition"], task["from"], task["until"])
                out[key] = out.get(key, 0) + task["rows"]
    return out


@pytest.mark.parametrize(
    ("where", "partitions"),
    [
        ("partition = 2", [2]),
        ("partition IN (0, 3)", [0, 3]),
        ("partition > 1 AND partition <= 2", [2]),
        ("NOT (partition = 1) AND partition IS NOT NULL", [0, 2, 3]),
    ],
)
def test_partition_filters_read_only_the_partitions_they_keep(
    pushdown, reader, four_partitions, task_stats_dir, where, partitions
) -> None:
    topic, produced = four_partitions
    since = time.time()
    got = keys(reader(subscribe=topic).load().where(where))
    assert got == [(r.partition, r.offset) for r in produced if r.partition in partitions]
    assert tasks_read(task_stats_dir, topic, since) == {(p, 0, 30): 30 for p in partitions}


def test_topic_filters_narrow_a_pattern_subscription(
    pushdown, reader, make_topic, kafka_bootstrap, task_stats_dir
) -> None:
    prefix = new_topic_name("pat")
    first, second = make_topic(prefix=f"{prefix}a"), make_topic(prefix=f"{prefix}b")
    for topic in (first, second):
        produce_known(kafka_bootstrap, topic, per_partition=5)
    df = reader(subscribePattern=f"{prefix}.*").load()
    for where, kept, skipped in (
        (f"topic = '{first}'", first, second),
        (f"topic LIKE '{prefix}b%'", second, first),  # Spark pushes it as StringStartsWith
    ):
        since = time.time()
        assert {r["topic"] for r in df.where(where).select("topic").collect()} == {kept}
        assert tasks_read(task_stats_dir, kept, since) == {(0, 0, 5): 5}
        assert tasks_read(task_stats_dir, skipped, since) == {}


def test_offset_filters_clamp_every_range_and_the_narrower_bound_wins(
    pushdown, reader, four_partitions, task_stats_dir
) -> None:
    topic, _ = four_partitions
    since = time.time()
    df = reader(
        subscribe=topic,
        startingOffsets=json.dumps({topic: {"0": 12, "1": 0, "2": 0, "3": 0}}),
        endingOffsets=json.dumps({topic: {"0": 30, "1": 15, "2": 30, "3": 30}}),
    ).load()
    got = keys(df.where("offset >= 10 AND offset < 20 AND partition < 2"))
    assert got == [(0, o) for o in range(12, 20)] + [(1, o) for o in range(10, 15)]
    assert tasks_read(task_stats_dir, topic, since) == {(0, 12, 20): 8, (1, 10, 15): 5}


def test_offset_in_reads_the_span_of_its_values_and_spark_keeps_only_them(
    pushdown, reader, four_partitions, task_stats_dir
) -> None:
    topic, _ = four_partitions
    since = time.time()
    got = keys(reader(subscribe=topic).load().where("partition = 3 AND offset IN (4, 9, 6)"))
    assert got == [(3, 4), (3, 6), (3, 9)]
    assert tasks_read(task_stats_dir, topic, since) == {(3, 4, 10): 6}


def test_explain_shows_the_filters_the_source_handles(pushdown, reader, four_partitions, capsys):
    topic, _ = four_partitions
    df = reader(subscribe=topic).load()
    df.where("partition = 1 AND offset > 3 AND timestamp >= '2023-01-01'").explain("formatted")
    plan = capsys.readouterr().out
    pushed = next(line for line in plan.splitlines() if line.startswith("PushedFilters:"))
    assert "EqualTo(partition,1)" in pushed
    assert "GreaterThan(offset,3)" in pushed
    # A timestamp bound narrows the read but is never handled: Spark applies it too.
    assert "IsNotNull(timestamp)" in pushed  # never null: exact whatever the data
    assert "GreaterThanOrEqual(timestamp" not in pushed
    assert "timestamp#" in plan.split("PushedFilters:")[1]


def test_pushdown_enabled_false_reads_everything_and_returns_the_same_rows(
    pushdown, reader, four_partitions, task_stats_dir
) -> None:
    topic, _ = four_partitions
    where = "partition = 2 AND offset >= 25"
    pushed = keys(reader(subscribe=topic).load().where(where))
    since = time.time()
    plain = keys(reader(subscribe=topic, **{"pushdown.enabled": "false"}).load().where(where))
    assert plain == pushed == [(2, o) for o in range(25, 30)]
    assert sum(tasks_read(task_stats_dir, topic, since).values()) == 120


def test_regression_reads_work_while_spark_offers_no_filters(
    spark, reader, four_partitions, task_stats_dir
) -> None:
    # PySpark refuses every read of a reader that overrides pushFilters while
    # spark.sql.python.filterPushdown.enabled is false (DATA_SOURCE_PUSHDOWN_DISABLED).
    previous = spark.conf.get(CONF)
    spark.conf.set(CONF, "false")
    try:
        topic, _ = four_partitions
        since = time.time()
        assert keys(reader(subscribe=topic).load().where("partition = 2 AND offset < 2")) == [
            (2, 0),
            (2, 1),
        ]
        assert reader(subscribe=topic).load().count() == 120
    finally:
        spark.conf.set(CONF, previous)
    assert sum(tasks_read(task_stats_dir, topic, since).values()) == 240


def test_create_rdd_ranges_are_narrowed_without_an_admin_request(
    pushdown, four_partitions, kafka_bootstrap, task_stats_dir
) -> None:
    topic, _ = four_partitions
    ranges = [OffsetRange(topic, p, 5, 25) for p in range(4)]
    since = time.time()
    df = KafkaUtils.createRDD(pushdown, {"bootstrap.servers": kafka_bootstrap}, ranges)
    assert keys(df.where("partition IN (1, 2) AND offset < 8")) == [
        (p, o) for p in (1, 2) for o in (5, 6, 7)
    ]
    assert tasks_read(task_stats_dir, topic, since) == {(1, 5, 8): 3, (2, 5, 8): 3}


def test_timestamp_types_come_from_the_topic_config(make_topic, kafka_bootstrap) -> None:
    appended = make_topic(config={"message.timestamp.type": "LogAppendTime"})
    created = make_topic()
    reader = AdminOffsetReader({"bootstrap.servers": kafka_bootstrap})
    try:
        assert reader.timestamp_types([appended, created]) == {
            appended: "LogAppendTime",
            created: "CreateTime",
        }
    finally:
        reader.close()


# --- librdkafka's mock cluster ----------------------------------------------------------------


def test_mock_cluster_answers_minus_one_to_every_timestamp_lookup() -> None:
    # Why timestamp narrowing is not checked on the mock: its ListOffsets handler has
    # "FIXME: by timestamp", so even a bound before the first record finds "no record".
    with MockCluster(brokers=1) as cluster:
        cluster.create_topic("stamped")
        _produce_stamped(cluster.bootstrap_servers, "stamped", [1_000, 2_000, 3_000])
        reader = AdminOffsetReader({"bootstrap.servers": cluster.bootstrap_servers})
        try:
            tp = next(iter(reader.partitions(_subscription("stamped"))))
            assert reader.for_timestamps({tp: 0}) == {tp: -1}  # Kafka: 0
            assert reader.for_timestamps({tp: 2_000}) == {tp: -1}  # Kafka: 1
            assert reader.for_timestamps({tp: 9_000}) == {tp: -1}  # Kafka: -1
        finally:
            reader.close()


def test_a_bound_after_the_last_record_reads_nothing_on_the_mock_cluster(
    pushdown, task_stats_dir
) -> None:
    # The one lookup the mock answers as Kafka does: no record at or after the bound.
    with MockCluster(brokers=1) as cluster:
        cluster.create_topic("stamped", partitions=2)
        for p in range(2):
            _produce_stamped(cluster.bootstrap_servers, "stamped", [1_000, 2_000], partition=p)

        def frame(pushdown_enabled: str) -> Any:
            return (
                pushdown.read.format("kafka_direct")
                .option("kafka.bootstrap.servers", cluster.bootstrap_servers)
                .option("subscribe", "stamped")
                .option("pushdown.enabled", pushdown_enabled)
                .load()
            )

        where = "timestamp >= '1970-01-01 00:00:09'"
        since = time.time()
        assert keys(frame("true").where(where)) == []
        assert tasks_read(task_stats_dir, "stamped", since) == {}  # no task read anything
        since = time.time()
        assert keys(frame("false").where(where)) == []
        assert sum(tasks_read(task_stats_dir, "stamped", since).values()) == 4


def _subscription(topic: str) -> Any:
    from kafka_direct.config.kafka import Subscription

    return Subscription("subscribe", topics=(topic,))


def _produce_stamped(bootstrap: str, topic: str, stamps: list[int], partition: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for stamp in stamps:
        producer.produce(topic, b"x", partition=partition, timestamp=stamp)
    assert producer.flush(30) == 0


# --- the benchmark ----------------------------------------------------------------------------


@pytest.mark.slow
def test_pushdown_benchmark_reads_what_pushdown_plans(kafka_bootstrap, tmp_path) -> None:
    # The command a user runs, small, so that it cannot rot. Only rows are checked, never speed.
    out = tmp_path / "pushdown.json"
    done = subprocess.run(
        [
            *(sys.executable, str(BENCHMARK), "--records", "20000", "--rounds", "1"),
            *("--bootstrap-servers", kafka_bootstrap, "--json", str(out)),
        ],
        capture_output=True,
        text=True,
        timeout=900,  # a hang guard only
    )
    assert done.returncode == 0, done.stderr[-3000:]
    read = {r["case"]: (r["rows"], r["rows_read"]) for r in json.loads(out.read_text())["summary"]}
    assert read == {
        "partition, no pushdown": (2_000, 20_000),
        "partition, pushdown": (2_000, 2_000),
        "timestamp, no pushdown": (200, 20_000),
        # The broker's own timestamp lookup narrows the read to the 1% kept.
        "timestamp, pushdown": (200, 200),
    }
