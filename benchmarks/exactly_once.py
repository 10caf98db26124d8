#!/usr/bin/env python
"""What exactly-once costs: a kafka_direct -> kafka_direct stream at 1 s and 10 s triggers, with
the sink at-least-once (C fast path, and the Python path the exactly-once sink writes through)
and exactly-once, on real Apache Kafka. Runs in the benchmark process (the Spark driver).

    python benchmarks/exactly_once.py                     # starts a one-broker KafkaCluster
    python benchmarks/exactly_once.py --rate 20000 --batches 4
    python benchmarks/exactly_once.py --rate 20000 --batches 10 --rounds 2   # order alternates
    python benchmarks/exactly_once.py --bootstrap-servers host:9092 --json out.json

A trigger of T seconds reads ``rate x T`` records per micro-batch (``maxOffsetsPerTrigger``), the
size a stream of ``rate`` records/s gives each micro-batch. Every mode reads the same input topic
(2 partitions, 100-byte values, 8-byte keys) from the start and writes a fresh output topic. The
report gives, per trigger and mode, the median time Spark spent writing a micro-batch
(``durationMs.addBatch`` of the query progress: reading, the sink's tasks and its commit), the
records per second that makes, and the ratio to at-least-once on the same path. The first
micro-batch of each query (Python workers starting) is left out. Each query is stopped between
micro-batches; its output topic is read back with read_committed and must hold exactly the
records of the micro-batches that ran, each key once. With ``--rounds N`` every trigger's modes
run N times, in reverse order every second round, and each ratio compares queries of one round.
The report starts with the versions and the load average at the start and at the end.

Where a micro-batch's time goes: a second table gives, per mode, the medians of the measured
micro-batches' other ``durationMs`` parts (the driver's), of the write tasks' own time (from the
executors' statistics lines, ``KAFKA_DIRECT_STATS_DIR``), and, exactly-once, of each step of a
task (``phases``: waiting for its first rows, making its clients, ``init_transactions``, reading
its marker, producing, flushing, adding the marker, committing, closing).
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
from datetime import datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from kafka_direct_bench.executor_stats import STATS_DIR_ENV, task_stats
from kafka_direct_bench.results import machine_info
from kafka_direct_bench.suite_report import abba

MODES: dict[str, dict[str, str]] = {
    "at-least-once, C fast path": {},
    "at-least-once, Python path": {"fastPath.enabled": "false"},
    "exactly-once (Python path)": {"deliveryGuarantee": "exactly-once"},
}
PARTITIONS = 2
#: The driver's parts of a micro-batch (StreamingQueryProgress.durationMs) shown beside addBatch.
DRIVER_PARTS = ("triggerExecution", "latestOffset", "queryPlanning", "walCommit", "commitOffsets")


def _log(message: str) -> None:
    print(f"[eos-bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _create(bootstrap: str, name: str) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(60)
    return name


def _produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000, "acks": "all"}
    )
    value = os.urandom(100)
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value, i.to_bytes(8, "big"), partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0


def _count_committed(bootstrap: str, topic: str, expected: int) -> tuple[int, int]:
    """(records, distinct keys) a read_committed reader finds in ``topic``."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:6]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    seen, keys, idle_since = 0, set(), time.monotonic()
    while time.monotonic() - idle_since < 5:
        messages = consumer.consume(50_000, timeout=1.0)
        if messages:
            for message in messages:
                if message.error() is None:
                    seen += 1
                    keys.add(message.key())
            idle_since = time.monotonic()
        elif seen >= expected:
            break
    consumer.close()
    return seen, len(keys)


