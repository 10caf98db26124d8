"""A streaming driver for the crash test: reads a topic with kafka_direct and writes every record
into SQLite, keyed by (topic, partition, offset), in one transaction per micro-batch.

Run as: python crash_driver.py BOOTSTRAP TOPIC CHECKPOINT DB
It never stops by itself; the test SIGKILLs it. Each delivery is also appended to a
`deliveries` table (no key), so the test can see that a killed batch was replayed.
"""

from __future__ import annotations

import sqlite3
import sys
import time

from kafka_direct.testing.local import local_spark


def main(bootstrap: str, topic: str, checkpoint: str, db: str) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS records (topic TEXT, partition INTEGER, offset INTEGER, "
            "value BLOB, PRIMARY KEY (topic, partition, offset))"
        )
        conn.execute("CREATE TABLE IF NOT EXISTS deliveries (batch INTEGER, offset INTEGER)")

    def sink(df, batch_id):  # type: ignore[no-untyped-def]
        rows = [
            (r["topic"], r["partition"], r["offset"], r["value"])
            for r in df.select("topic", "partition", "offset", "value").collect()
        ]
        time.sleep(0.3)  # slow batches, so the kill lands mid-stream
        with sqlite3.connect(db) as conn:
            conn.executemany("INSERT OR REPLACE INTO records VALUES (?, ?, ?, ?)", rows)
            conn.executemany(
                "INSERT INTO deliveries VALUES (?, ?)", [(batch_id, r[2]) for r in rows]
            )

    spark = local_spark("crash-driver")
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
    query.awaitTermination()


if __name__ == "__main__":
    main(*sys.argv[1:5])
