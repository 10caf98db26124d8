"""The sink: the same DataFrame written by format("kafka") and format("kafka_direct") to two
topics with the same partition count. Every keyed record lands in the same partition (Java's
murmur2, computed by the real Java client on one side), with the same value and headers; null
keys and values survive; the ``topic`` option wins over the ``topic`` column on both."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from tests.integration.differential.both import JVM, OURS, new_name, reader, to_rows

from kafka_direct.testing.broker import create_topic

ROWS = 300
PARTITIONS = 5


def source_frame(spark: Any, topic_column: str | None = None) -> Any:
    """Keys (every 10th null), values (every 7th null, every 11th empty), headers on some."""
    rows = []
    for i in range(ROWS):
        key = None if i % 10 == 3 else f"key-{i}".encode()
        value = None if i % 7 == 2 else (b"" if i % 11 == 5 else f"value-{i}".encode())
        headers = (
            None
            if i % 4 == 0
            else [("h", f"{i}".encode()), ("n", None)]
            if i % 4 == 1
            else []
            if i % 4 == 2
            else [("e", b""), ("h", b"x")]
        )
        rows.append((key, value, headers) + ((topic_column,) if topic_column else ()))
    schema = "key binary, value binary, headers array<struct<key: string, value: binary>>"
    if topic_column:
        schema += ", topic string"
    return spark.createDataFrame(rows, schema).repartition(2)


def written(spark: Any, bootstrap: str, topic: str) -> list[tuple[Any, ...]]:
    """(key, value, partition, headers) of every record of ``topic``, read by the JVM."""
    df = reader(spark, JVM, bootstrap, {"subscribe": topic, "includeHeaders": "true"}).load()
    return [(r[0], r[1], r[3], r[7]) for r in to_rows(df)]


def write(df: Any, fmt: str, bootstrap: str, topic: str | None) -> None:
    w = df.write.format(fmt).mode("append").option("kafka.bootstrap.servers", bootstrap)
    if topic is not None:
        w = w.option("topic", topic)
    w.save()


def test_same_partition_value_and_headers_for_every_record(
    spark: Any, kafka_bootstrap: str
) -> None:
    topics = {fmt: new_name(f"diff-sink-{fmt.replace('_', '')}") for fmt in (JVM, OURS)}
    for fmt, topic in topics.items():
        create_topic(kafka_bootstrap, topic, partitions=PARTITIONS)
        write(source_frame(spark), fmt, kafka_bootstrap, topic)
    jvm = written(spark, kafka_bootstrap, topics[JVM])
    ours = written(spark, kafka_bootstrap, topics[OURS])
    assert len(jvm) == len(ours) == ROWS
    keyed_jvm = sorted(r for r in jvm if r[0] is not None)
    keyed_ours = sorted(r for r in ours if r[0] is not None)
    assert keyed_ours == keyed_jvm  # key, value, partition and headers of every keyed record
    assert len({r[2] for r in keyed_jvm}) == PARTITIONS
    # Null keys: Java's sticky partitioner picks a partition at random; compare the rest.
    unkeyed = [Counter((r[1], r[3]) for r in rows if r[0] is None) for rows in (jvm, ours)]
    assert unkeyed[0] == unkeyed[1]
    assert sum(unkeyed[0].values()) == ROWS // 10


@pytest.mark.parametrize("fmt", [JVM, OURS])
def test_topic_option_wins_over_topic_column(fmt: str, spark: Any, kafka_bootstrap: str) -> None:
    column_topic = new_name("diff-sink-column")
    option_topic = new_name("diff-sink-option")
    for topic in (column_topic, option_topic):
        create_topic(kafka_bootstrap, topic, partitions=2)
    write(source_frame(spark, topic_column=column_topic), fmt, kafka_bootstrap, option_topic)
    assert len(written(spark, kafka_bootstrap, option_topic)) == ROWS
    assert written(spark, kafka_bootstrap, column_topic) == []


@pytest.mark.parametrize("fmt", [JVM, OURS])
def test_topic_column_alone(fmt: str, spark: Any, kafka_bootstrap: str) -> None:
    topic = new_name("diff-sink-column-only")
    create_topic(kafka_bootstrap, topic, partitions=2)
    write(source_frame(spark, topic_column=topic), fmt, kafka_bootstrap, None)
    assert len(written(spark, kafka_bootstrap, topic)) == ROWS


SINK_REFUSE = {
    "no topic at all": ({}, False),
    "kafka.key.serializer": ({"kafka.key.serializer": "x"}, True),
    "kafka.value.serializer": ({"kafka.value.serializer": "x"}, True),
}


@pytest.mark.parametrize("case", list(SINK_REFUSE))
def test_sink_refuses_alike(case: str, spark: Any, kafka_bootstrap: str) -> None:
    from tests.integration.differential.both import error_of

    options, with_topic = SINK_REFUSE[case]
    topic = new_name("diff-sink-refused")
    create_topic(kafka_bootstrap, topic, partitions=1)
    outcomes = {}
    for fmt in (JVM, OURS):
        w = source_frame(spark).write.format(fmt).mode("append")
        w = w.option("kafka.bootstrap.servers", kafka_bootstrap)
        if with_topic:
            w = w.option("topic", topic)
        for k, v in options.items():
            w = w.option(k, v)
        outcomes[fmt] = error_of(w.save)
    print(f"{case}: {outcomes}")
    assert outcomes[JVM] is not None and outcomes[OURS] is not None, outcomes


def test_column_names_match_exactly_and_java_producer_settings_carry_over(
    spark: Any, kafka_bootstrap: str
) -> None:
    """A column 'Key' is not the key for Spark's sink (names compared with ==), nor for ours;
    a 'Partition' of type bigint is ignored, not refused. And a job's Java producer settings
    (acks=1 with idempotence left to its default, Java names librdkafka spells otherwise) write
    the same records."""
    rows = [(f"k{i}", f"v{i}".encode(), 7 * i) for i in range(40)]
    frame = spark.createDataFrame(rows, "Key string, value binary, Partition bigint")
    java_settings = {
        "kafka.acks": "1",
        "kafka.max.request.size": "2097152",
        "kafka.buffer.memory": "33554432",
        "kafka.max.block.ms": "60000",
    }
    topics = {fmt: new_name(f"diff-sink-case-{fmt.replace('_', '')}") for fmt in (JVM, OURS)}
    for fmt, topic in topics.items():
        create_topic(kafka_bootstrap, topic, partitions=3)
        w = (
            frame.write.format(fmt)
            .mode("append")
            .option("kafka.bootstrap.servers", kafka_bootstrap)
        )
        w.option("topic", topic).options(**java_settings).save()
    got = {fmt: written(spark, kafka_bootstrap, topic) for fmt, topic in topics.items()}
    for fmt in (JVM, OURS):
        assert sorted(r[1] for r in got[fmt]) == sorted(f"v{i}".encode() for i in range(40))
        assert all(r[0] is None for r in got[fmt]), fmt  # no key: 'Key' is not 'key'
