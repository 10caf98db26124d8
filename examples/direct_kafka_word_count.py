"""Spark's DirectKafkaWordCount with the DStream-style API: 2-second batches, printed per batch.

    python examples/direct_kafka_word_count.py [--bootstrap-servers HOST:9092] [--topics words]
                                               [--group wordcount] [--seconds 20]

`KafkaUtils.createDirectStream` with `PreferConsistent` and `Subscribe`, as in Spark's. Each
batch's word counts (`reduceByKey`) are printed, then the batch's offset ranges are committed to
the consumer group with `commitAsync`. Without --bootstrap-servers it starts an embedded broker
and a sample producer.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import Any

from pyspark.sql import functions as F

from kafka_direct import ConsumerStrategies, KafkaUtils, LocationStrategies, OffsetRange
from kafka_direct.testing.broker import create_topic
from kafka_direct.testing.demo import bootstrap_or_embedded
from kafka_direct.testing.local import local_spark


def count_words(df: Any) -> dict[str, int]:
    """Spark's example: lines.flatMap(_.split(" ")).map(x => (x, 1L)).reduceByKey(_ + _)."""
    words = df.select(F.explode(F.split(F.col("value").cast("string"), " ")).alias("word"))
    rows = words.where(F.col("word") != "").groupBy("word").count().collect()
    return {r["word"]: int(r["count"]) for r in rows}


def _feed(bootstrap: str, topic: str, seconds: float) -> None:
    from confluent_kafka import Producer

    from kafka_direct.testing.samples import WORDS

    producer = Producer({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + seconds
    i = 0
    while time.monotonic() < deadline:
        producer.produce(topic, value=" ".join(WORDS[(i + k) % len(WORDS)] for k in range(3)))
        i += 1
        producer.poll(0)
        time.sleep(0.005)
    producer.flush(10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap-servers", help="a real cluster (default: embedded broker)")
    parser.add_argument("--topics", default="words", help="comma-separated topics")
    parser.add_argument("--group", default="direct-kafka-word-count")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long to run")
    args = parser.parse_args(argv)
    topics = args.topics.split(",")
    with bootstrap_or_embedded(args.bootstrap_servers) as bootstrap:
        if not args.bootstrap_servers:
            create_topic(bootstrap, topics[0], partitions=2)
            threading.Thread(
                target=_feed, args=(bootstrap, topics[0], args.seconds), daemon=True
            ).start()
        spark = local_spark("DirectKafkaWordCount")
        params = {
            "bootstrap.servers": bootstrap,
            "group.id": args.group,
            "auto.offset.reset": "earliest",
        }
        stream = KafkaUtils.createDirectStream(
            spark,
            LocationStrategies.PreferConsistent(),
            ConsumerStrategies.Subscribe(topics, params),
            batchInterval=2.0,
        )

        def handle(df: Any, offset_ranges: list[OffsetRange]) -> None:
            counts = count_words(df)
            top = sorted(counts.items(), key=lambda kv: -kv[1])[:6]
            ranges = ", ".join(
                f"{r.topic}-{r.partition}:[{r.fromOffset},{r.untilOffset})" for r in offset_ranges
            )
            print(f"{sum(counts.values())} words from {ranges or 'no ranges'} | {top}")
            stream.commitAsync(offset_ranges)

        stream.foreachBatch(handle)
        stream.start()
        stream.awaitTermination(timeout=args.seconds)
        stream.stop(graceful=True)
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
