"""The Tansu soak's streaming driver (``benchmarks/soak_tansu.py`` starts it, SIGKILLs it,
restarts it). Runs as a process of its own: a local Spark session, the Spark driver.

It reads the soak topic with kafka_direct from its checkpoint and writes each micro-batch into
SQLite in one transaction: ``records`` keyed by (topic, partition, offset), so a replayed batch
changes nothing (an idempotent sink); ``deliveries``, one row per record per delivery (replays
included); ``batches``, one row per batch with the number of records it added, for the soak's
recovery times.

Run as: python soak_tansu_driver.py BOOTSTRAP TOPIC CHECKPOINT DB RUN_ID
A line (or EOF) on stdin stops the query and exits 0; a query that fails exits 2.
"""

from __future__ import annotations

import contextlib
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from kafka_direct.testing.local import local_spark

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS records (topic TEXT, partition INTEGER, offset INTEGER, "
    "value BLOB, PRIMARY KEY (topic, partition, offset))",
    "CREATE TABLE IF NOT EXISTS deliveries (batch INTEGER, partition INTEGER, offset INTEGER)",
    "CREATE TABLE IF NOT EXISTS batches (batch INTEGER, run INTEGER, at REAL, rows INTEGER, "
    "added INTEGER)",
)


@contextlib.contextmanager
def connect(db: str) -> Iterator[sqlite3.Connection]:
    """One transaction: committed when the block ends, rolled back on an error; then closed."""
    conn = sqlite3.connect(db, timeout=30)
    try:
        conn.execute("PRAGMA journal_mode=WAL")  # the soak reads while the driver writes
        with conn:
            yield conn
    finally:
        conn.close()


def main(bootstrap: str, topic: str, checkpoint: str, db: str, run: str) -> None:
    with connect(db) as conn:
        for statement in SCHEMA:
            conn.execute(statement)

    def sink(df: Any, batch_id: int) -> None:
        rows = [
            (r["topic"], r["partition"], r["offset"], r["value"])
            for r in df.select("topic", "partition", "offset", "value").collect()
        ]
        with connect(db) as conn:
            added = conn.executemany("INSERT OR IGNORE INTO records VALUES (?, ?, ?, ?)", rows)
            conn.executemany(
                "INSERT INTO deliveries VALUES (?, ?, ?)", [(batch_id, r[1], r[2]) for r in rows]
            )
            conn.execute(
                "INSERT INTO batches VALUES (?, ?, ?, ?, ?)",
                (batch_id, int(run), time.time(), len(rows), max(added.rowcount, 0)),
            )

    spark = local_spark("kafka_direct-soak")
    df = (
        spark.readStream.format("kafka_direct")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "500")
        .load()
    )
    query = (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
    while not stop.wait(0.2) and query.isActive:
        pass
    error = query.exception()
    query.stop()
    spark.stop()
    if error is not None:
        print(f"SOAK QUERY FAILED: {error}", file=sys.stderr, flush=True)
        sys.exit(2)


if __name__ == "__main__":
    main(*sys.argv[1:6])
