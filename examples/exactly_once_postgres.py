"""Exactly-once word counts in PostgreSQL: results and offsets in one transaction.

    python examples/exactly_once_postgres.py [--bootstrap-servers HOST:9092]
        [--dsn postgresql://postgres@127.0.0.1:5432/test] [--topic words] [--seconds 20]

The stream starts from the offsets stored in PostgreSQL (not from a checkpoint), and every
micro-batch adds its word counts and advances the stored offsets in ONE database transaction.
A batch that was already applied (a replay after a crash) is skipped; a concurrent writer gets
an OffsetConflictError. Kill it at any moment and run it again: the counts stay exact.
Without --bootstrap-servers it starts an embedded broker and a sample producer.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
from typing import Any

from pyspark.sql import functions as F

from kafka_direct.stores import SqlOffsetStore, exactly_once_foreach_batch, starting_offsets_json
from kafka_direct.testing.broker import create_topic
from kafka_direct.testing.demo import bootstrap_or_embedded
from kafka_direct.testing.local import local_spark

GROUP = "exactly-once-wordcount"


def add_counts(batch: Any, batch_id: int, cur: Any) -> None:
    """Add this batch's word counts inside the store's transaction (never commit here)."""
    rows = (
        batch.select(F.explode(F.split(F.col("value").cast("string"), " ")).alias("word"))
        .where(F.col("word") != "")
        .groupBy("word")
        .count()
        .collect()
    )
    cur.executemany(
        "INSERT INTO word_counts (word, n) VALUES (%s, %s) "
        "ON CONFLICT (word) DO UPDATE SET n = word_counts.n + excluded.n",
        [(r["word"], int(r["count"])) for r in rows],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap-servers", help="a real cluster (default: embedded broker)")
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--topic", default="words")
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args(argv)
    store = SqlOffsetStore.postgres(args.dsn)
    with store.session() as session:
        session.cursor.execute(
            "CREATE TABLE IF NOT EXISTS word_counts (word TEXT PRIMARY KEY, n BIGINT NOT NULL)"
        )
    with bootstrap_or_embedded(args.bootstrap_servers) as bootstrap:
        if not args.bootstrap_servers:
            create_topic(bootstrap, args.topic, partitions=2)
            threading.Thread(target=_feed, args=(bootstrap, args.topic), daemon=True).start()
        spark = local_spark("ExactlyOnceWordCount")
        start = starting_offsets_json(
            store, GROUP, [args.topic], kafka_config={"bootstrap.servers": bootstrap}
        )
        print(f"Resuming from the stored offsets: {start}")
        lines = (
            spark.readStream.format("kafka_direct")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", args.topic)
            .option("startingOffsets", start)
            .load()
        )
        # A fresh checkpoint every run: the database, not the checkpoint, is the source of truth.
        with tempfile.TemporaryDirectory() as checkpoint:
            query = (
                lines.writeStream.foreachBatch(exactly_once_foreach_batch(store, GROUP, add_counts))
                .option("checkpointLocation", checkpoint)
                .trigger(processingTime="2 seconds")
                .start()
            )
            query.awaitTermination(args.seconds)
            query.stop()
        spark.stop()
    with store.session(write=False) as session:
        session.cursor.execute("SELECT word, n FROM word_counts ORDER BY n DESC LIMIT 5")
        print("Top words:", session.cursor.fetchall())
    store.close()
    return 0


def _feed(bootstrap: str, topic: str) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(2000):
        producer.produce(topic, value=f"exactly once {'kafka ' * (i % 3)}".encode())
        producer.poll(0)
    producer.flush(10)
    # The embedded broker reports a partition's end as the start of its last record batch
    # (docs/limits.md); a last record alone in its batch makes the end exact. Real Kafka
    # needs no such step.
    for partition in (0, 1):
        producer.produce(topic, value=b"exactly once", partition=partition)
        producer.flush(10)


if __name__ == "__main__":
    sys.exit(main())
