"""A batch write under ``spark.speculation`` on a standalone cluster, for
``test_sink_speculation.py``. Runs as the Spark driver in a process of its own (Spark allows one
SparkContext per process, and the test process has the suite's local session).

Four tasks of 50 rows of 8 KB each: Spark partition 0's first attempt hands its first 30 rows
towards the sink and then stalls upstream of it, so Spark starts a speculative copy of it on
the other worker, whose executor is on another host (127.0.0.2): Spark never speculates on the
host of the attempt it copies. The rows are large because a Python worker's output is buffered
(64 KB) until it is full: 240 KB push most of them through to the sink, which writes them into
the attempt's open transaction. The copy hands over no row until the first attempt's rows are
in Kafka (read uncommitted): its sink's transaction, which fences the first attempt's, then
starts after them by construction, not because the copy happened to start late enough (under a
loaded machine the first attempt's rows once arrived after the copy had committed). Every attempt
leaves a file named ``<partition>-<attempt>-<SPARK_LOCAL_IP>`` in ATTEMPTS_DIR.

Run as: python speculation_driver.py MASTER_URL BOOTSTRAP TOPIC ATTEMPTS_DIR GUARANTEE
It prints ``WRITTEN`` once the write returned.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

from kafka_direct.testing.standalone import standalone_session

ROWS, TASKS, BATCH, BEFORE_STALL = 200, 4, 10, 3
#: How long the first attempt stalls: far longer than the write takes with a speculative copy.
STALL_S = 90.0
#: How long the copy waits for the first attempt's rows to be in Kafka.
WAIT_FOR_FIRST_S = 120.0


def value(i: int) -> bytes:
    """Row ``i``'s value: 8 KB, its number first."""
    return f"row-{i:05d}-".encode().ljust(8192, b".")


def wait_for_rows(bootstrap: str, topic: str) -> None:
    """Until a record of ``topic`` is readable uncommitted (the first attempt's open
    transaction); runs in the copy's Python worker."""
    import time

    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"watch-{topic}",
            "isolation.level": "read_uncommitted",
            "enable.auto.commit": "false",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + WAIT_FOR_FIRST_S
        while time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                return
        raise RuntimeError(f"the first attempt's rows were not in Kafka in {WAIT_FOR_FIRST_S} s")
    finally:
        consumer.close()


def main(master_url: str, bootstrap: str, topic: str, attempts_dir: str, guarantee: str) -> None:
    spark = standalone_session(
        master_url,
        "kd-speculation",
        {
            "spark.speculation": "true",
            "spark.speculation.interval": "200ms",
            "spark.speculation.multiplier": "1.5",
            "spark.speculation.quantile": "0.5",
            # The copy starts after this; it then waits for the first attempt's rows (above).
            "spark.speculation.minTaskRuntime": "5s",
            # Speculate by run time alone (Spark 3.4+ also weighs each task's processing rate).
            "spark.speculation.efficiency.enabled": "false",
            # Ten rows per Arrow batch, so the first ones reach the sink before the stall.
            "spark.sql.execution.arrow.maxRecordsPerBatch": str(BATCH),
        },
        executors=2,
    )

    def rows(batches: Iterator[Any]) -> Iterator[Any]:
        import os
        import time
        from pathlib import Path

        import pyarrow as pa
        from pyspark import TaskContext

        ctx = TaskContext.get()
        part, attempt = ctx.partitionId(), ctx.attemptNumber()
        host = os.environ.get("SPARK_LOCAL_IP", "?")
        Path(attempts_dir, f"{part}-{attempt}-{host}").touch()
        if part == 0 and attempt > 0:
            began = time.monotonic()
            wait_for_rows(bootstrap, topic)
            # For the test's message: how long the first attempt's rows took to show.
            Path(attempts_dir, f"copy-waited-{time.monotonic() - began:.1f}s").touch()
        for n, batch in enumerate(batches, 1):
            yield pa.RecordBatch.from_pydict(
                {"value": [value(i) for i in batch.column("id").to_pylist()]}
            )
            if part == 0 and attempt == 0 and n == BEFORE_STALL:
                time.sleep(STALL_S)

    df = spark.range(0, ROWS, 1, TASKS).mapInArrow(rows, "value binary")
    options = {"kafka.bootstrap.servers": bootstrap, "topic": topic}
    options["deliveryGuarantee"] = guarantee
    if guarantee == "exactly-once":
        options["transactionalIdPrefix"] = f"speculation-{topic}"
    df.write.format("kafka_direct").options(**options).mode("append").save()
    print("WRITTEN", flush=True)
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:6])
