"""Spark drivers for the exactly-once sink tests (test_sink_exactly_once.py), run in a subprocess
so that the test can SIGKILL them, and so that local mode retries failed tasks
(``local[2,4]``: two cores, four attempts per task).

    python eos_driver.py stream BOOTSTRAP IN_TOPIC OUT_TOPIC CHECKPOINT FAIL_FIRST
    python eos_driver.py batch  BOOTSTRAP IN_TOPIC OUT_TOPIC PREFIX FAIL_FIRST

``stream`` reads IN_TOPIC with kafka_direct (100 records per micro-batch) and writes every value to
OUT_TOPIC with deliveryGuarantee exactly-once; it never stops by itself. ``batch`` copies
IN_TOPIC to OUT_TOPIC in one exactly-once ``df.write`` over four tasks, then exits.

Between the two, a ``mapInArrow`` hands the sink one Arrow batch of at most 25 rows at a time and
sleeps a little per batch, so tasks spend most of their time writing (where a kill should land).
With FAIL_FIRST=1 every task's first attempt raises two seconds after handing the sink its first
batch: usually the sink has opened its transaction and produced it by then (it is aborted, and
stays in the log for read_uncommitted readers), else the attempt fails before the sink began.
Spark retries the task either way.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator

import pyarrow as pa

#: The transaction timeout of the stream: short, so that a restart after it is quick to test.
TRANSACTION_TIMEOUT_MS = "10000"


def _slow_and_failing(fail_first: bool):  # type: ignore[no-untyped-def]
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        first_attempt = ctx is not None and ctx.attemptNumber() == 0
        handed = 0
        for batch in batches:
            for start in range(0, batch.num_rows, 25):
                piece = batch.slice(start, 25)
                if fail_first and first_attempt and handed:
                    # Time for the sink's Python worker to start and take the first piece into
                    # its transaction (under load it may not have, and then the attempt fails
                    # before the sink began: a retry either way).
                    time.sleep(2.0)
                    raise RuntimeError("injected failure of a task's first attempt")
                time.sleep(0.05)
                handed += 1
                yield piece

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


def stream(bootstrap: str, source: str, out: str, checkpoint: str, fail_first: bool) -> None:
    spark = _session()
    df = (
        spark.readStream.format("kafka_direct")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "100")
        .load()
        .select("value")
        .mapInArrow(_slow_and_failing(fail_first), "value binary")
    )
    query = (
        df.writeStream.format("kafka_direct")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", out)
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
        .mapInArrow(_slow_and_failing(fail_first), "value binary")
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
    (stream if mode == "stream" else batch)(args[0], args[1], args[2], args[3], fail)
