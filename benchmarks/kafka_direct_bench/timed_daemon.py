"""A Python worker daemon for benchmarks/worker_daemon_cpu.py: Spark's own, or kafka_direct's
(with its preload), that logs the CPU each forked worker used. Runs in: the PySpark daemon of the
benchmark's local Spark (``spark.python.daemon.module=kafka_direct_bench.timed_daemon``).

``KAFKA_DIRECT_BENCH_PRELOAD=1`` preloads as ``kafka_direct.executor.daemon`` does; each line of
``$KAFKA_DIRECT_BENCH_CPU_LOG`` is then a JSON object: the daemon's own CPU once its imports are
done (``daemon``), or one worker's CPU at the end of each task it ran (``worker``, ``task``:
the first task of a new worker is 1), counted from its fork, where a child's CPU starts at zero.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

_tasks = 0


def _log(**entry: Any) -> None:
    with open(os.environ["KAFKA_DIRECT_BENCH_CPU_LOG"], "a", encoding="utf-8") as out:
        out.write(json.dumps({"pid": os.getpid(), **entry}) + "\n")


def main() -> None:
    if os.environ.get("KAFKA_DIRECT_BENCH_PRELOAD") == "1":
        from kafka_direct.executor.daemon import PRELOAD, preload, worker_module

        preload([*PRELOAD, *worker_module(sys.argv)])
    import pyspark.daemon as daemon

    spark_worker = daemon.worker

    def timed_worker(sock: Any, authenticated: bool) -> int:
        global _tasks
        try:
            return spark_worker(sock, authenticated)
        finally:
            _tasks += 1
            _log(kind="worker", task=_tasks, cpu_s=time.process_time())

    daemon.worker = timed_worker
    _log(kind="daemon", cpu_s=time.process_time())
    daemon.manager()


if __name__ == "__main__":
    main()
