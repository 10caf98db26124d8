"""The differential suite: Spark's own ``format("kafka")`` next to ``format("kafka_direct")``.

The JVM connector has to be on the class path when the JVM starts, and one process has one
JVM. This conftest is imported while pytest collects, before any test of the process starts
Spark, so it fetches the connector (once, cached) and adds it to ``PYSPARK_SUBMIT_ARGS``:
whichever fixture starts Spark first in this process (the ``spark`` fixture of
tests/integration) starts it with both formats. If the connector cannot be fetched, collection
fails: the suite never skips.

PySpark can reach PyPI before Spark's connector reaches Maven Central, and a connector runs only
on the Spark it was built for. Then the suite does not run on the installed PySpark: every test
here fails at once, naming the PySpark to pin and the command that pins it,
``bash scripts/oracle-venv.sh`` (a virtualenv of its own with the newest PySpark whose connector
Central serves; ``scripts/test.sh`` runs the suite that way). Setting
``KAFKA_DIRECT_SPARK_CONNECTOR_VERSION`` runs the connector of that version on the installed
PySpark anyway. Every test says which connector on which PySpark in its report
(``jvm_connector_version`` user property).

The broker is real Apache Kafka (:class:`~kafka_direct.testing.KafkaCluster`, one node), or
``KAFKA_BOOTSTRAP_SERVERS`` when set: transactions, timestamps, compaction and deleted records
must behave as Kafka's, or the comparison says nothing.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator
from typing import Any

import pytest

from kafka_direct.testing.kafka_cluster import KafkaCluster
from kafka_direct.testing.spark_connector import (
    CONNECTOR,
    connector_metadata,
    connector_version,
    installed_spark_version,
    oracle_spark_version,
    spark_kafka_jars,
)

INSTALLED = installed_spark_version()
CHOSEN = os.environ.get("KAFKA_DIRECT_SPARK_CONNECTOR_VERSION")
PINNED = CHOSEN or oracle_spark_version(connector_metadata(), INSTALLED)
WRONG_PYSPARK = (
    None
    if PINNED == INSTALLED or CHOSEN
    else f"PySpark {INSTALLED} is installed and Maven Central has no {':'.join(CONNECTOR)}:"
    f"{INSTALLED}; the newest connector it serves is {PINNED}, which runs on PySpark {PINNED} "
    "only. Run this suite with `bash scripts/oracle-venv.sh [pytest arguments]`: it pins "
    f"PySpark {PINNED} in a virtualenv of its own (.venv-oracle). To run connector {PINNED} on "
    f"PySpark {INSTALLED} anyway, set KAFKA_DIRECT_SPARK_CONNECTOR_VERSION={PINNED}."
)
JARS = [] if WRONG_PYSPARK else spark_kafka_jars(PINNED)
CONNECTOR_VERSION = PINNED if WRONG_PYSPARK else connector_version(JARS)


def _add_jars_to_submit_args() -> None:
    args = shlex.split(os.environ.get("PYSPARK_SUBMIT_ARGS", "pyspark-shell"))
    if "--jars" in args:
        i = args.index("--jars")
        jars = [j for j in args[i + 1].split(",") if j] + [str(j) for j in JARS]
        args[i + 1] = ",".join(dict.fromkeys(jars))
    else:
        args = ["--jars", ",".join(str(j) for j in JARS), *args]
    os.environ["PYSPARK_SUBMIT_ARGS"] = shlex.join(args)


if not WRONG_PYSPARK:
    _add_jars_to_submit_args()


@pytest.fixture(scope="session", autouse=True)
def matching_pyspark() -> None:
    """Fails every test here, before any broker or Spark starts, on a PySpark without its own
    connector on Maven Central: the comparison would be with a connector built for another Spark.
    """
    if WRONG_PYSPARK:
        pytest.fail(WRONG_PYSPARK, pytrace=False)


@pytest.fixture(scope="session")
def spark(matching_pyspark: None, spark: Any) -> Any:
    """tests/integration's Spark, started only once the PySpark is known to match."""
    return spark


@pytest.fixture(scope="session")
def kafka_bootstrap(matching_pyspark: None) -> Iterator[str]:
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if external:
        yield external
        return
    # The log cleaner checks every second (default 15 s), so the compacted-topic case waits less.
    cluster = KafkaCluster(brokers=1, log_cleaner_backoff_ms=1000)
    try:
        cluster.start()
    except Exception as exc:  # noqa: BLE001 - any failure to start must fail the run loudly
        pytest.fail(f"Apache Kafka could not start: {exc}", pytrace=False)
    yield cluster.bootstrap_servers
    cluster.stop()


@pytest.fixture(autouse=True)
def jvm_connector(spark: Any, record_property: Any) -> Iterator[str]:
    """Fails every test here whose Spark was started without Spark's Kafka connector."""
    jvm = spark.sparkContext._jvm
    loader = jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
    try:
        jvm.java.lang.Class.forName(
            "org.apache.spark.sql.kafka010.KafkaSourceProvider", False, loader
        )
    except Exception as exc:  # noqa: BLE001 - py4j wraps the ClassNotFoundException
        pytest.fail(
            "Spark was started in this process before the differential conftest could add "
            "Spark's Kafka connector to it; run tests/integration/differential in a pytest "
            f"process of its own ({exc.__class__.__name__})",
            pytrace=False,
        )
    record_property(
        "jvm_connector_version",
        f"{CONNECTOR_VERSION} (PySpark {INSTALLED} installed)",
    )
    yield CONNECTOR_VERSION
