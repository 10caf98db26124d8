#!/usr/bin/env python
"""Cost against the partition count: ``python benchmarks/partitions.py``. Runs in the benchmark
process (a local[2] Spark session and, unless KAFKA_BOOTSTRAP_SERVERS is given, the embedded
broker).

For each partition count (10, 100, 1,000, 3,000 by default) and each data size (21 records per
partition; 2,000,000 records in all), one topic, then:

- ``batch``: ``spark.read`` of the whole topic, counted and its value bytes summed, with tasks
  packed (``after``: the default ``maxRecordsPerTask``) and one task per range (``before``:
  ``maxRecordsPerTask=1``, which plans exactly what the source planned before packing);
- ``floor``: a Python data source that yields the same rows with no Kafka work, with as many
  tasks as ``before`` and as ``after`` (``floor_before``, ``floor_after``), and ``spark.range``
  of the same task counts: what Spark itself costs;
- ``stream``: one micro-batch of ``readStream`` (``Trigger.AvailableNow``) over the topic, and
  one over the topic mostly idle (one new record on every tenth partition), before and after.

Also the driver's planning time per trigger at 1,000 partitions (offsets, ranges and packing).
Prints a Markdown table; ``--json PATH`` writes every number.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from kafka_direct_bench.common import log
from kafka_direct_bench.dataset import (
    create_topic,
    delete_topics,
    latest_offsets,
    new_topic,
    per_partition_counts,
)
from kafka_direct_bench.executor_stats import task_stats
from kafka_direct_bench.floor_source import floor_source

from kafka_direct.executor.task import STATS_DIR_ENV

BEFORE = {"maxRecordsPerTask": "1"}
AFTER: dict[str, str] = {}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--partitions", default="10,100,1000,3000")
    p.add_argument("--small", type=int, default=21, help="records per partition, small rows")
    p.add_argument("--big", type=int, default=2_000_000, help="records in all, big rows")
    p.add_argument("--size", type=int, default=100, help="value bytes")
    p.add_argument(
        "--before-up-to", type=int, default=3000,
        help="measure 'before' (one task per range) and its floor only up to this many "
        "partitions (they cost about 70 ms per partition)",
    )  # fmt: skip
    p.add_argument("--no-stream", action="store_true")
    p.add_argument("--json", dest="json_path")
    return p.parse_args(argv)


def produce(bootstrap: str, topic: str, counts: list[int], size: int) -> None:
    """``counts[p]`` records of ``size`` bytes to each partition p. BROKER.md: the embedded
    broker's log end is the start of the last batch, so each partition's last record goes in a
    batch of its own (flushed apart); the log ends are checked."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": "50",
            "batch.num.messages": "10000",
            "batch.size": "1000000",
            "queue.buffering.max.messages": "1000000",
            "queue.buffering.max.kbytes": "1048576",
        }
    )
    value = b"v" * size
    for final in (False, True):
        for p, count in enumerate(counts):
            for i in [count - 1] if final else range(count - 1):
                while True:
                    try:
                        producer.produce(topic, value, b"k%07d" % i, partition=p)
                        break
                    except BufferError:
                        producer.poll(0.05)
        producer.flush(300)
    ends = latest_offsets(bootstrap, topic, len(counts))
    if ends != counts:
        raise RuntimeError(f"{topic}: the log ends at {ends[:5]}..., expected {counts[:5]}...")


