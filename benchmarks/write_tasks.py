#!/usr/bin/env python
"""What one write task costs: ``python benchmarks/write_tasks.py``. Runs in the benchmark
process, which is also the Spark driver (local[2], the installed PySpark; Apache Kafka from
``kafka_direct.testing.KafkaCluster`` unless ``--bootstrap-servers`` is given).

A batch write of many small tasks (``--rows`` rows of ``--size`` bytes, keyed, in ``--tasks``
partitions, as after a shuffle) is cost per task more than per record. The same cached
DataFrame is written, in rounds whose order alternates, by:

- ``noop``: Spark's no-op sink (no Python at all);
- ``python floor``: a Python data source whose Arrow writer only counts
  (``kafka_direct_bench.floor_sink``): what Spark costs to hand each task's rows to any Python
  writer;
- ``kafka_direct``: ``df.write.format("kafka_direct")`` into a new topic of ``--tasks``
  partitions each round, read back and compared by content (every value once).

The report gives each row's median seconds, and kafka_direct's cost per task beyond the Python
floor (``(kafka_direct - floor) x cores / tasks``), beside the median time its tasks spent in
the sink's own code (producing and the final flush, from the executors' task statistics).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kafka_direct_bench.common import log, run_header, run_on_kafka
from kafka_direct_bench.dataset import create_topic, new_topic
from kafka_direct_bench.executor_stats import task_stats
from kafka_direct_bench.floor_sink import floor_sink
from kafka_direct_bench.oracle_python import versions

CORES = 2
ROWS = ("noop", "python floor", "kafka_direct")


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=100)
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--size", type=int, default=100, help="value bytes")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument(
        "--option", action="append", default=[], help="KEY=VALUE for the kafka_direct writer"
    )
    p.add_argument("--bootstrap-servers", default=None)
    p.add_argument("--json", default=None)
    return p.parse_args(argv)


def read_back(bootstrap: str, topic: str, partitions: int, expected: list[bytes]) -> None:
    """Every value written once, nothing else (raises otherwise)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"{topic}-check", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(seen) < len(expected) and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, 1.0):
                if msg.error() is None:
                    seen.append(msg.value())
        for msg in consumer.consume(10_000, 1.0):  # anything beyond would be a duplicate
            if msg.error() is None:
                seen.append(msg.value())
    finally:
        consumer.close()
    if sorted(seen) != expected:
        raise RuntimeError(f"{topic}: read back {len(seen)} values, wrote {len(expected)}")


def run(args: argparse.Namespace, bootstrap: str) -> dict[str, Any]:
    from kafka_direct.testing.local import local_spark

    stats = Path(tempfile.mkdtemp(prefix="write-tasks-"))
    os.environ["KAFKA_DIRECT_STATS_DIR"] = str(stats)  # before the workers start
    spark = local_spark("write-tasks", cores=CORES)
    ver = versions(spark, None)
    log("versions: " + ", ".join(f"{k} {v}" for k, v in ver.items()))
    spark.dataSource.register(floor_sink())
    pad = max(args.size - 10, 0)
    df = (
        spark.range(args.rows)
        .selectExpr(
            "cast(id as string) as key",
            f"concat(lpad(cast(id as string), 10, '0'), repeat('x', {pad})) as value",
        )
        .repartition(args.tasks)
        .cache()
    )
    df.count()
    expected = sorted(f"{i:010d}{'x' * pad}".encode() for i in range(args.rows))
    in_sink: list[float] = []
    reused = created = 0

    def write(row: str) -> float:
        nonlocal reused, created
        started = time.perf_counter()
        if row == "noop":
            df.write.format("noop").mode("overwrite").save()
            return time.perf_counter() - started
        if row == "python floor":
            df.write.format("kafka_direct_bench_count").option("dir", str(stats)).option(
                "label", "floor"
            ).mode("append").save()
            return time.perf_counter() - started
        topic = new_topic("write-tasks")
        create_topic(bootstrap, topic, args.tasks)
        since = time.time()
        writer = (
            df.write.format("kafka_direct")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
        )
        for option in args.option:
            key, value = option.split("=", 1)
            writer = writer.option(key, value)
        started = time.perf_counter()
        writer.mode("append").save()
        took = time.perf_counter() - started
        tasks = task_stats(stats, topic, since, time.time() + 1)
        in_sink.extend(t["end"] - t["start"] for t in tasks)
        reused += sum(1 for t in tasks if t.get("reused"))
        created += sum(1 for t in tasks if not t.get("reused"))
        read_back(bootstrap, topic, args.tasks, expected)
        return took

    try:
        for row in ROWS:
            write(row)  # untimed: warm
        in_sink.clear()
        reused = created = 0
        seconds: dict[str, list[float]] = {r: [] for r in ROWS}
        for i in range(args.rounds):
            for row in ROWS if i % 2 == 0 else ROWS[::-1]:
                took = write(row)
                seconds[row].append(took)
                log(f"round {i} {row}: {took:.2f} s")
    finally:
        spark.stop()
    med = {r: statistics.median(s) for r, s in seconds.items()}
    return {
        "versions": ver,
        "tasks": args.tasks,
        "rows": args.rows,
        "size": args.size,
        "options": args.option,
        "seconds": seconds,
        "median_s": med,
        "extra_ms_per_task": (med["kafka_direct"] - med["python floor"])
        * CORES
        / args.tasks
        * 1000,
        "floor_ms_per_task": (med["python floor"] - med["noop"]) * CORES / args.tasks * 1000,
        "in_sink_median_ms": statistics.median(in_sink) * 1000 if in_sink else None,
        "producers_reused": reused,
        "producers_created": created,
    }


def report(results: dict[str, Any]) -> None:
    print(run_header(results))
    print(
        f"{results['rows']:,} rows of {results['size']} B in {results['tasks']} tasks, "
        f"local[{CORES}]; checks: every kafka_direct write read back by content"
    )
    for row, med in results["median_s"].items():
        rounds = " · ".join(f"{s:.2f}" for s in results["seconds"][row])
        print(f"{row:>13}: median {med:6.2f} s (rounds {rounds})")
    print(
        f"Python floor over noop: {results['floor_ms_per_task']:.1f} ms per task; kafka_direct "
        f"over the Python floor: {results['extra_ms_per_task']:.1f} ms per task; time in the "
        f"sink's code per task (median): {results['in_sink_median_ms']:.1f} ms; producers "
        f"reused {results['producers_reused']}, created {results['producers_created']}"
    )


def main(argv: list[str]) -> int:
    return run_on_kafka("write_tasks.py", argv, parse(argv), run, report)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