def _epoch(timestamp: str) -> float:
    """A progress entry's ``timestamp`` (ISO 8601, UTC) in seconds since the epoch."""
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def _breakdown(measured: list[dict[str, Any]], tasks: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of the driver's parts, of the write tasks' time and of their steps."""
    parts = {
        key: statistics.median([p["durationMs"].get(key, 0) for p in measured])
        for key in DRIVER_PARTS
    }
    phases: dict[str, list[float]] = {}
    for task in tasks:
        for name, seconds in (task.get("phases") or {}).items():
            phases.setdefault(name, []).append(seconds * 1000.0)
    return {
        "driver_ms": parts,
        "tasks": len(tasks),
        "task_ms": statistics.median([(t["end"] - t["start"]) * 1000.0 for t in tasks])
        if tasks
        else None,
        "phase_ms": {name: statistics.median(values) for name, values in phases.items()},
    }


def _run(spark: Any, bootstrap: str, source: str, trigger_s: int, rate: int, batches: int,
         options: dict[str, str], stats_dir: Path) -> dict[str, Any]:  # fmt: skip
    out = _create(bootstrap, f"bench-out-{uuid.uuid4().hex[:8]}")
    checkpoint = tempfile.mkdtemp(prefix="eos-bench-ck-")
    writer = (
        spark.readStream.format("kafka_direct")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(rate * trigger_s))
        .load()
        .select("key", "value")
        .writeStream.format("kafka_direct")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", out)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime=f"{trigger_s} seconds")
    )
    for key, value in options.items():
        writer = writer.option(key, value)
    query = writer.start()
    try:
        deadline = time.monotonic() + 120 + 30 * trigger_s * batches
        while time.monotonic() < deadline:
            done = [p for p in query.recentProgress if p["numInputRows"] > 0]
            if len(done) >= batches + 1:
                break
            if query.exception() is not None:
                raise RuntimeError(str(query.exception()))
            time.sleep(0.5)
        else:
            raise RuntimeError(f"{batches + 1} micro-batches did not finish in time")
        # Stop between micro-batches: a micro-batch stopped mid-way has no progress entry, but
        # the tasks that finished committed (exactly-once) or wrote (at-least-once) already.
        quiet = time.monotonic() + 60
        while query.status["isTriggerActive"] and time.monotonic() < quiet:
            time.sleep(0.05)
    finally:
        query.stop()
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    measured = progress[1 : batches + 1]
    rows = [p["numInputRows"] for p in measured]
    add_ms = [p["durationMs"].get("addBatch", 0) for p in measured]
    written = sum(p["numInputRows"] for p in progress)
    read_back, distinct = _count_committed(bootstrap, out, written)
    median_ms = statistics.median(add_ms)
    # The first micro-batch's tasks (Python workers starting) are left out, as its addBatch is.
    # The output topic's lines are its write tasks' (its readers are not Spark's).
    tasks = task_stats(stats_dir, out, _epoch(measured[0]["timestamp"]), float("inf"))
    return {
        **_breakdown(measured, tasks),
        "trigger_s": trigger_s,
        "rows_per_batch": statistics.median(rows),
        "add_batch_ms": add_ms,
        "median_add_batch_ms": median_ms,
        "records_per_s": statistics.median(rows) / (median_ms / 1000.0) if median_ms else None,
        "written": written,
        "read_back": read_back,
        "distinct_keys": distinct,
        "exact": read_back == written == distinct,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-servers", default=None)
    parser.add_argument("--rate", type=int, default=20_000, help="records/s a trigger second reads")
    parser.add_argument("--batches", type=int, default=3, help="measured micro-batches per query")
    parser.add_argument("--triggers", default="1,10", help="trigger intervals in seconds")
    parser.add_argument(
        "--rounds", type=int, default=1, help="rounds; every second one runs the modes reversed"
    )
    parser.add_argument("--json", dest="json_path", default=None)
    args = parser.parse_args(argv)
    triggers = [int(t) for t in args.triggers.split(",")]
    machine = machine_info()

    cluster = None
    bootstrap = args.bootstrap_servers
    if bootstrap is None:
        from kafka_direct.testing.kafka_cluster import KafkaCluster

        cluster = KafkaCluster().start()
        bootstrap = cluster.bootstrap_servers
    from kafka_direct.testing.local import local_spark

    try:
        # Every query reads from the start, so one topic serves every round.
        needed = args.rate * max(triggers) * (args.batches + 1)
        source = _create(bootstrap, f"bench-in-{uuid.uuid4().hex[:8]}")
        _log(f"producing {needed} records to {source}")
        _produce(bootstrap, source, needed)
        stats_dir = Path(tempfile.mkdtemp(prefix="eos-bench-stats-"))
        os.environ[STATS_DIR_ENV] = str(stats_dir)  # inherited by the JVM and its Python workers
        spark = local_spark(
            "eos-bench", cores=2, conf={f"spark.executorEnv.{STATS_DIR_ENV}": str(stats_dir)}
        )
        results: list[dict[str, Any]] = []
        for round_no in range(1, args.rounds + 1):
            for trigger_s in triggers:
                # Odd rounds in order, even ones reversed: no mode always runs first.
                for name in abba(list(MODES), round_no - 1):
                    options = MODES[name]
                    _log(f"round {round_no}, trigger {trigger_s} s, {name}")
                    row = _run(
                        spark, bootstrap, source, trigger_s, args.rate, args.batches, options,
                        stats_dir,
                    )  # fmt: skip
                    row["mode"], row["round"] = name, round_no
                    results.append(row)
                    _log(json.dumps(row))
        spark.stop()
    finally:
        if cluster is not None:
            cluster.stop()
    machine["load_average_1m_at_end"] = os.getloadavg()[0]
    if cluster is not None:
        machine["versions"]["kafka"] = (
            f"Apache Kafka {cluster.kafka_version} (KafkaCluster, one broker)"
        )
    print(_render(results, args, machine))
    if args.json_path:
        with open(args.json_path, "w") as out:
            json.dump({"machine": machine, "results": results}, out, indent=2)
    return 0 if all(r["exact"] for r in results) else 1


def _render(
    results: list[dict[str, Any]], args: argparse.Namespace, machine: dict[str, Any]
) -> str:
    versions = ", ".join(f"{name} {version}" for name, version in machine["versions"].items())
    lines = [
        f"Exactly-once cost: {args.rate} records/s of trigger, {args.batches} measured "
        "micro-batches per query, 100-byte values, 2 partitions, local[2]",
        f"Versions: {versions}. Load average (1 min): {machine['load_average_1m_at_start']:.2f} "
        f"at the start, {machine['load_average_1m_at_end']:.2f} at the end.",
        "",
        "| round | trigger | mode | records / micro-batch | median addBatch (ms) | records/s | vs "
        "at-least-once (same path, same round) | read back exact |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in results:
        same = next(
            r for r in results
            if r["trigger_s"] == row["trigger_s"] and r["round"] == row["round"]
            and r["mode"] == "at-least-once, Python path"
        )  # fmt: skip
        ratio = (
            f"{row['records_per_s'] / same['records_per_s']:.2f}x"
            if row["records_per_s"] and same["records_per_s"]
            else "-"
        )
        lines.append(
            f"| {row['round']} | {row['trigger_s']} s | {row['mode']} | "
            f"{row['rows_per_batch']:,.0f} | "
            f"{row['median_add_batch_ms']:,.0f} | {row['records_per_s'] or 0:,.0f} | {ratio} | "
            f"{'yes' if row['exact'] else 'NO'} ({row['read_back']}/{row['written']}) |"
        )
    lines += [
        "",
        "Medians per measured micro-batch (ms): the driver's parts of it, a write task's own "
        "time, and each step of an exactly-once task",
        "",
    ]
    steps = list(dict.fromkeys(name for row in results for name in row["phase_ms"]))
    head = ["round", "trigger", "mode", *DRIVER_PARTS, "addBatch", "write task", *steps]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in results:
        cells = [str(row["round"]), f"{row['trigger_s']} s", row["mode"]]
        cells += [f"{row['driver_ms'][key]:,.0f}" for key in DRIVER_PARTS]
        cells.append(f"{row['median_add_batch_ms']:,.0f}")
        cells.append("-" if row["task_ms"] is None else f"{row['task_ms']:,.0f}")
        cells += [
            f"{row['phase_ms'][name]:,.1f}" if name in row["phase_ms"] else "-" for name in steps
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