class Bench:
    def __init__(self, bootstrap: str, stats_dir: Path) -> None:
        os.environ[STATS_DIR_ENV] = str(stats_dir)
        from kafka_direct.testing.local import local_spark

        self.spark = local_spark(
            "kafka_direct-bench-partitions",
            conf={f"spark.executorEnv.{STATS_DIR_ENV}": str(stats_dir)},
        )
        self.spark.dataSource.register(floor_source())
        self.bootstrap, self.stats_dir = bootstrap, stats_dir

    def _agg(self, df: Any) -> tuple[int, int]:
        from pyspark.sql import functions as F

        row = df.agg(F.count(F.lit(1)).alias("n"), F.sum(F.length("value")).alias("b")).collect()
        return int(row[0]["n"]), int(row[0]["b"] or 0)

    def batch(self, topic: str, options: dict[str, str]) -> dict[str, Any]:
        t0 = time.time()
        df = (
            self.spark.read.format("kafka_direct")
            .option("kafka.bootstrap.servers", self.bootstrap)
            .option("subscribe", topic)
            .options(**options)
            .load()
        )
        rows, _ = self._agg(df)
        wall = time.time() - t0
        tasks = {t["task"] for t in task_stats(self.stats_dir, topic, t0, time.time())}
        return {"wall_s": wall, "rows": rows, "tasks": len(tasks)}

    def floor(self, rows: int, tasks: int, size: int) -> dict[str, Any]:
        counts = per_partition_counts(rows, tasks)
        t0 = time.time()
        df = (
            self.spark.read.format("kafka_direct_bench_floor")
            .option("counts", ",".join(map(str, counts)))
            .option("size", str(size))
            .option("batch", "20000")
            .load()
        )
        got, _ = self._agg(df)
        floor_s = time.time() - t0
        t0 = time.time()
        n = self.spark.range(0, rows, 1, tasks).count()
        range_s = time.time() - t0
        assert got == rows == n, (got, rows, n)
        return {"floor_s": floor_s, "range_s": range_s}

    def stream(self, topic: str, options: dict[str, str], checkpoint: str) -> dict[str, Any]:
        """One ``Trigger.AvailableNow`` run: its wall time, and its micro-batches' trigger
        durations and rows."""
        t0 = time.time()
        query = (
            self.spark.readStream.format("kafka_direct")
            .option("kafka.bootstrap.servers", self.bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", options.pop("startingOffsets", "earliest"))
            .options(**options)
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(1800)
        wall = time.time() - t0
        progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
        tasks = {t["task"] for t in task_stats(self.stats_dir, topic, t0, time.time())}
        return {
            "wall_s": wall,
            "batches": len(progress),
            "rows": sum(p["numInputRows"] for p in progress),
            "trigger_s": sum(p["durationMs"].get("triggerExecution", 0) for p in progress) / 1e3,
            "tasks": len(tasks),
        }

    def stop(self) -> None:
        self.spark.stop()


def idle_micro_batch(bench: Bench, topic: str, partitions: int, options: dict[str, str]) -> Any:
    """A stream pinned at the log end, then one new record on every tenth partition: the
    micro-batch that reads them."""
    checkpoint = tempfile.mkdtemp(prefix="kafka-direct-bench-partitions-ckpt-")
    bench.stream(topic, {**options, "startingOffsets": "latest"}, checkpoint)
    counts = [1 if p % 10 == 0 else 0 for p in range(partitions)]
    before = latest_offsets(bench.bootstrap, topic, partitions)
    producer = Producer({"bootstrap.servers": bench.bootstrap, "linger.ms": "5"})
    for p, n in enumerate(counts):
        if n:
            producer.produce(topic, b"idle", b"k", partition=p)
    producer.flush(60)
    want = [b + n for b, n in zip(before, counts, strict=True)]
    if latest_offsets(bench.bootstrap, topic, partitions) != want:
        raise RuntimeError("the idle partitions' new records did not arrive")
    out = bench.stream(topic, dict(options), checkpoint)
    if out["rows"] != sum(counts):
        raise RuntimeError(f"idle micro-batch read {out['rows']} rows, expected {sum(counts)}")
    return out


def planning_ms(bootstrap: str, partitions: int, triggers: int = 15) -> dict[str, float]:
    """The driver's work per trigger at ``partitions`` partitions with new data in each:
    latest offsets, the ranges (earliest offsets for the data-loss check) and packing."""
    from kafka_direct.config.source import parse_source_options
    from kafka_direct.planning.micro_batch import StreamPlanner
    from kafka_direct.source.common import input_partitions, make_reader

    topic = new_topic("plan")
    create_topic(bootstrap, topic, partitions)
    try:
        produce(bootstrap, topic, [3] * partitions, 10)
        opts = parse_source_options(
            {"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
             "startingOffsets": "earliest"},
            streaming=True,
        )  # fmt: skip
        planner = StreamPlanner(opts, lambda: make_reader(opts))
        try:
            start = planner.initial_offsets()
            planner.plan_ranges(start, planner.latest_offsets(start, read_all=False))
            total, packing = [], []
            for _ in range(triggers):
                t0 = time.perf_counter()
                end = planner.latest_offsets(start, read_all=False)
                ranges = planner.plan_ranges(start, end)
                t1 = time.perf_counter()
                tasks = input_partitions(opts, ranges, planner.log_starts)
                t2 = time.perf_counter()
                total.append((t2 - t0) * 1e3)
                packing.append((t2 - t1) * 1e3)
        finally:
            planner.close()
    finally:
        delete_topics(bootstrap, [topic])
    return {
        "partitions": partitions,
        "median_ms": statistics.median(total),
        "packing_median_ms": statistics.median(packing),
        "tasks": len(tasks),
    }


def run_one(bench: Bench, args: argparse.Namespace, partitions: int, kind: str) -> dict[str, Any]:
    counts = (
        [args.small] * partitions if kind == "small" else per_partition_counts(args.big, partitions)
    )
    total = sum(counts)
    topic = new_topic(f"parts{partitions}-{kind}")
    create_topic(bench.bootstrap, topic, partitions)
    log(f"{partitions} partitions, {total:,} records ({kind}): producing to {topic}")
    produce(bench.bootstrap, topic, counts, args.size)
    row: dict[str, Any] = {"partitions": partitions, "kind": kind, "records": total}
    modes = [("after", AFTER)] + ([("before", BEFORE)] if partitions <= args.before_up_to else [])
    try:
        bench.batch(topic, {})  # warm-up: the planner's and the workers' first read of a topic
        for name, options in modes:
            got = bench.batch(topic, dict(options))
            if got["rows"] != total:
                raise RuntimeError(f"{name} read {got['rows']} rows, expected {total}")
            row[f"batch_{name}"] = got
            log(f"  batch {name}: {got['wall_s']:.2f} s in {got['tasks']} task(s)")
            row[f"floor_{name}"] = bench.floor(total, got["tasks"], args.size)
            log(f"  floor at {got['tasks']} task(s): {row[f'floor_{name}']}")
        if not args.no_stream:
            for name, options in modes:
                ckpt = tempfile.mkdtemp(prefix="kafka-direct-bench-partitions-ckpt-")
                row[f"stream_{name}"] = got = bench.stream(topic, dict(options), ckpt)
                if got["rows"] != total:
                    raise RuntimeError(f"stream {name} read {got['rows']} rows, expected {total}")
                log(f"  stream {name}: {got}")
            for name, options in modes if kind == "small" and not args.no_stream else ():
                row[f"idle_{name}"] = idle_micro_batch(bench, topic, partitions, dict(options))
                log(f"  idle micro-batch {name}: {row[f'idle_{name}']}")
    finally:
        delete_topics(bench.bootstrap, [topic])
    return row


def render(rows: list[dict[str, Any]]) -> str:
    T = "trigger_s"

    def s(row: dict[str, Any], key: str, field: str = "wall_s") -> str:
        value = row.get(key)
        if value is None:
            return "–"
        tasks = f" ({value['tasks']})" if "tasks" in value and field in ("wall_s", T) else ""
        return f"{value[field]:.2f}{tasks}"

    lines = [
        "Seconds. Batch: the query's wall time; micro-batches: Spark's triggerExecution.",
        "",
        "| partitions | records | batch before (tasks) | batch after (tasks) | floor, before's "
        "tasks | floor, after's tasks | spark.range, before's / after's tasks | stream "
        "micro-batch before | after | idle micro-batch before | after |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ranges = f"{s(r, 'floor_before', 'range_s')} / {s(r, 'floor_after', 'range_s')}"
        lines.append(
            f"| {r['partitions']:,} | {r['records']:,} | {s(r, 'batch_before')} | "
            f"{s(r, 'batch_after')} | {s(r, 'floor_before', 'floor_s')} | "
            f"{s(r, 'floor_after', 'floor_s')} | {ranges} | {s(r, 'stream_before', T)} | "
            f"{s(r, 'stream_after', T)} | {s(r, 'idle_before', T)} | {s(r, 'idle_after', T)} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from kafka_direct.testing.broker import EmbeddedBroker

    args = parse_args(argv)
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    broker = None if external else EmbeddedBroker().start()
    bootstrap = external or broker.bootstrap_servers  # type: ignore[union-attr]
    stats_dir = Path(
        tempfile.mkdtemp(prefix=f"kafka-direct-bench-partitions-{uuid.uuid4().hex[:6]}")
    )
    bench = None
    rows: list[dict[str, Any]] = []
    try:
        planning = planning_ms(bootstrap, 1000)
        log(f"driver planning per trigger at 1,000 partitions: {planning}")
        bench = Bench(bootstrap, stats_dir)
        log("warming up the JVM and the Python workers")
        bench.floor(1000, 2, args.size)
        for partitions in [int(p) for p in args.partitions.split(",")]:
            for kind in ("small", "big"):
                rows.append(run_one(bench, args, partitions, kind))
    finally:
        if bench is not None:
            bench.stop()
        if broker is not None:
            broker.stop()
    print(render(rows), flush=True)
    print(
        f"\nDriver planning per trigger at 1,000 partitions: {planning['median_ms']:.1f} ms "
        f"median, of which packing {planning['packing_median_ms']:.2f} ms "
        f"({planning['tasks']} tasks)",
        flush=True,
    )
    if args.json_path:
        Path(args.json_path).write_text(
            json.dumps({"planning": planning, "rows": rows}, indent=2, default=str)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
