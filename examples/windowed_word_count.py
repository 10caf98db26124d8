"""Windowed word count: Spark's `KafkaWordCount` `reduceByKeyAndWindow`, in Structured Streaming.

    python examples/windowed_word_count.py [--bootstrap-servers HOST:9092] [--seconds 30]

Counts words over 10-minute windows that slide every 2 seconds, with a 1-minute watermark for
late records, reading with the kafka_direct source. Each micro-batch prints the busiest windows.
Without --bootstrap-servers it starts an embedded broker and a sample producer.
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


def windowed_counts(lines: Any) -> Any:
    """10-minute windows sliding every 2 seconds over the records' Kafka timestamps."""
    words = lines.select(
        F.explode(F.split(F.col("value").cast("string"), " ")).alias("word"), "timestamp"
    ).where(F.col("word") != "")
    return (
        words.withWatermark("timestamp", "1 minute")
        .groupBy(F.window("timestamp", "10 minutes", "2 seconds"), "word")
        .count()
    )


def _feed(bootstrap: str, topic: str, seconds: float) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + seconds
    i = 0
    while time.monotonic() < deadline:
        producer.produce(topic, value=f"spark kafka direct {'stream ' * (i % 3)}".encode())
        i += 1
        producer.poll(0)
        time.sleep(0.1)  # 10 lines/s: each record updates 300 sliding windows
    producer.flush(10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap-servers", help="a real cluster (default: embedded broker)")
    parser.add_argument("--topic", default="lines")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long to run")
    args = parser.parse_args(argv)
    with bootstrap_or_embedded(args.bootstrap_servers) as bootstrap:
        if not args.bootstrap_servers:
            create_topic(bootstrap, args.topic, partitions=2)
            threading.Thread(
                target=_feed, args=(bootstrap, args.topic, args.seconds), daemon=True
            ).start()
        spark = local_spark("WindowedWordCount")
        lines = (
            spark.readStream.format("kafka_direct")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", args.topic)
            .load()
        )

        def show(df: Any, batch_id: int) -> None:
            top = df.orderBy(F.desc("count")).limit(5).collect()
            shown = ", ".join(
                f"{r['word']}@{r['window']['start']:%H:%M:%S}={r['count']}" for r in top
            )
            print(f"Batch {batch_id}: {shown or '(nothing yet)'}")

        with tempfile.TemporaryDirectory() as checkpoint:
            query = (
                windowed_counts(lines)
                .writeStream.outputMode("update")
                .foreachBatch(show)
                .trigger(processingTime="2 seconds")
                .option("checkpointLocation", checkpoint)
                .start()
            )
            query.awaitTermination(args.seconds)
            query.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
