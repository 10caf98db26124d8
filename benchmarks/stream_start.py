#!/usr/bin/env python
"""Where a ``Trigger.AvailableNow`` stream's time goes, next to a batch read of the same data:
``format("kafka")`` (Spark's connector, tuned as the suite tunes it) and ``format("kafka_direct")``
in the same Spark, on the same topic. Runs in the benchmark process (the driver of a local
Spark); kafka_direct's stream runner and readers run in the Python processes Spark starts.

    python benchmarks/stream_start.py                         # 1,000,000 x 100 B, 3 rounds
    python benchmarks/stream_start.py --records 200000 --rounds 2 --json out.json

``python benchmarks/oracle.py --suite`` finds kafka_direct's AvailableNow read far behind its
batch read of the same records, where the JVM connector's two are level. This command splits
each stream query's wall time into: ``start()`` returning; from there to the first micro-batch
(the source's set-up: for a Python source, Spark starts a new Python process, its stream runner,
which imports PySpark and the source and builds the stream reader); the micro-batch
(``triggerExecution``, with ``addBatch``, the read); and the query's end. The batch read (a
``count`` and ``sum(length(value))``) beside it is the same read without a stream. Rounds
alternate the formats' order; the first query of each format is untimed (the JIT, the Python
workers). It runs on the PySpark Spark's connector was built for, as ``latency.py`` does.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kafka_direct_bench.common import finish_run, loadavg, log

FORMATS = ("kafka", "kafka_direct")
#: The suite's tuned JVM reader (kafka_direct_bench.suite_data): without it each JVM task waits
#: out the broker's fetch.max.wait.ms at the log end.
JVM_TUNED = {
    "kafka.fetch.max.wait.ms": "10",
    "kafka.max.poll.records": "20000",
    "kafka.fetch.max.bytes": "67108864",
    "kafka.max.partition.fetch.bytes": "16777216",
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100, help="value bytes")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="write the results here as well")
    return parser.parse_args(argv)


def _epoch(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


class Run:
    def __init__(self, spark: Any, bootstrap: str, topic: str, args: argparse.Namespace) -> None:
        self.spark, self.args, self.work = (
            spark,
            args,
            Path(f"/tmp/stream-start-{uuid.uuid4().hex[:6]}"),
        )
        self.options = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic}

    def _options(self, fmt: str) -> dict[str, str]:
        return {**self.options, **(JVM_TUNED if fmt == "kafka" else {})}

    def batch(self, fmt: str) -> float:
        from pyspark.sql import functions as F

        df = self.spark.read.format(fmt).options(**self._options(fmt)).load()
        began = time.time()
        count, size = df.agg(F.count(F.lit(1)), F.sum(F.length("value"))).collect()[0]
        seconds = time.time() - began
        expected = (self.args.records, self.args.records * self.args.size)
        if (count, size) != expected:
            raise RuntimeError(f"{fmt} batch read: {(count, size)}, expected {expected}")
        return seconds

    def stream(self, fmt: str) -> dict[str, float]:
        began = time.time()
        query = (
            self.spark.readStream.format(fmt)
            .options(**self._options(fmt))
            .option("startingOffsets", "earliest")
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", str(self.work / uuid.uuid4().hex))
            .trigger(availableNow=True)
            .start()
        )
        started = time.time()
        query.awaitTermination()
        ended = time.time()
        if query.exception() is not None:
            raise RuntimeError(f"{fmt} stream failed: {query.exception()}")
        progress = [p for p in query.recentProgress if p["numInputRows"]]
        rows = sum(p["numInputRows"] for p in progress)
        if rows != self.args.records:
            raise RuntimeError(f"{fmt} stream read {rows} rows, expected {self.args.records}")
        first = _epoch(progress[0]["timestamp"])
        last = progress[-1]
        last_end = _epoch(last["timestamp"]) + last["durationMs"]["triggerExecution"] / 1000.0
        return {
            "total_s": ended - began,
            "start_call_s": started - began,
            "to_first_trigger_s": first - started,
            "triggers_s": last_end - first,
            "add_batch_s": sum(p["durationMs"].get("addBatch", 0) for p in progress) / 1000.0,
            "after_last_trigger_s": ended - last_end,
            "micro_batches": len(progress),
        }


#: What Spark's stream runner does before the first micro-batch, step by step, in a new Python
#: process like the runner's (same interpreter, PySpark from site-packages as register() sets).
_RUNNER_STEPS = """
import json, sys, time
t0 = time.perf_counter()
import pyspark.sql.streaming.python_streaming_source_runner
t1 = time.perf_counter()
from kafka_direct.source.datasource import KafkaDirectDataSource
t2 = time.perf_counter()
source = KafkaDirectDataSource(json.loads(sys.argv[1]))
schema = source.schema()
t3 = time.perf_counter()
reader = source.streamReader(schema)
t4 = time.perf_counter()
reader.prepareForTriggerAvailableNow()
t5 = time.perf_counter()
reader.initialOffset()
t6 = time.perf_counter()
names = ("pyspark_runner_import", "kafka_direct_import", "schema", "stream_reader",
         "prepare_available_now", "initial_offset")
