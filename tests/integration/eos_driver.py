"""Spark drivers for the exactly-once sink tests (test_sink_exactly_once.py), run in a subprocess
so that the test can SIGKILL them, and so that local mode retries failed tasks
(``local[2,4]``: two cores, four attempts per task).

    python eos_driver.py stream BOOTSTRAP IN_TOPIC OUT_TOPIC CHECKPOINT FAIL_FIRST [HOLD]
    python eos_driver.py batch  BOOTSTRAP IN_TOPIC OUT_TOPIC PREFIX FAIL_FIRST

``stream`` reads IN_TOPIC with kafka_direct (100 records per micro-batch) and writes every value to
OUT_TOPIC with deliveryGuarantee exactly-once; it never stops by itself. ``batch`` copies
IN_TOPIC to OUT_TOPIC in one exactly-once ``df.write`` over four tasks, then exits.

Between the two, a ``mapInArrow`` hands the sink one Arrow batch of at most 25 rows at a time and
sleeps a little per batch, so tasks spend most of their time writing (where a kill should land).
With FAIL_FIRST=1 every task's first attempt raises: in ``stream``, two seconds after handing
the sink its first batch (usually the sink has opened its transaction and produced it by then,
else the attempt fails before the sink began); in ``batch``, by construction, once the sink has
two (padded) pieces and one of their rows is in OUT_TOPIC's log, in the sink's open transaction
(it is aborted, and stays in the log for read_uncommitted readers), or at the end of its input.
Spark retries the task either way.

HOLD (``KIND:BATCH:DIR``) stops the stream at a chosen point, so that the test's SIGKILL lands
there by construction, not by timing. In micro-batch BATCH the held tasks hand the sink their
first two pieces (padded, so that they reach it), write ``DIR/held-<batch>-<partition>`` and
then hand it nothing more (they sleep
until killed): their sink tasks have a transaction open that cannot commit, and the micro-batch
cannot reach Spark's commit log. KIND ``open`` holds every task of the micro-batch; KIND
``committed`` holds partition 1 only, so partition 0's task commits meanwhile. A task's first
attempt that FAIL_FIRST fails is not held (its retry is).

The environment variable EOS_MARKER_TOPIC, when set, is the stream's transactionMarkerTopic
(else the markers go to OUT_TOPIC, the default).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

#: The transaction timeout of the stream: short, so that a restart after it is quick to test.
TRANSACTION_TIMEOUT_MS = "10000"


#: How long a held task waits for its SIGKILL (the test kills it within seconds).
HOLD_S = 900.0


def _held(hold: str, ctx: object) -> Path | None:
    """The file to write when this task is one that HOLD stops (module docstring), else None."""
    if not hold or ctx is None:
        return None
    kind, batch, folder = hold.split(":", 2)
    batch_id = ctx.getLocalProperty("streaming.sql.batchId")  # type: ignore[attr-defined]
    partition = ctx.partitionId()  # type: ignore[attr-defined]
    if batch_id is None or int(batch_id) != int(batch) or (kind == "committed" and partition != 1):
        return None
    return Path(folder) / f"held-{batch}-{partition}"


def _hold(held: Path) -> None:
    held.write_text(str(os.getpid()))
    time.sleep(HOLD_S)


def _padded(piece: pa.RecordBatch, held: bool) -> pa.RecordBatch:
    """``piece`` with its ``padding`` column: null, or 8 KB a row in a held task, so that the
    piece fills the workers' 64 KB socket buffers and reaches the sink before the hold."""
    pad = pa.array([b"p" * 8192 if held else None] * piece.num_rows, pa.binary())
    return pa.RecordBatch.from_arrays([piece.column(0), pad], names=["value", "padding"])


def _in_the_log(bootstrap: str, topic: str, values: set[bytes]) -> None:
    """Wait until one of ``values`` is in ``topic``'s log (read_uncommitted: in an open
    transaction too), at most two minutes."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "eos-driver-watch",
         "isolation.level": "read_uncommitted", "enable.auto.commit": False}
    )  # fmt: skip
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if any(m.value() in values for m in consumer.consume(1000, 0.5) if not m.error()):
                return
    finally:
        consumer.close()


def _slow_and_failing(fail_first: bool, hold: str = "", watch: tuple[str, str] | None = None):  # type: ignore[no-untyped-def]
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        first_attempt = ctx is not None and ctx.attemptNumber() == 0
        failing = fail_first and first_attempt
        held = None if failing else _held(hold, ctx)
        handed: list[bytes] = []
        for batch in batches:
            for start in range(0, batch.num_rows, 25):
                piece = batch.slice(start, 25)
                if failing and len(handed) >= 50 and watch is not None:
                    # The sink has these rows in its open transaction, on the broker: the
                    # failure aborts them (read_uncommitted readers still see them).
                    _in_the_log(*watch, set(handed))
                    raise RuntimeError("injected failure of a task's first attempt")
                if failing and handed and watch is None:
                    # Time for the sink's Python worker to start and take the first piece into
                    # its transaction (under load it may not have, and then the attempt fails
                    # before the sink began: a retry either way).
                    time.sleep(2.0)
                    raise RuntimeError("injected failure of a task's first attempt")
                time.sleep(0.05)
                handed.extend(piece.column(0).to_pylist())
                yield _padded(piece, held is not None or (failing and watch is not None))
                if held is not None and len(handed) == 50:
                    _hold(held)  # two pieces: Spark sends the sink the first whole batch
        if failing and watch is not None:
            _in_the_log(*watch, set(handed))
            raise RuntimeError("injected failure of a task's first attempt")
        if held is not None:
            _hold(held)  # fewer than two pieces, or after them: the input never ends

    return run


def _session():  # type: ignore[no-untyped-def]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import kafka_direct

    spark = (
        SparkSession.builder.master("local[2,4]")
        .appName("eos-driver")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        # The sink gets the rows in batches of 25 as mapInArrow hands them over, not 10,000.
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "25")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    kafka_direct.register(spark)
    return spark


def stream(
    bootstrap: str, source: str, out: str, checkpoint: str, fail_first: bool, hold: str = ""
) -> None:
    spark = _session()
    df = (
        spark.readStream.format("kafka_direct")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "100")
        .load()
        .select("value")
        .mapInArrow(_slow_and_failing(fail_first, hold), "value binary, padding binary")
    )
    marker_topic = os.environ.get("EOS_MARKER_TOPIC")
    markers = {"transactionMarkerTopic": marker_topic} if marker_topic else {}
    query = (
        df.writeStream.format("kafka_direct")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", out)
        .options(**markers)
        .option("deliveryGuarantee", "exactly-once")
        .option("kafka.transaction.timeout.ms", TRANSACTION_TIMEOUT_MS)
        .option("kafka.delivery.timeout.ms", TRANSACTION_TIMEOUT_MS)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    query.awaitTermination()


def batch(bootstrap: str, source: str, out: str, prefix: str, fail_first: bool) -> None:
    spark = _session()
    df = (
        spark.read.format("kafka_direct")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .load()
        .select("value")
        .repartition(4)
        .mapInArrow(
            _slow_and_failing(fail_first, watch=(bootstrap, out)), "value binary, padding binary"
        )
    )
    (
        df.write.format("kafka_direct")
        .mode("append")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", out)
        .option("deliveryGuarantee", "exactly-once")
        .option("transactionalIdPrefix", prefix)
        .save()
    )
    spark.stop()


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    fail = args[4] == "1"
    if mode == "stream":
        stream(args[0], args[1], args[2], args[3], fail, args[5] if len(args) > 5 else "")
    else:
        batch(args[0], args[1], args[2], args[3], fail)
