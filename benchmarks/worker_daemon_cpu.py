"""What a new Python worker costs with Spark's worker daemon and with kafka_direct's
(``kafka_direct.executor.daemon``, which imports a task's modules once, before it forks).
Runs in its own process; each Spark runs in a child process::

    python benchmarks/worker_daemon_cpu.py                  # 3 rounds, order reversed each round
    python benchmarks/worker_daemon_cpu.py --rounds 5 --partitions 8

Each Spark (``local[2]``) reads a topic of ``--partitions`` partitions with a batch ``count()``
three times, with ``spark.python.worker.reuse=false``, so that every task forks a new worker from
the daemon. A logging daemon (``kafka_direct_bench/timed_daemon.py``) records the CPU of each
worker, from its fork to the end of its task, and the daemon's own once its imports are done.
It reports medians per worker and the daemon's start, and what one daemon serving N new workers
costs with each: the preload pays off from the second worker on.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kafka_direct_bench.common import loadavg
from kafka_direct_bench.dataset import produce_small as produce

from kafka_direct.testing import KafkaCluster

HERE = Path(__file__).resolve().parent
RECORDS_PER_PARTITION = 2_000
DAEMONS = {"Spark's (pyspark.daemon)": "0", "kafka_direct's (preloaded)": "1"}

CHILD = """
import sys
from kafka_direct.testing.local import local_spark
bootstrap, topic, partitions = sys.argv[1], sys.argv[2], int(sys.argv[3])
spark = local_spark("worker-daemon-cpu", conf={
    "spark.python.daemon.module": "kafka_direct_bench.timed_daemon",
    "spark.python.worker.reuse": "false",
})
for _ in range(3):
    df = (spark.read.format("kafka_direct").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic).load())
    assert df.count() == partitions * RECORDS
spark.stop()
""".replace("RECORDS", str(RECORDS_PER_PARTITION))


def one_spark(bootstrap: str, topic: str, partitions: int, preload: str) -> list[dict]:
    with tempfile.TemporaryDirectory() as scratch:
        log_path = Path(scratch) / "cpu.jsonl"
        env = dict(os.environ)
        env["KAFKA_DIRECT_BENCH_PRELOAD"] = preload
        env["KAFKA_DIRECT_BENCH_CPU_LOG"] = str(log_path)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH")) if p)
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        subprocess.run(
            [sys.executable, "-c", CHILD, bootstrap, topic, str(partitions)],
            env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        return [json.loads(line) for line in log_path.read_text().splitlines()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=8)
    args = parser.parse_args(argv)
    workers: dict[str, list[float]] = {name: [] for name in DAEMONS}
    daemons: dict[str, list[float]] = {name: [] for name in DAEMONS}
    with KafkaCluster() as cluster:
        topic = f"worker-daemon-{int(time.time())}"
        produce(
            cluster.bootstrap_servers,
            topic,
            args.partitions,
            RECORDS_PER_PARTITION * args.partitions,
        )
        print(f"{args.partitions} partitions x {RECORDS_PER_PARTITION} records in {topic}; "
              "3 batch counts per Spark, a new worker per task")  # fmt: skip
        order = list(DAEMONS.items())
        for number in range(args.rounds):
            for name, preload in order if number % 2 == 0 else order[::-1]:
                load = loadavg()
                entries = one_spark(cluster.bootstrap_servers, topic, args.partitions, preload)
                # Only the task workers' daemon: the planners' run Spark's own module.
                own = [e["cpu_s"] for e in entries if e["kind"] == "worker" and e["task"] == 1]
                start = [e["cpu_s"] for e in entries if e["kind"] == "daemon"]
                workers[name] += own
                daemons[name] += start
                print(f"round {number + 1}  {name:<28} {len(own):3d} workers, median "
                      f"{statistics.median(own):.3f} CPU-s each; daemon start "
                      f"{max(start):.3f} CPU-s  (load before {load})")  # fmt: skip
    print("\nmedians over all rounds (CPU-seconds)")
    print(f"{'daemon':<28} {'a new worker':>13} {'daemon start':>13} "
          f"{'1 worker':>9} {'2 workers':>10} {'8 workers':>10}")  # fmt: skip
    for name in DAEMONS:
        worker, start = statistics.median(workers[name]), statistics.median(daemons[name])
        totals = "".join(f" {start + n * worker:>9.2f}" for n in (1, 2, 8))
        print(f"{name:<28} {worker:>13.3f} {start:>13.3f}{totals}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
