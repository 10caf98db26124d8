"""Spark's Python worker daemon, with a kafka_direct task's imports done once, before it forks.

Runs in: the PySpark daemon that Spark starts on each executor when
``spark.python.daemon.module`` is ``kafka_direct.executor.daemon`` (a static setting, given
before the SparkSession starts)::

    SparkSession.builder.config("spark.python.daemon.module", "kafka_direct.executor.daemon")

Why: PySpark's own daemon (``pyspark.daemon``) forks a Python worker per task slot and leaves
every import to the worker after the fork, so that no thread exists when it forks. A worker that
reads or writes Kafka then imports pandas, NumPy, pyarrow, confluent-kafka and kafka_direct,
some 600 modules, for about a second of CPU (docs/performance.md), and every new worker does it
again: after a worker dies, after it idled past Spark's timeout, in every new application. Here
the daemon imports them once and each forked worker starts with them. The threads those imports
start (OpenBLAS's pool, jemalloc's background thread) do not survive a fork; both libraries
register fork handlers for that, as kafka_direct's own process-wide pools do
(:mod:`~kafka_direct.executor.process_local`), and no import here starts a Kafka client.

A module that fails to import is left to the worker, which then fails or copes as it would under
``pyspark.daemon``: the preload only ever moves work earlier, it never changes what runs.
Then this hands over to ``pyspark.daemon.manager``, which serves Spark exactly as before.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable

#: What a kafka_direct read or write task imports after PySpark's own worker module, outermost
#: first (each pulls in the rest). Measured by listing a forked worker's new modules.
PRELOAD: tuple[str, ...] = (
    "pandas",
    "pyarrow",
    "pyarrow.compute",
    "pyarrow.ipc",
    "confluent_kafka",
    "pyspark.worker",
    "pyspark.sql.datasource",
    "pyspark.sql.pandas.serializers",
    "pyspark.sql.worker.plan_data_source_read",
    "kafka_direct.source.datasource",
    "kafka_direct.source.sink",
    "kafka_direct.executor.task",
    "kafka_direct.consumer.read",
    "kafka_direct.producer.write",
)


def preload(modules: Iterable[str]) -> list[str]:
    """Import each of ``modules``; the names of those that failed (never raises)."""
    failed = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the worker imports it again and reports for itself
            failed.append(name)
    return failed


def worker_module(argv: list[str]) -> list[str]:
    """The worker module Spark names after the daemon's (PySpark imports only ``pyspark.*``)."""
    return [argv[1]] if len(argv) > 1 and argv[1].startswith("pyspark") else []


#: What this daemon could not preload (its forked workers inherit the list; tests read it).
FAILED: list[str] = []


def main() -> None:
    FAILED.extend(preload([*PRELOAD, *worker_module(sys.argv)]))
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
