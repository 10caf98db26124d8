#!/usr/bin/env python
"""What the executors' prefetch depth (librdkafka's ``queued.min.messages``) does to a batch
read of a backlog: ``python benchmarks/prefetch_depth.py``. Runs in the benchmark process, which
is also the Spark driver (local[2], the installed PySpark; Apache Kafka from
``kafka_direct.testing.KafkaCluster`` unless ``--bootstrap-servers`` is given).

One data set (``--records`` of ``--size`` random bytes in ``--partitions`` partitions) is read
with ``spark.read.format("kafka_direct")...groupBy("partition").count()`` once per depth in
``--depths`` (given as the reader option ``kafka.queued.min.messages``), in rounds whose order
alternates, after one untimed read per depth. Every read must count exactly the records
produced. Each depth's consumers are pooled under their own configuration, so every timed read
after the first reuses its depth's consumers, as a stream's next micro-batch does.

Its other side, the idle pooled consumers of a steady stream, is measured by
``benchmarks/latency.py --option kafka_direct:kafka.queued.min.messages=N`` (docs/performance.md,
"Idle pooled consumers").
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kafka_direct_bench.common import log, run_header, run_on_kafka
from kafka_direct_bench.dataset import create_topic, new_topic, produce_dataset
from kafka_direct_bench.oracle_python import versions


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=2_000_000)
    p.add_argument("--size", type=int, default=100, help="value bytes")
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--depths", default="100000,16", help="comma list of queued.min.messages")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--bootstrap-servers", default=None)
    p.add_argument("--json", default=None)
    return p.parse_args(argv)


def timed_read(spark: Any, bootstrap: str, topic: str, depth: str, records: int) -> float:
    started = time.perf_counter()
    rows = (
        spark.read.format("kafka_direct")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("kafka.queued.min.messages", depth)
        .load()
        .groupBy("partition")
        .count()
        .collect()
    )
    elapsed = time.perf_counter() - started
    counted = sum(r["count"] for r in rows)
    if counted != records:
        raise RuntimeError(f"depth {depth}: read {counted} records, produced {records}")
    return elapsed


def run(args: argparse.Namespace, bootstrap: str) -> dict[str, Any]:
    from kafka_direct.testing.local import local_spark

    depths = args.depths.split(",")
    topic = new_topic("prefetch")
    create_topic(bootstrap, topic, args.partitions, {"max.message.bytes": "2000000"})
    produced = produce_dataset(
        bootstrap,
        topic,
        args.records,
        args.size,
        args.partitions,
        seed=7,
        settings={"message.max.bytes": "2000000"},
    )
    log(f"produced {args.records:,} x {args.size} B in {produced['seconds']:.1f} s")
    spark = local_spark("prefetch-depth")
    ver = versions(spark, None)
    log("versions: " + ", ".join(f"{k} {v}" for k, v in ver.items()))
    try:
        for depth in depths:
            timed_read(spark, bootstrap, topic, depth, args.records)  # untimed: warm
        seconds: dict[str, list[float]] = {d: [] for d in depths}
        for i in range(args.rounds):
            for depth in depths if i % 2 == 0 else depths[::-1]:
                took = timed_read(spark, bootstrap, topic, depth, args.records)
                seconds[depth].append(took)
                log(f"round {i} depth {depth}: {took:.2f} s, {args.records / took:,.0f} rec/s")
    finally:
        spark.stop()
    return {
        "versions": ver,
        "records": args.records,
        "size": args.size,
        "partitions": args.partitions,
        "seconds": seconds,
        "median_rate": {d: args.records / statistics.median(s) for d, s in seconds.items()},
    }


def report(results: dict[str, Any]) -> None:
    print(run_header(results))
    base = None
    for depth, rate in results["median_rate"].items():
        base = base or rate
        rounds = " · ".join(f"{s:.2f}" for s in results["seconds"][depth])
        print(
            f"queued.min.messages={depth:>7}: median {rate:>12,.0f} rec/s "
            f"({rate / base:.2f} x the first), seconds per round {rounds}"
        )


def main(argv: list[str]) -> int:
    return run_on_kafka("prefetch_depth.py", argv, parse(argv), run, report)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
