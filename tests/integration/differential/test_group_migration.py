"""The DStream API's consumer group: offsets committed by Java's KafkaConsumer (the client under
Spark's spark-streaming-kafka-0-10, which commits with ``commitAsync``) are where
``KafkaUtils.createDirectStream`` starts, and what it commits is what a Java consumer of the
same group sees. The Java client runs in Spark's own JVM, through py4j."""

from __future__ import annotations

from typing import Any

from tests.integration.differential.both import Sent, new_name, produce
from tests.integration.test_direct_stream import Sink, direct_stream, wait_until

from kafka_direct.testing.broker import create_topic

BYTES = "org.apache.kafka.common.serialization.ByteArrayDeserializer"


def java_consumer(spark: Any, bootstrap: str, group: str) -> Any:
    jvm = spark.sparkContext._jvm
    props = jvm.java.util.Properties()
    for key, value in {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": "false",
        "key.deserializer": BYTES,
        "value.deserializer": BYTES,
    }.items():
        props.put(key, value)
    return jvm.org.apache.kafka.clients.consumer.KafkaConsumer(props)


def java_commit(
    spark: Any, bootstrap: str, group: str, offsets: dict[tuple[str, int], int]
) -> None:
    jvm = spark.sparkContext._jvm
    consumer = java_consumer(spark, bootstrap, group)
    try:
        java_offsets = jvm.java.util.HashMap()
        for (topic, partition), offset in offsets.items():
            java_offsets.put(
                jvm.org.apache.kafka.common.TopicPartition(topic, partition),
                jvm.org.apache.kafka.clients.consumer.OffsetAndMetadata(offset),
            )
        consumer.commitSync(java_offsets)
    finally:
        consumer.close()


def java_committed(
    spark: Any, bootstrap: str, group: str, topic: str, partitions: int
) -> list[int]:
    jvm = spark.sparkContext._jvm
    consumer = java_consumer(spark, bootstrap, group)
    try:
        tps = jvm.java.util.HashSet()
        for p in range(partitions):
            tps.add(jvm.org.apache.kafka.common.TopicPartition(topic, p))
        committed = consumer.committed(tps)
        return [
            committed.get(jvm.org.apache.kafka.common.TopicPartition(topic, p)).offset()
            for p in range(partitions)
        ]
    finally:
        consumer.close()


def test_direct_stream_resumes_where_a_java_consumer_group_committed(
    spark: Any, kafka_bootstrap: str
) -> None:
    topic = new_name("diff-group")
    group = new_name("diff-group-id")
    create_topic(kafka_bootstrap, topic, partitions=2)
    produce(
        kafka_bootstrap,
        topic,
        [Sent(p, f"k{i}".encode(), f"{p}|{i}".encode()) for p in (0, 1) for i in range(12)],
    )
    java_commit(spark, kafka_bootstrap, group, {(topic, 0): 5, (topic, 1): 9})

    sink = Sink()
    stream = direct_stream(spark, kafka_bootstrap, [topic], group, sink)
    stream.start()
    wait_until(stream, lambda: len(sink.rows) >= 10, "the 10 records after the Java commits")
    stream.stop(graceful=True)

    read = sorted((p, o) for _t, p, o, _v in sink.rows)
    assert read == [(0, o) for o in range(5, 12)] + [(1, o) for o in range(9, 12)]
    assert java_committed(spark, kafka_bootstrap, group, topic, 2) == [12, 12]
