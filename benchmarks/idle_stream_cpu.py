"""CPU of an idle stream: a stream into the no-op sink on a topic that gets no records, by Spark's
``spark.sql.streaming.pollingDelay`` (how soon a trigger that found nothing asks the source again)
and with a 1 s ``processingTime`` trigger, for ``format("kafka_direct")`` and Spark's own
``format("kafka")``. Runs in its own process, with one local Spark and one Kafka broker (both its
children)::

    python benchmarks/idle_stream_cpu.py                      # 20 s per case, two rounds
    python benchmarks/idle_stream_cpu.py --seconds 30 --rounds 3 --formats kafka_direct

With Spark's connector among ``--formats`` (the default), both formats run on the PySpark that
the connector was built for, as ``scripts/oracle-venv.sh`` pins it (the versions are printed).

The CPU is that of this process and every process below it (the Spark JVM, its Python workers,
the broker), over ``--seconds`` once the stream has run its first batches; the same span with no
stream running is printed first, as the floor. Cases alternate order from round to round. Run it
on a quiet machine: the load is printed before each round.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kafka_direct_bench.common import loadavg
from kafka_direct_bench.oracle_python import add_formats_option, chosen_formats, versions

from kafka_direct.testing import KafkaCluster
from kafka_direct.testing.local import local_spark
from kafka_direct.testing.process_cpu import tree_cpu
from kafka_direct.testing.spark_connector import (
    connector_version,
    spark_kafka_conf,
    spark_kafka_jars,
)
from kafka_direct.testing.topics import create_topic

CASES = [("default trigger, pollingDelay 10 ms (Spark's default)", "10ms", None),
         ("default trigger, pollingDelay 100 ms (the test suite's)", "100ms", None),
         ("processingTime 1 s", "10ms", "1 second")]  # fmt: skip


def _cpu_share(seconds: float) -> float:
    """Share of one core used by this process and every process below it over ``seconds``."""
    cpu0, wall0 = tree_cpu(os.getpid()), time.monotonic()
    time.sleep(seconds)
    return (tree_cpu(os.getpid()) - cpu0) / (time.monotonic() - wall0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="measured span per case")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds before measuring")
    add_formats_option(parser)
    args = parser.parse_args()
    formats = chosen_formats(args.formats, __file__)
    cases = [(fmt, *case) for case in CASES for fmt in formats]
    results: dict[tuple[str, str], list[float]] = {(fmt, name): [] for fmt, name, _, _ in cases}
    floor: list[float] = []
    jars = spark_kafka_jars() if "kafka" in formats else []
    with KafkaCluster() as cluster, tempfile.TemporaryDirectory() as work:
        bootstrap = cluster.bootstrap_servers
        topic = f"idle-{uuid.uuid4().hex[:8]}"
        create_topic(bootstrap, topic, partitions=2)
        spark = local_spark("idle-stream-cpu", conf=spark_kafka_conf(jars) if jars else {})
        ver = versions(spark, connector_version(jars) if jars else None)
        print("versions: " + ", ".join(f"{k} {v}" for k, v in ver.items()), flush=True)
        for rnd in range(args.rounds):
            print(f"round {rnd + 1}: load average {loadavg()}", flush=True)
            floor.append(_cpu_share(args.seconds))
            order = cases if rnd % 2 == 0 else cases[::-1]
            for fmt, name, delay, trigger in order:
                spark.conf.set("spark.sql.streaming.pollingDelay", delay)
                writer = (
                    spark.readStream.format(fmt)
                    .option("kafka.bootstrap.servers", bootstrap)
                    .option("subscribe", topic)
                    .load()
                    .writeStream.format("noop")
                    .option("checkpointLocation", f"{work}/{uuid.uuid4().hex}")
                )
                if trigger is not None:
                    writer = writer.trigger(processingTime=trigger)
                query = writer.start()
                try:
                    time.sleep(args.warmup)
                    results[(fmt, name)].append(_cpu_share(args.seconds))
                finally:
                    query.stop()
        spark.stop()
    idle = statistics.median(floor) * 100
    print(f"\nno stream (Spark and the broker idle): {idle:.1f} % of a core")
    for (fmt, name), shares in results.items():
        line = ", ".join(f"{s * 100:.1f}" for s in shares)
        median = statistics.median(shares) * 100
        print(f"{fmt:<12} {name}: median {median:.1f} % of a core ({line})")


if __name__ == "__main__":
    main()
