"""Filter pushdown's gain, measured: rows the read tasks read and wall time, with and without
pushdown, in one run. Runs in the benchmark process (the Spark driver). The command is
``python benchmarks/pushdown.py`` (``--help`` for the options).

The data set: N records of S random bytes (fixed seed), round-robin over P partitions, record i
stamped ``BASE + i`` ms (CreateTime), so each partition's timestamps grow with its offsets.
Every query is ``where(...)`` then ``count`` and ``sum(length(value))`` (every row materialised),
with ``spark.sql.python.filterPushdown.enabled=true``, pushed (``pushdown.enabled=true``) and
not (``false``). Rows read come from the tasks' own statistics (``KAFKA_DIRECT_STATS_DIR``).

- **partition**: ``partition = k`` on the P-partition topic, end to end on the broker.
- **timestamp**: ``timestamp >= T``, T keeping the last 1%. Pushed, it becomes one
  ListOffsets-by-timestamp request, so the tasks start at the first offset at or after T: the
  broker's own answer, measured on real Apache Kafka (the embedded Tansu broker answers offset 0
  to every lookup, which narrows nothing).

The broker is a one-node Apache Kafka (``kafka_direct.testing.KafkaCluster``), or the cluster at
``--bootstrap-servers``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from kafka_direct_bench.common import BenchmarkError, log, median
from kafka_direct_bench.dataset import create_topic, delete_topics, latest_offsets, new_topic
from kafka_direct_bench.executor_stats import STATS_DIR_ENV, task_stats

BASE_MS = 1_700_000_000_000
CONF = "spark.sql.python.filterPushdown.enabled"


@dataclass(frozen=True)
class Config:
    records: int
    partitions: int
    size: int
    keep: float
    partition: int
    rounds: int
    bootstrap_servers: str | None
    json_path: str | None

    @property
    def threshold_ms(self) -> int:
        """T: the records from this timestamp on are the last ``keep`` of the data set."""
        return BASE_MS + self.records - round(self.records * self.keep)


def parse_args(argv: list[str] | None = None) -> Config:
    p = argparse.ArgumentParser(prog="python benchmarks/pushdown.py", description=__doc__)
    p.add_argument("--records", type=int, default=5_000_000)
    p.add_argument("--partitions", type=int, default=10)
    p.add_argument("--size", type=int, default=100, help="value size in bytes")
    p.add_argument("--keep", type=float, default=0.01, help="share the timestamp filter keeps")
    p.add_argument("--partition", type=int, default=3, help="k of 'partition = k'")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--bootstrap-servers", help="this cluster instead of a fresh KafkaCluster")
    p.add_argument("--json", dest="json_path", help="also write every figure to this file")
    a = p.parse_args(argv)
    if a.records < a.partitions or not 0 <= a.partition < a.partitions or not 0 < a.keep < 1:
        p.error("need records >= partitions, 0 <= partition < partitions, 0 < keep < 1")
    return Config(
        a.records, a.partitions, a.size, a.keep, a.partition, a.rounds, a.bootstrap_servers,
        a.json_path,
    )  # fmt: skip


def produce(bootstrap: str, topic: str, config: Config) -> float:
    """Record i: partition i % P, timestamp BASE + i. Returns the seconds it took."""
    rnd = random.Random(7)
    values = [rnd.randbytes(config.size) for _ in range(1024)]
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            # In order, whatever retries a loaded machine causes: each partition's timestamps
            # must grow with its offsets for the timestamp lookup to cut exactly the last 1%.
            "enable.idempotence": "true",
            "linger.ms": "50",
            "batch.num.messages": "10000",
            "batch.size": "1000000",
            "queue.buffering.max.messages": "1000000",
            "queue.buffering.max.kbytes": "1048576",
        }
    )
    started = time.perf_counter()
    for i in range(config.records):
        while True:
            try:
                producer.produce(
                    topic, values[i & 1023], partition=i % config.partitions, timestamp=BASE_MS + i
                )
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        raise BenchmarkError("records were not delivered")
    ends = latest_offsets(bootstrap, topic, config.partitions)
    expected = [len(range(p, config.records, config.partitions)) for p in range(config.partitions)]
    if ends != expected:
        raise BenchmarkError(f"the log ends at {ends}, expected {expected}")
    return time.perf_counter() - started


class Runner:
    """One local Spark session and the measured queries."""

    def __init__(self, bootstrap: str, topic: str, stats_dir: Path) -> None:
        os.environ[STATS_DIR_ENV] = str(stats_dir)  # inherited by the JVM and its workers
        from kafka_direct.testing.local import local_spark

        self.spark = local_spark(
            "kafka_direct-bench-pushdown",
            conf={CONF: "true", f"spark.executorEnv.{STATS_DIR_ENV}": str(stats_dir)},
        )
        self.bootstrap, self.topic, self.stats_dir = bootstrap, topic, stats_dir

    def query(self, where: str, options: Mapping[str, str]) -> dict[str, Any]:
        from pyspark.sql import functions as F

        t0 = time.time()
        df = (
            self.spark.read.format("kafka_direct")
            .option("kafka.bootstrap.servers", self.bootstrap)
            .options(**options)
            .load()
            .where(where)
        )
        row = df.agg(F.count(F.lit(1)).alias("n"), F.sum(F.length("value")).alias("b")).collect()
        wall = time.time() - t0
        tasks = task_stats(self.stats_dir, self.topic, t0, time.time())
        return {
            "rows": int(row[0]["n"]),
            "bytes": int(row[0]["b"] or 0),
            "rows_read": sum(t["rows"] for t in tasks),
            "tasks": len(tasks),
            "wall_s": wall,
        }

    def stop(self) -> None:
        self.spark.stop()


def measure(runner: Runner, config: Config) -> dict[str, list[dict[str, Any]]]:
    """Every case, ``config.rounds`` times, in an order that rotates between rounds."""
    import datetime as dt

    stamp = dt.datetime.fromtimestamp(config.threshold_ms / 1000, dt.timezone.utc)
    by_partition = f"partition = {config.partition}"
    by_time = f"timestamp >= TIMESTAMP '{stamp.strftime('%Y-%m-%d %H:%M:%S.%f')}'"
    on = {"subscribe": runner.topic, "pushdown.enabled": "true"}
    off = {"subscribe": runner.topic, "pushdown.enabled": "false"}
    cases = {
        "partition, no pushdown": lambda: runner.query(by_partition, off),
        "partition, pushdown": lambda: runner.query(by_partition, on),
        "timestamp, no pushdown": lambda: runner.query(by_time, off),
        "timestamp, pushdown": lambda: runner.query(by_time, on),
    }
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in cases}
    names = list(cases)
    for i in range(config.rounds):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            figures = cases[name]()
            log(f"round {i + 1}: {name}: {figures['rows_read']:,} rows read, "
                f"{figures['wall_s']:.2f} s")  # fmt: skip
            results[name].append(figures)
    return results


def summarise(results: dict[str, list[dict[str, Any]]]) -> tuple[list[dict[str, Any]], list[str]]:
    rows, failures = [], []
    baselines = {"partition": "partition, no pushdown", "timestamp": "timestamp, no pushdown"}
    for name, runs in results.items():
        base = results[baselines[name.split(",")[0]]]
        answer = {(r["rows"], r["bytes"]) for r in runs + base}
        if len(answer) != 1:
            failures.append(f"{name}: the rows differ from the query without pushdown: {answer}")
        read = median([float(r["rows_read"]) for r in runs])
        wall = median([r["wall_s"] for r in runs])
        base_read = median([float(r["rows_read"]) for r in base])
        base_wall = median([r["wall_s"] for r in base])
        rows.append({
            "case": name, "rows": runs[0]["rows"], "rows_read": read, "wall_s": wall,
            "fewer_rows_read": base_read / read if read else float("inf"),
            "speedup": base_wall / wall if wall else float("inf"),
        })  # fmt: skip
    return rows, failures


def render(table: list[dict[str, Any]], config: Config) -> str:
    lines = [
        f"Filter pushdown: {config.records:,} records x {config.size} B, {config.partitions} "
        f"partitions, median of {config.rounds} round(s)",
        f"{'case':<48}{'rows':>10}{'rows read':>13}{'wall s':>9}{'read / base':>13}"
        f"{'speed-up':>10}",
    ]
    for r in table:
        lines.append(
            f"{r['case']:<48}{r['rows']:>10,}{r['rows_read']:>13,.0f}{r['wall_s']:>9.2f}"
            f"{1 / r['fewer_rows_read']:>13.4f}{r['speedup']:>9.1f}x"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from kafka_direct.testing.kafka_cluster import KafkaCluster

    config = parse_args(argv)
    stats_dir = Path(tempfile.mkdtemp(prefix="kafka-direct-bench-pushdown-"))
    broker = None if config.bootstrap_servers else KafkaCluster().start()
    bootstrap = config.bootstrap_servers or broker.bootstrap_servers  # type: ignore[union-attr]
    topic = new_topic("pushdown")
    runner = None
    try:
        create_topic(bootstrap, topic, config.partitions)
        log(f"producing {config.records:,} records to {topic} at {bootstrap}")
        seconds = produce(bootstrap, topic, config)
        log(f"produced in {seconds:.1f} s")
        runner = Runner(bootstrap, topic, stats_dir)
        log("warming up the JVM and the Python workers")
        runner.query(f"partition = {config.partition} AND offset < 1000", {"subscribe": topic})
        results = measure(runner, config)
    finally:
        if runner is not None:
            runner.stop()
        if config.bootstrap_servers:
            delete_topics(bootstrap, [topic])
        if broker is not None:
            broker.stop()
    table, failures = summarise(results)
    print(render(table, config), flush=True)
    for failure in failures:
        log(f"check FAILED: {failure}")
    if config.json_path:
        Path(config.json_path).write_text(
            json.dumps({"config": config.__dict__, "summary": table, "rounds": results},
                       indent=2, default=str)
        )  # fmt: skip
        log(f"wrote {config.json_path}")
    return 1 if failures else 0
