"""A Spark driver for test_sink_upstream_failures.py: writes through the kafka_direct sink while an
operator *upstream* of the sink fails, in a subprocess of its own so that local mode retries
failed tasks (``local[2,4]``: two cores, four attempts per task).

    python upstream_driver.py BOOTSTRAP GUARANTEE RESULTS SCENARIO:SOURCE:OUT [...]

Each scenario writes the 10,000 values ``<scenario>-00000`` ... (4 partitions of 2,500) to OUT with
``deliveryGuarantee`` GUARANTEE, and appends one JSON line to RESULTS: whether the write (or the
stream) finished, and the error if not. The upstream operator runs in a Python worker other than
the sink's, so its failure reaches the sink only as an input that ends early:

- ``python``: a Python UDF raises at the 2,000th row of every task's first attempt;
- ``arrow``: an Arrow-optimized Python UDF does the same;
- ``shuffle``: the rows go through a ``repartition`` first, and the UDF after it raises;
- ``kill``: the UDF's Python worker SIGKILLs itself at the 2,000th row of a first attempt;
- ``stream``: the same Python UDF in a stream read from SOURCE (kafka_direct, one micro-batch);
- ``restart``: a stream whose UDF fails every attempt of micro-batch 0 until the query dies, then
  the same query restarted from its checkpoint without the failure.

The sink's Arrow batches hold 100 rows (``maxRecordsPerBatch``), so a failing attempt has handed
the sink about 1,900 rows when it fails: the sink sees a partial input that ends without error.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import traceback
from typing import Any

ROWS, PARTITIONS, FAIL_AT = 10_000, 4, 2_000
#: Values are padded to this length, so that the sink's input is flushed to it in many pieces.
WIDTH = 200


def _session() -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import kafka_direct

    spark = (
        SparkSession.builder.master(f"local[2,{4}]")
        .appName("upstream-failures")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(PARTITIONS))
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    kafka_direct.register(spark)
    return spark


def _failing(name: str, how: str) -> Any:
    """``value -> value``, failing at the FAIL_AT-th row a task attempt sees (``how``: "first"
    attempts only, "always", or "never"); ``kill`` SIGKILLs its own worker instead of raising."""
    seen: dict[int, int] = {}

    def run(value: str) -> str:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        n = seen[ctx.taskAttemptId()] = seen.get(ctx.taskAttemptId(), 0) + 1
        if n == FAIL_AT and (how == "always" or (how == "first" and ctx.attemptNumber() == 0)):
            if name == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError(f"injected upstream failure ({name}) at row {n}")
        return value

    return run


def _values(spark: Any, name: str) -> Any:
    from pyspark.sql import functions as F

    return spark.range(0, ROWS, 1, PARTITIONS).select(
        F.rpad(F.format_string(f"{name}-%05d", F.col("id")), WIDTH, ".").alias("value")
    )


def _batch(spark: Any, bootstrap: str, guarantee: str, name: str, out: str) -> None:
    from pyspark.sql import functions as F

    udf = F.udf(_failing(name, "first"), "string", useArrow=name == "arrow")
    df = _values(spark, name)
    if name == "shuffle":
        df = df.repartition(PARTITIONS)
    df = df.select(udf("value").alias("value"))
    writer = (
        df.write.format("kafka_direct")
        .mode("append")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", out)
        .option("deliveryGuarantee", guarantee)
    )
    if guarantee == "exactly-once":
        writer = writer.option("transactionalIdPrefix", f"job-{out}")
    writer.save()


def _stream(spark: Any, bootstrap: str, guarantee: str, source: str, out: str, how: str,
            checkpoint: str) -> None:  # fmt: skip
    from pyspark.sql import functions as F

    udf = F.udf(_failing("stream", how), "string")
    df = (
        spark.readStream.format("kafka_direct")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load()
        .select(udf(F.col("value").cast("string")).alias("value"))
    )
    query = (
        df.writeStream.format("kafka_direct")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", out)
        .option("deliveryGuarantee", guarantee)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


def run(spark: Any, bootstrap: str, guarantee: str, name: str, source: str, out: str) -> dict:
    result: dict[str, Any] = {"scenario": name, "out": out, "ok": True}
    try:
        if name in ("stream", "restart"):
            checkpoint = tempfile.mkdtemp(prefix=f"upstream-{name}-")
            how = "first" if name == "stream" else "always"
            try:
                _stream(spark, bootstrap, guarantee, source, out, how, checkpoint)
            except Exception as exc:  # the first run is meant to die
                if name != "restart":
                    raise
                result["first_run"] = str(exc)[-2000:]
                _stream(spark, bootstrap, guarantee, source, out, "never", checkpoint)
            else:
                if name == "restart":
                    result["first_run"] = "finished without failing"
        else:
            _batch(spark, bootstrap, guarantee, name, out)
    except Exception as exc:  # noqa: BLE001 - reported to the test
        result.update(ok=False, error=f"{exc}"[-3000:], trace=traceback.format_exc()[-3000:])
    return result


def main() -> None:
    bootstrap, guarantee, results, *scenarios = sys.argv[1:]
    spark = _session()
    for spec in scenarios:
        name, source, out = spec.split(":")
        line = run(spark, bootstrap, guarantee, name, source, out)
        with open(results, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(line) + "\n")
    spark.stop()


if __name__ == "__main__":
    main()
