"""A local SparkSession for the command line, examples, tests and benchmarks. Runs in the user's
process (the Spark driver).

It points Spark's Python workers at this interpreter (where kafka_direct is installed): by
default PySpark starts ``python3`` from ``PATH``, which in a virtualenv that is not activated
cannot import the data source. When the workers run this interpreter, their daemon is
kafka_direct's (:mod:`kafka_direct.executor.daemon`), which imports what a task needs once, before
it forks each worker.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

__all__ = ["DAEMON_MODULE", "local_spark", "worker_daemon_conf"]

DAEMON_MODULE = "kafka_direct.executor.daemon"


def worker_daemon_conf() -> dict[str, str]:
    """``spark.python.daemon.module`` for kafka_direct's daemon, when the Python workers run this
    interpreter (``PYSPARK_PYTHON``), where kafka_direct is installed; else nothing, and Spark's
    own daemon says what is missing in the other interpreter."""
    workers = os.environ.get("PYSPARK_PYTHON", sys.executable)
    try:
        same = os.path.samefile(workers, sys.executable)
    except OSError:
        same = False
    return {"spark.python.daemon.module": DAEMON_MODULE} if same else {}


def local_spark(
    app_name: str = "kafka_direct", *, cores: int = 2, conf: Mapping[str, str] | None = None
) -> Any:
    """A ``local[cores]`` SparkSession with kafka_direct registered and a quiet log."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import kafka_direct

    builder = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
    )
    for key, value in {**worker_daemon_conf(), **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    kafka_direct.register(spark)
    return spark