stamps = (t0, t1, t2, t3, t4, t5, t6)
print(json.dumps({n: (b - a) * 1000 for n, a, b in zip(names, stamps, stamps[1:])}))
"""


def runner_steps(options: dict[str, str], runs: int) -> list[dict[str, float]]:
    """Time :data:`_RUNNER_STEPS` in ``runs`` new processes (``schema`` runs in Spark's planner
    process, not the runner: reported apart)."""
    import subprocess

    found = []
    for _ in range(runs):
        began = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-c", _RUNNER_STEPS, json.dumps(options)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        steps = json.loads(out.strip().splitlines()[-1])
        steps["process_ms"] = (time.perf_counter() - began) * 1000
        found.append(steps)
    return found


def report(results: dict[str, Any]) -> None:
    print(f"versions: {', '.join(f'{k} {v}' for k, v in results['versions'].items())}")
    print(f"load average: before {results['load_before']}, after {results['load_after']}")
    a = results["args"]
    print(
        f"{a['records']:,} records x {a['size']} B in {a['partitions']} partitions; "
        "AvailableNow into noop; medians of the rounds, seconds"
    )
    keys = ("total_s", "start_call_s", "to_first_trigger_s", "triggers_s", "add_batch_s",
            "after_last_trigger_s")  # fmt: skip
    print(
        f"{'format':<13} {'batch read':>10} {'stream':>7} "
        + " ".join(f"{k[:-2]:>20}" for k in keys[1:])
    )
    for fmt in FORMATS:
        rounds = [r for r in results["rounds"] if r["format"] == fmt]
        if not rounds:
            continue
        med = {k: statistics.median(r["stream"][k] for r in rounds) for k in keys}
        batch = statistics.median(r["batch_s"] for r in rounds)
        print(
            f"{fmt:<13} {batch:10.2f} {med['total_s']:7.2f} "
            + " ".join(f"{med[k]:20.2f}" for k in keys[1:])
        )
    steps = results["runner_steps"]
    print(f"a stream runner's steps in a new Python process, ms, each of {len(steps)} runs:")
    for name in steps[0]:
        print(f"  {name:<22} " + " · ".join(f"{s[name]:.0f}" for s in steps))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from kafka_direct_bench.oracle_python import run_on_oracle_pyspark, versions

    run_on_oracle_pyspark(__file__, argv)
    args = parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from kafka_direct_bench.dataset import create_topic, new_topic, produce_dataset

    from kafka_direct.testing.kafka_cluster import KAFKA_VERSION, KafkaCluster
    from kafka_direct.testing.local import local_spark
    from kafka_direct.testing.spark_connector import (
        connector_version,
        spark_kafka_conf,
        spark_kafka_jars,
    )

    jars = spark_kafka_jars()
    load_before = loadavg()
    rounds: list[dict[str, Any]] = []
    with KafkaCluster(brokers=1) as cluster:
        bootstrap = cluster.bootstrap_servers
        topic = new_topic("stream-start")
        create_topic(bootstrap, topic, args.partitions)
        produce_dataset(bootstrap, topic, args.records, args.size, args.partitions, seed=7)
        spark = local_spark("kafka_direct-stream-start", conf=spark_kafka_conf(jars))
        try:
            import kafka_direct

            kafka_direct.register(spark)
            ver = {**versions(spark, connector_version(jars)), "kafka_broker": KAFKA_VERSION}
            log("versions: " + ", ".join(f"{k} {v}" for k, v in ver.items()))
            run = Run(spark, bootstrap, topic, args)
            for fmt in FORMATS:  # untimed
                run.batch(fmt)
                run.stream(fmt)
            for r in range(args.rounds):
                for fmt in FORMATS if r % 2 == 0 else FORMATS[::-1]:
                    got = {"round": r, "format": fmt, "batch_s": run.batch(fmt)}
                    got["stream"] = run.stream(fmt)
                    log(f"round {r} {fmt}: batch {got['batch_s']:.2f} s, stream {got['stream']}")
                    rounds.append(got)
        finally:
            spark.stop()
        options = {**run.options, "startingOffsets": "earliest"}
        steps = runner_steps(options, 3)
    return finish_run(
        "stream_start.py",
        argv,
        load_before,
        report,
        args.json,
        versions=ver,
        args=vars(args),
        rounds=rounds,
        runner_steps=steps,
    )


if __name__ == "__main__":
    sys.exit(main())
