"""A streaming driver for the fault tests that need a Spark driver of their own (a standalone
cluster, whose SparkContext cannot share the test process with the suite's local session).

It reads a topic with kafka_direct and writes every record into SQLite, keyed by
(topic, partition, offset), in one transaction per micro-batch: an idempotent sink. Each delivery
is also appended to ``deliveries`` (no key), so a test can see batches that were replayed.

Run as: python stream_driver.py MASTER_URL BOOTSTRAP TOPIC CHECKPOINT DB
It prints ``STARTED`` once the query runs, and stops the query and exits 0 when a line (or EOF)
arrives on stdin.
"""

from __future__ import annotations

import sqlite3
import sys
import threading
import time
from typing import Any

from kafka_direct.testing.standalone import standalone_session


def main(master_url: str, bootstrap: str, topic: str, checkpoint: str, db: str) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS records (topic TEXT, partition INTEGER, offset INTEGER, "
            "value BLOB, PRIMARY KEY (topic, partition, offset))"
        )
        conn.execute(
            "CREATE TABLE IF NOT EXISTS deliveries (batch INTEGER, partition INTEGER, "
            "offset INTEGER)"
        )

    def sink(df: Any, batch_id: int) -> None:
        rows = [
            (r["topic"], r["partition"], r["offset"], r["value"])
            for r in df.select("topic", "partition", "offset", "value").collect()
        ]
        time.sleep(0.3)  # slow batches, so the fault lands mid-stream
        with sqlite3.connect(db) as conn:
            conn.executemany("INSERT OR REPLACE INTO records VALUES (?, ?, ?, ?)", rows)
            conn.executemany(
                "INSERT INTO deliveries VALUES (?, ?, ?)", [(batch_id, r[1], r[2]) for r in rows]
            )

    spark = standalone_session(master_url, "kd-faults-driver", executors=2)
    df = (
        spark.readStream.format("kafka_direct")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "40")
        .load()
    )
    query = (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    print("STARTED", flush=True)
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
    while not stop.wait(0.2):
        if not query.isActive:
            break
    error = query.exception()
    query.stop()
    spark.stop()
    if error is not None:
        print(f"QUERY FAILED: {error}", file=sys.stderr, flush=True)
        sys.exit(2)


if __name__ == "__main__":
    main(*sys.argv[1:6])
