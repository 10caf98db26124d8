#!/usr/bin/env python
"""A micro-batch's floor without Kafka: Spark's own ``rate`` source (a JVM source) next to a
Python data source that reads nothing, under the default trigger with ``foreachBatch``, in the
same Spark. Runs in the benchmark process (the driver of a local Spark); the Python source's
reader runs in Spark's Python workers.

    python benchmarks/stream_floor.py                       # 3 rounds of 20 s each
    python benchmarks/stream_floor.py --rounds 2 --seconds 30 --json out.json

``benchmarks/latency.py`` puts kafka_direct's micro-batch period beside the JVM connector's. This
command says how much of the difference any Python source pays, Kafka or not: each query reads
``--rows`` rows per partition per micro-batch from ``--partitions`` partitions (the Python
source: ``kafka_direct_bench.floor_source`` with one micro-batch per trigger; ``rate``: the
same number of rows per second, which under a back-to-back trigger gives each micro-batch the
rows of its period), and ``foreachBatch`` takes two columns to the driver as Arrow, as the
latency benchmark's does. Reported per round, sources in alternating order: Spark's
``durationMs`` per phase (medians over the micro-batches after the first three), the whole
micro-batch (``triggerExecution``) first. ``rate`` has new rows once a second only, so its
period between micro-batches is a second: compare the phases, not the periods. It runs on the
PySpark that ``benchmarks/latency.py`` runs on (the one Spark's connector was built for), so
that the two commands' figures compare.
"""

from __future__ import annotations

import argparse
import itertools
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

SOURCES = ("rate", "python")
PHASES = ("triggerExecution", "latestOffset", "queryPlanning", "walCommit", "addBatch",
          "commitOffsets", "getBatch")  # fmt: skip


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20.0, help="per query")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rows", type=int, default=60, help="per partition per micro-batch")
    parser.add_argument("--json", help="write the results here as well")
    return parser.parse_args(argv)


def _ms(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000.0


def run_query(spark: Any, source: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """One query of ``source`` for ``args.seconds``: its period and phases."""
    from kafka_direct_bench.spark_reads import stop_between_batches

    if source == "rate":
        frame = (
            spark.readStream.format("rate")
            .option("rowsPerSecond", args.rows * args.partitions)
            .option("numPartitions", args.partitions)
            .load()
            .select("value", "timestamp")
        )
    else:
        frame = (
            spark.readStream.format("kafka_direct_bench_floor")
            .option("counts", ",".join([str(args.rows)] * args.partitions))
            .option("size", "100")
            .option("batch", str(args.rows))
            .option("micro_batches", str(10**9))
            .load()
            .select("offset", "timestamp")
        )
    rows, last_batch = [0], [-1]

    def each(df: Any, batch_id: int) -> None:
        table = df.toArrow()
        rows[0] += table.num_rows
        if table.num_rows:
            last_batch[0] = max(last_batch[0], batch_id)

    query = (
        frame.writeStream.foreachBatch(each)
        .option("checkpointLocation", str(work / f"{source}-{uuid.uuid4().hex[:6]}"))
        .start()
    )
    try:
        time.sleep(args.seconds)
        if query.exception() is not None:
            raise RuntimeError(f"{source} query failed: {query.exception()}")
    finally:
        stop_between_batches(query, last_batch[0])
    progress = [json.loads(p.json) if hasattr(p, "json") else p for p in query.recentProgress]
    data = [p for p in progress if (p.get("numInputRows") or 0) > 0]
    # The first micro-batches start the Python workers and the JIT: only the rest count.
    steady = data[3:] if len(data) > 6 else data
    starts = sorted(_ms(p["timestamp"]) for p in steady)
    periods = [b - a for a, b in itertools.pairwise(starts)]
    return {
        "source": source,
        "rows": rows[0],
        "batches": len(data),
        "mean_period_ms": statistics.fmean(periods) if periods else None,
        "median_phase_ms": {
            name: statistics.median(p["durationMs"].get(name, 0) for p in steady) for name in PHASES
        }
        if steady
        else {},
    }


def report(results: dict[str, Any]) -> None:
    print(f"versions: {', '.join(f'{k} {v}' for k, v in results['versions'].items())}")
    print(f"load average: before {results['load_before']}, after {results['load_after']}")
    a = results["args"]
    print(
        f"{a['rows']} rows per partition x {a['partitions']} partitions per micro-batch, "
        f"{a['seconds']:g} s per query, default trigger, foreachBatch (two columns as Arrow)"
    )
    print(f"{'source':<8} {'batch ms':>9} {'period ms':>10} {'batches':>8}  median phase ms")
    for source in SOURCES:
        rounds = [r for r in results["rounds"] if r["source"] == source]
        for r in rounds:
            phases = " ".join(f"{k}={v:g}" for k, v in r["median_phase_ms"].items())
            period = r["mean_period_ms"]
            shown = f"{period:10.0f}" if period is not None else f"{'-':>10}"
            whole = r["median_phase_ms"].get("triggerExecution", 0)
            print(f"{source:<8} {whole:9.0f} {shown} {r['batches']:8d}  {phases}")
        wholes = [r["median_phase_ms"].get("triggerExecution", 0) for r in rounds]
        adds = [r["median_phase_ms"].get("addBatch", 0) for r in rounds]
        if rounds:
            print(
                f"{source + ' median':<15} micro-batch {statistics.median(wholes):.0f} ms, "
                f"addBatch {statistics.median(adds):.0f} ms"
            )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from kafka_direct_bench.oracle_python import run_on_oracle_pyspark, versions

    run_on_oracle_pyspark(__file__, argv)
    args = parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from kafka_direct_bench.floor_source import floor_source

    from kafka_direct.testing.local import local_spark

    load_before = loadavg()
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"stream-floor-{uuid.uuid4().hex[:6]}"
    spark = local_spark("kafka_direct-stream-floor")
    try:
        spark.dataSource.register(floor_source())
        ver = versions(spark, None)
        log("versions: " + ", ".join(f"{k} {v}" for k, v in ver.items()))
        for source in SOURCES:  # untimed: the JIT and the Python workers
            run_query(spark, source, argparse.Namespace(**{**vars(args), "seconds": 3.0}), work)
        rounds = []
        for r in range(args.rounds):
            for source in SOURCES if r % 2 == 0 else SOURCES[::-1]:
                got = run_query(spark, source, args, work)
                log(f"round {r} {source}: period {got['mean_period_ms']} ms, {got['batches']} "
                    f"micro-batches, phases {got['median_phase_ms']}")  # fmt: skip
                rounds.append({"round": r, **got})
    finally:
        spark.stop()
    return finish_run(
        "stream_floor.py",
        argv,
        load_before,
        report,
        args.json,
        versions=ver,
        args=vars(args),
        rounds=rounds,
    )


if __name__ == "__main__":
    sys.exit(main())
