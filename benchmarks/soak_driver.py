"""The real-Kafka soak's Spark driver (``benchmarks/soak.py`` starts it, SIGKILLs it, restarts
it). Runs as a process of its own: a local Spark session, the Spark driver, with three
pipelines side by side, all reading the soak's source topic:

- ``eos``: a Structured Streaming query into the kafka_direct sink with
  ``deliveryGuarantee=exactly-once`` (topic ``<source>-eos``), with a checkpoint;
- ``alo``: the same query into the at-least-once sink (topic ``<source>-alo``), with a checkpoint;
- ``dstream``: ``KafkaUtils.createDirectStream`` with an SQLite ``SqlOffsetStore``; each batch
  writes its records and moves the store's offsets in one SQLite transaction
  (``store.transaction``), so a restarted driver resumes from the store.

Every batch that read records is appended, as one JSON line, to ``progress.jsonl`` in the work
directory: the pipeline, the driver run, the batch id, its row count, when it was seen, and the
source offsets it ended at. The soak times recoveries and decides when the pipelines caught up
from these lines.

Spark runs as ``local[2,4]``: two cores and up to four attempts per task, so a Python worker
killed mid-task costs a task retry, as on a cluster, not the query (plain ``local[2]`` allows one).

Run as: python soak_driver.py BOOTSTRAP SOURCE_TOPIC WORK_DIR RUN_ID
A line (or EOF) on stdin stops the pipelines and exits 0; a pipeline that fails exits 2.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import threading
import time
from pathlib import Path
from typing import Any

from kafka_direct import ConsumerStrategies, KafkaUtils, LocationStrategies, OffsetRange
from kafka_direct.stores import SqlOffsetStore
from kafka_direct.testing.local import local_spark

TRIGGER = "1 second"
MAX_PER_TRIGGER = "2000"
GROUP = "soak-dstream"
OUTPUT_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS dstream_records (partition INTEGER, offset INTEGER, value BLOB, "
    "PRIMARY KEY (partition, offset))",
    "CREATE TABLE IF NOT EXISTS dstream_deliveries (batch INTEGER, partition INTEGER, "
    "offset INTEGER)",
)


class Progress:
    """Appends one JSON line per batch that read records (thread-safe: the DStream's batches run
    on a thread of their own)."""

    def __init__(self, path: Path, run: int) -> None:
        self.path = path
        self.run = run
        self._lock = threading.Lock()

    def add(self, pipe: str, batch: int, rows: int, end: dict[str, int]) -> None:
        line = {"pipe": pipe, "run": self.run, "batch": batch, "rows": rows, "at": time.time()}
        line["end"] = end  # type: ignore[assignment]
        with self._lock, open(self.path, "a") as out:
            out.write(json.dumps(line) + "\n")


def structured(spark: Any, bootstrap: str, topic: str, work: Path, pipe: str) -> Any:
    df = (
        spark.readStream.format("kafka_direct")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", MAX_PER_TRIGGER)
        .load()
        .select("key", "value")
    )
    guarantee = "exactly-once" if pipe == "eos" else "at-least-once"
    return (
        df.writeStream.format("kafka_direct")
        .queryName(f"soak-{pipe}")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", f"{topic}-{pipe}")
        .option("kafka.acks", "all")
        .option("deliveryGuarantee", guarantee)
        .option("checkpointLocation", str(work / f"checkpoint-{pipe}"))
        .trigger(processingTime=TRIGGER)
        .start()
    )


def source_end(progress: dict[str, Any], topic: str) -> dict[str, int]:
    """The source offsets a batch ended at, from its progress: ``{"<partition>": offset}``."""
    end = progress["sources"][0]["endOffset"]
    if isinstance(end, str):
        end = json.loads(end)
    return {str(p): int(o) for p, o in end.get(topic, {}).items()}


def dstream(spark: Any, bootstrap: str, topic: str, work: Path, progress: Progress) -> Any:
    store = SqlOffsetStore.sqlite(work / "dstream.db")
    with sqlite3.connect(work / "dstream.db") as conn:
        for statement in OUTPUT_SCHEMA:
            conn.execute(statement)
    params = {"bootstrap.servers": bootstrap, "group.id": GROUP, "auto.offset.reset": "earliest"}
    stream = KafkaUtils.createDirectStream(
        spark,
        LocationStrategies.PreferConsistent(),
        ConsumerStrategies.Subscribe([topic], params),
        batchInterval=1.0,
        offsetStore=store,
    )
    batches = [0]

    def write(df: Any, ranges: list[OffsetRange]) -> None:
        rows = [
            (r["partition"], r["offset"], bytes(r["value"]))
            for r in df.select("partition", "offset", "value").collect()
        ]
        batch = batches[0]
        batches[0] += 1
        # The records and the offsets commit together, or neither does.
        with store.transaction(GROUP, ranges) as cur:
            cur.executemany("INSERT OR IGNORE INTO dstream_records VALUES (?, ?, ?)", rows)
            cur.executemany(
                "INSERT INTO dstream_deliveries VALUES (?, ?, ?)",
                [(progress.run * 1_000_000 + batch, p, o) for p, o, _ in rows],
            )
        if rows:
            end = {str(r.partition): r.until_offset for r in ranges}
            progress.add("dstream", batch, len(rows), end)

    stream.foreachBatch(write)
    stream.start()
    return stream


def main(bootstrap: str, topic: str, work_dir: str, run: str) -> None:
    work = Path(work_dir)
    progress = Progress(work / "progress.jsonl", int(run))
    spark = local_spark("kafka_direct-soak", conf={"spark.master": "local[2,4]"})
    queries = {pipe: structured(spark, bootstrap, topic, work, pipe) for pipe in ("eos", "alo")}
    stream = dstream(spark, bootstrap, topic, work, progress)
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
    seen = {pipe: -1 for pipe in queries}
    failed: list[str] = []
    while not stop.wait(0.5):
        for pipe, query in queries.items():
            if not query.isActive:
                failed.append(f"{pipe}: {query.exception()}")
                continue
            for raw in query.recentProgress:
                p = json.loads(raw.json)
                if p["batchId"] > seen[pipe] and p["numInputRows"] > 0:
                    progress.add(pipe, p["batchId"], p["numInputRows"], source_end(p, topic))
                if p["batchId"] > seen[pipe]:
                    seen[pipe] = p["batchId"]
        if stream.exception() is not None:
            failed.append(f"dstream: {stream.exception()}")
        if failed:
            break
    for query in queries.values():
        query.stop()
    stream.stop(graceful=False, timeout=60)
    spark.stop()
    if failed:
        print("SOAK PIPELINE FAILED: " + "; ".join(failed), file=sys.stderr, flush=True)
        sys.exit(2)


if __name__ == "__main__":
    main(*sys.argv[1:5])
