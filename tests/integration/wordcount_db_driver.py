"""A streaming word count whose counts and offsets live in PostgreSQL, for the store crash test.

Run as: python wordcount_db_driver.py BOOTSTRAP TOPIC DSN GROUP COUNTS_TABLE OFFSETS_TABLE HOLD_AT

Each run starts from the offset store (starting_offsets_json) with a FRESH checkpoint, so the
database, not Spark's checkpoint, says where to resume. Every micro-batch adds its word counts
and advances the stored offsets in one transaction (exactly_once_foreach_batch). It never stops
by itself; the test SIGKILLs it. With HOLD_AT >= 0, the batch with that id (of this run) writes
its counts and then waits inside its open transaction, so the kill lands there for certain.
"""

from __future__ import annotations

import logging
import sys
import tempfile
import time
from typing import Any

import psycopg

from kafka_direct.stores import SqlOffsetStore, exactly_once_foreach_batch, starting_offsets_json
from kafka_direct.testing.local import local_spark

log = logging.getLogger("wordcount_db_driver")


def main(
    bootstrap: str, topic: str, dsn: str, group: str, counts: str, offsets: str, hold_at: str
) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            f'CREATE TABLE IF NOT EXISTS "{counts}" (word TEXT PRIMARY KEY, n BIGINT NOT NULL)'
        )
    store = SqlOffsetStore.postgres(dsn, table=offsets)
    start = starting_offsets_json(
        store, group, [topic], kafka_config={"bootstrap.servers": bootstrap}
    )
    log.info("Resuming group %s from %s", group, start)

    def add_counts(batch: Any, batch_id: int, cur: Any) -> None:
        from pyspark.sql import functions as F

        words = (
            batch.select(F.explode(F.split(F.col("value").cast("string"), " ")).alias("word"))
            .where(F.col("word") != "")
            .groupBy("word")
            .count()
            .collect()
        )
        cur.executemany(
            f'INSERT INTO "{counts}" (word, n) VALUES (%s, %s) '
            f'ON CONFLICT (word) DO UPDATE SET n = "{counts}".n + EXCLUDED.n',
            [(r["word"], int(r["count"])) for r in words],
        )
        log.info("Batch %d: %d distinct words written, committing", batch_id, len(words))
        if batch_id == int(hold_at):
            # The test kills the driver now: the counts are written but not committed, and
            # must vanish with the connection.
            log.info("Batch %d: holding the transaction open", batch_id)
            time.sleep(3600)

    spark = local_spark("wordcount-db-driver")
    checkpoint = tempfile.mkdtemp(prefix="wordcount-db-ck-")  # fresh: the store is the truth
    df = (
        spark.readStream.format("kafka_direct")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", start)
        .option("maxOffsetsPerTrigger", "60")
        .load()
    )
    query = (
        df.writeStream.foreachBatch(exactly_once_foreach_batch(store, group, add_counts))
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    query.awaitTermination()


if __name__ == "__main__":
    main(*sys.argv[1:8])
