"""The Kafka sink's batch write (``df.write.format("kafka_direct")``) against the real broker and
a real local Spark: exact output read back with a plain consumer, Java-compatible placement of
keys, and every refusal's message.

``read_topic`` is shared with the other test_sink_* modules.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from kafka_direct.producer.partitioning import murmur2_partition

HEADERS = "array<struct<key:string,value:binary>>"


def read_topic(bootstrap: str, topic: str, expected: int, quiet_s: float = 1.0) -> list[Any]:
    """Every record of ``topic`` as (partition, key, value, headers): read from offset 0 until
    ``expected`` records came and then nothing more for ``quiet_s`` (so a duplicate would show).

    Counting, not the watermark: the embedded broker's watermark lags a batch (BROKER.md)."""
    partitions = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "sink-tests-reader"})
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions.topics[topic].partitions])
    got: list[Any] = []
    deadline = time.monotonic() + 60
    last_new = time.monotonic()
    while time.monotonic() < deadline:
        batch = [m for m in consumer.consume(10_000, 0.2) if m.error() is None]
        if batch:
            got += batch
            last_new = time.monotonic()
        elif len(got) >= expected and time.monotonic() - last_new >= quiet_s:
            break
    consumer.close()
    return [(m.partition(), m.key(), m.value(), m.headers()) for m in got]


def writer(df: Any, bootstrap: str, **options: str) -> Any:
    w = df.write.format("kafka_direct").mode("append").option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        w = w.option(key, value)
    return w


@pytest.mark.tansu_smoke
def test_known_rows_are_written_exactly_once_with_their_content(spark, kafka_bootstrap, make_topic):
    a, b = make_topic(partitions=3), make_topic(partitions=2)
    rows = [
        # topic, partition, key, value, headers
        (a, 0, "k0", b"v0", [("h", b"0"), ("empty", None)]),
        (a, 2, "k1", b"v1", None),
        (a, None, "k2", b"v2", []),  # the partitioner places it: murmur2 of the key
        (a, 1, None, b"v3", [("trace", b"\x00\xff")]),
        (a, 2, "k4", None, None),  # a tombstone
        (b, 1, "k5", b"v5", [("h", b"5")]),
        (b, None, "k6", b"v6", None),
    ]
    df = spark.createDataFrame(
        rows, f"topic string, partition int, key string, value binary, headers {HEADERS}"
    )
    writer(df, kafka_bootstrap).save()

    def expected(topic: str, partitions: int) -> list[Any]:
        out = []
        for t, p, k, v, h in rows:
            if t == topic:
                key = None if k is None else k.encode()
                place = murmur2_partition(key, partitions) if p is None and key else p
                out.append((place, key, v, list(h) if h else None))
        return sorted(out, key=repr)

    assert sorted(read_topic(kafka_bootstrap, a, 5), key=repr) == expected(a, 3)
    assert sorted(read_topic(kafka_bootstrap, b, 2), key=repr) == expected(b, 2)


def test_string_columns_and_the_topic_option_winning_over_the_column(
    spark, kafka_bootstrap, make_topic
):
    target = make_topic()
    df = spark.createDataFrame(
        [("elsewhere", "k", "été"), ("elsewhere", None, "plain")],
        "topic string, key string, value string",
    )
    writer(df, kafka_bootstrap, topic=target).save()
    got = read_topic(kafka_bootstrap, target, 2)
    assert sorted(((k, v) for _, k, v, _ in got), key=repr) == [
        (None, b"plain"),
        (b"k", "été".encode()),
    ]


def test_keyed_records_land_on_javas_murmur2_partition(spark, kafka_bootstrap, make_topic):
    topic = make_topic(partitions=4)
    keys = [f"user-{i}" for i in range(400)]
    df = spark.createDataFrame([(k, f"v-{k}") for k in keys], "key string, value string")
    writer(df.repartition(3), kafka_bootstrap, topic=topic).save()
    got = read_topic(kafka_bootstrap, topic, len(keys))
    assert Counter(k for _, k, _, _ in got) == Counter(k.encode() for k in keys)  # exactly once
    wrong = [(k, p) for p, k, _, _ in got if p != murmur2_partition(k, 4)]
    assert wrong == []
    assert len({p for p, *_ in got}) == 4  # and the keys spread over every partition


def test_a_large_write_goes_through_a_bounded_queue(spark, kafka_bootstrap, make_topic):
    topic = make_topic(partitions=2)
    df = spark.range(0, 120_000, numPartitions=2).selectExpr(
        "cast(id as string) as key", "repeat('x', 100) as value"
    )
    # A queue of 1,000 records: the task waits for the broker over and over, and never fails.
    # (linger.ms=1: with so small a queue, each batch would otherwise wait 50 ms for more.)
    small_queue = {"kafka.queue.buffering.max.messages": "1000", "kafka.linger.ms": "1"}
    writer(df, kafka_bootstrap, topic=topic, **small_queue).save()
    got = read_topic(kafka_bootstrap, topic, 120_000)
    assert len(got) == 120_000 and len({k for _, k, _, _ in got}) == 120_000


# -- refusals: every one names what to fix ------------------------------------------------------


