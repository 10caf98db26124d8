"""Kafka to Kafka: read a topic, enrich each record, write another topic, with no JVM jar.

    python examples/kafka_to_kafka.py [--bootstrap-servers HOST:9092] [--source lines]
                                      [--target lines-enriched] [--seconds 20]

The most common Spark + Kafka job, on ``pip install`` alone: ``readStream.format("kafka_direct")``
→ a transformation → ``writeStream.format("kafka_direct")``, with Spark's checkpoint holding the
source offsets. Each line becomes a JSON record keyed by its first word (so one word's records
stay in one partition, where a Java producer would put them too), with a header naming the record
it came from. The sink is at-least-once: a query that crashes and restarts from its checkpoint
may write the last micro-batch again, never lose one.

Without --bootstrap-servers it starts an embedded broker and a sample producer, and prints what
arrived in the target topic at the end; ``kafka-direct consume TARGET --from-beginning
--print-key --print-headers`` shows the same on a real cluster.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from typing import Any

from pyspark.sql import functions as F

from kafka_direct.testing.broker import create_topic
from kafka_direct.testing.demo import bootstrap_or_embedded
from kafka_direct.testing.local import local_spark


def enrich(records: Any) -> Any:
    """The transformation: Kafka records in, the sink's columns (key, value, headers) out."""
    line = F.col("value").cast("string")
    words = F.split(F.trim(line), r"\s+")
    source = F.format_string("%s-%d@%d", "topic", "partition", "offset")
    return records.select(
        F.element_at(words, 1).alias("key"),
        F.to_json(
            F.struct(
                line.alias("line"),
                F.size(words).alias("words"),
                F.upper(line).alias("shout"),
                F.col("timestamp").alias("read_at"),
            )
        ).alias("value"),
        F.array(F.struct(F.lit("source").alias("key"), source.cast("binary").alias("value"))).alias(
            "headers"
        ),
    )


def start_pipeline(
    spark: Any, bootstrap: str, source: str, target: str, checkpoint: str, **trigger: Any
) -> Any:
    """Start the streaming query; ``trigger`` as for ``DataStreamWriter.trigger``."""
    records = (
        spark.readStream.format("kafka_direct")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load()
    )
    return (
        enrich(records)
        .writeStream.format("kafka_direct")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", target)
        .option("checkpointLocation", checkpoint)
        .trigger(**(trigger or {"processingTime": "1 second"}))
        .start()
    )


def _feed(bootstrap: str, topic: str, seconds: float) -> None:
    from confluent_kafka import Producer

    from kafka_direct.testing.samples import WORDS

    producer = Producer({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + seconds
    i = 0
    while time.monotonic() < deadline:
        producer.produce(topic, value=" ".join(WORDS[(i * k) % len(WORDS)] for k in (1, 3, 7)))
        i += 1
        producer.poll(0)
        time.sleep(0.01)
    producer.flush(10)


def _show(bootstrap: str, topic: str, limit: int = 5) -> int:
    """Print the first records of ``topic``; return how many it holds."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kafka-to-kafka-example"})
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    seen = 0
    while True:
        batch = consumer.consume(500, 2.0)
        if not batch:
            break
        for message in batch:
            if message.error() is None:
                if seen < limit:
                    print(f"{message.key()!r} {message.value().decode()} {message.headers()}")
                seen += 1
    consumer.close()
    return seen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap-servers", help="a real cluster (default: embedded broker)")
    parser.add_argument("--source", default="lines")
    parser.add_argument("--target", default="lines-enriched")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long to run")
    args = parser.parse_args(argv)
    with bootstrap_or_embedded(args.bootstrap_servers) as bootstrap:
        if not args.bootstrap_servers:
            create_topic(bootstrap, args.source, partitions=2)
            create_topic(bootstrap, args.target, partitions=2)
            threading.Thread(
                target=_feed, args=(bootstrap, args.source, args.seconds), daemon=True
            ).start()
        spark = local_spark("KafkaToKafka")
        with tempfile.TemporaryDirectory() as checkpoint:
            query = start_pipeline(spark, bootstrap, args.source, args.target, checkpoint)
            query.awaitTermination(timeout=args.seconds)
            query.stop()
        if not args.bootstrap_servers:
            print(f"{_show(bootstrap, args.target)} enriched records in '{args.target}'")
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
