"""CPU-seconds of one Spark driver's life, on the JVM's defaults and with each thing the test
suite does to make its drivers cheaper (tests/integration/conftest.py, scripts/test.sh): C1 only
and the serial collector; then a class-data-sharing archive of a driver's classes
(kafka_direct.testing.jvm_archive, made first if missing); then kafka_direct's Python worker
daemon (kafka_direct.executor.daemon), which imports a task's modules before it forks a worker.
Runs in its own process; each lifecycle runs in a child process::

    python benchmarks/spark_lifecycle_cpu.py              # two rounds, order reversed each round
    python benchmarks/spark_lifecycle_cpu.py --rounds 3

A lifecycle: start a local Spark, a batch read of 20,000 records, a 10-micro-batch
``availableNow`` stream into the no-op sink, stop. The CPU is the machine's (``/proc/stat``,
every process), so run it on a quiet machine: the load is printed before each lifecycle.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kafka_direct_bench.common import loadavg
from kafka_direct_bench.dataset import produce_small as produce

from kafka_direct.testing import KafkaCluster
from kafka_direct.testing.jvm_archive import DRIVER_OPTIONS, build_archive, with_archive
from kafka_direct.testing.local import DAEMON_MODULE

SPARK_DAEMON = "pyspark.daemon"
RECORDS = 20_000

LIFECYCLE = f"""
import sys
from kafka_direct.testing.local import local_spark
bootstrap, topic, checkpoint, daemon = sys.argv[1:5]
spark = local_spark("lifecycle", conf={{"spark.python.daemon.module": daemon}})
df = (spark.read.format("kafka_direct").option("kafka.bootstrap.servers", bootstrap)
      .option("subscribe", topic).load())
assert df.count() == {RECORDS}
query = (spark.readStream.format("kafka_direct").option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", topic).option("maxOffsetsPerTrigger", "{RECORDS // 10}").load()
         .writeStream.format("noop").option("checkpointLocation", checkpoint)
         .trigger(availableNow=True).start())
query.awaitTermination()
assert query.lastProgress is not None
spark.stop()
"""


def busy_ticks() -> int:
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return user + nice + system + irq + softirq + steal


def lifecycle(bootstrap: str, topic: str, options: str | None, daemon: str) -> tuple[float, float]:
    """(CPU-seconds, wall seconds) of one lifecycle in a new process."""
    env = dict(os.environ)
    env.pop("SPARK_SUBMIT_OPTS", None)
    if options:
        env["SPARK_SUBMIT_OPTS"] = options
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    with tempfile.TemporaryDirectory() as checkpoint:
        ticks, began = busy_ticks(), time.monotonic()
        subprocess.run(
            [sys.executable, "-c", LIFECYCLE, bootstrap, topic, checkpoint, daemon],
            env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wall = time.monotonic() - began
        cpu = (busy_ticks() - ticks) / os.sysconf("SC_CLK_TCK")
    return cpu, wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    archive, made = build_archive(DRIVER_OPTIONS)
    print(f"class archive {archive} ({'made now' if made else 'already there'})")
    ways = [
        ("JVM defaults", None, SPARK_DAEMON),
        (DRIVER_OPTIONS, DRIVER_OPTIONS, SPARK_DAEMON),
        ("+ class archive", with_archive(DRIVER_OPTIONS), SPARK_DAEMON),
        ("+ class archive + kafka_direct's daemon", with_archive(DRIVER_OPTIONS), DAEMON_MODULE),
    ]
    with KafkaCluster() as cluster:
        bootstrap = cluster.bootstrap_servers
        topic = f"lifecycle-{int(time.time())}"
        produce(bootstrap, topic, 2, RECORDS)
        print(f"{RECORDS} records in {topic}; each lifecycle in a new process")
        for number in range(args.rounds):
            for name, options, daemon in ways if number % 2 == 0 else ways[::-1]:
                load = loadavg()
                cpu, wall = lifecycle(bootstrap, topic, options, daemon)
                print(f"round {number + 1}  {name:<45} {cpu:6.1f} CPU-s  {wall:5.1f} s wall  "
                      f"(load before {load})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