def refused(action: Any) -> str:
    with pytest.raises(Exception) as info:  # Spark wraps our error in its own
        action()
    return str(info.value)


def test_overwrite_is_refused_with_sparks_reason(spark, kafka_bootstrap, make_topic):
    df = spark.createDataFrame([("v",)], "value string")
    w = df.write.format("kafka_direct").option("kafka.bootstrap.servers", kafka_bootstrap)
    message = refused(lambda: w.option("topic", make_topic()).mode("overwrite").save())
    assert "Save mode Overwrite not allowed for Kafka" in message
    assert "Use .mode('append')" in message


def test_save_without_a_mode_is_refused_by_pyspark_before_the_sink_runs(spark, kafka_bootstrap):
    # PySpark's Python data sources accept only append and overwrite: the default mode
    # (ErrorIfExists), which Spark's own Kafka sink accepts, fails in Spark itself.
    df = spark.createDataFrame([("v",)], "value string")
    w = df.write.format("kafka_direct").option("kafka.bootstrap.servers", kafka_bootstrap)
    message = refused(lambda: w.option("topic", "never-created").save())
    assert "UNSUPPORTED_DATA_SOURCE_SAVE_MODE" in message
    assert 'cannot be written in the "ErrorIfExists" mode' in message


COLUMN_REFUSALS = [
    ("id bigint", {"topic": "t"}, ["needs a 'value' column (string or binary)", "'id'"]),
    ("value int", {"topic": "t"}, ["Column 'value' has type int", "string or binary"]),
    ("value string, key double", {"topic": "t"}, ["Column 'key' has type double"]),
    (
        "value string, partition bigint",
        {"topic": "t"},
        ["Column 'partition' has type bigint", "int"],
    ),
    ("value string, headers map<string,string>", {"topic": "t"}, ["Column 'headers' has type map"]),
    ("value string, topic int", {}, ["Column 'topic' has type int", "from string"]),
    ("value string", {}, ["Invalid option 'topic'", "Set .option('topic', 'name')"]),
]


@pytest.mark.parametrize(
    ("schema", "options", "phrases"), COLUMN_REFUSALS, ids=[c[0] for c in COLUMN_REFUSALS]
)
def test_a_column_the_sink_cannot_write_is_refused_before_the_write(
    spark, kafka_bootstrap, schema, options, phrases
):
    df = spark.createDataFrame([], schema)
    message = refused(lambda: writer(df, kafka_bootstrap, **options).save())
    assert "Failed to initialize Python data source writer" in message  # before any task
    for phrase in phrases:
        assert phrase in message


def test_a_null_topic_with_no_topic_option_names_the_option(spark, kafka_bootstrap, make_topic):
    df = spark.createDataFrame([(make_topic(), "a"), (None, "b")], "topic string, value string")
    message = refused(lambda: writer(df.coalesce(1), kafka_bootstrap).save())
    assert "Invalid option 'topic'" in message and "has a null topic" in message


OPTION_REFUSALS = [
    ({"kafka.key.serializer": "x"}, ["'kafka.key.serializer'", "the sink manages it"]),
    ({"kafka.transactional.id": "tx"}, ["'kafka.transactional.id'", "'deliveryGuarantee'"]),
    ({"kafka.acks": "0"}, ["'kafka.acks'", "at-least-once"]),
    ({"kafka.linger.ms": "soon"}, ["'kafka.linger.ms'", "librdkafka refused it"]),
    ({"kafka.no.such.setting": "1"}, ["'kafka.no.such.setting'", "No such configuration property"]),
    ({"topics": "t"}, ["Did you mean 'topic'?"]),
]


@pytest.mark.parametrize(
    ("options", "phrases"), OPTION_REFUSALS, ids=[next(iter(o)) for o, _ in OPTION_REFUSALS]
)
def test_a_refused_option_fails_before_the_write(spark, kafka_bootstrap, options, phrases):
    df = spark.createDataFrame([("v",)], "value string")
    message = refused(lambda: writer(df, kafka_bootstrap, topic="t", **options).save())
    for phrase in phrases:
        assert phrase in message


def test_a_secret_never_reaches_the_message(spark, kafka_bootstrap):
    df = spark.createDataFrame([("v",)], "value string")
    options = {"kafka.sasl.password": "hunter2", "kafka.linger.ms": "soon", "topic": "t"}
    message = refused(lambda: writer(df, kafka_bootstrap, **options).save())
    assert "hunter2" not in message and "'kafka.linger.ms'" in message


def test_other_columns_are_ignored_with_one_warning_naming_them(
    spark, kafka_bootstrap, make_topic, worker_log: Path
):
    topic = make_topic()
    df = spark.createDataFrame([("a", "typo", 1)], "value string, vaule string, n int")
    writer(df, kafka_bootstrap, topic=topic).save()
    assert [v for _, _, v, _ in read_topic(kafka_bootstrap, topic, 1)] == [b"a"]
    deadline = time.monotonic() + 10
    while "ignores column(s) 'vaule', 'n'" not in worker_log.read_text():
        assert time.monotonic() < deadline, worker_log.read_text()[-2000:]
        time.sleep(0.2)
