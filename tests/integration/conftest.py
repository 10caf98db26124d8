"""Integration fixtures: a real Kafka broker and a real local Spark.

The broker is `KAFKA_BOOTSTRAP_SERVERS` when set. Otherwise `KAFKA_DIRECT_TEST_BROKER` chooses:
`kafka` (the default) starts real Apache Kafka (`KafkaCluster`, one node per pytest process; each
test makes its own topics), `tansu` the embedded Tansu broker, on which CI runs only the tests
marked `tansu_smoke`. `KAFKA_DIRECT_KAFKA_VERSION` chooses the Apache Kafka release of every
KafkaCluster (scripts/kafka-versions.sh). If the broker cannot start, every test here errors:
nothing is skipped.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kafka_direct.testing.broker import EmbeddedBroker
from kafka_direct.testing.jvm_archive import DRIVER_OPTIONS, with_archive
from kafka_direct.testing.kafka_cluster import KafkaCluster, default_kafka_version
from tests.integration.kafka_helpers import broker_kind, create_topic, new_topic_name

# Every Spark driver the suite starts (this process's, the drivers tests run and kill, the
# examples) is a JVM that lives seconds to minutes: C2's compile threads and G1's concurrent
# threads cost it more CPU than they save, and the suite is CPU-bound on 2 cores
# (docs/testing.md). spark-submit adds SPARK_SUBMIT_OPTS to the driver's java command; the
# brokers and the standalone workers already start this way. A value the user set wins.
# spark.sql.streaming.pollingDelay (a system property, read by every SparkConf): a stream with
# nothing new asks its source again after 100 ms instead of Spark's 10 ms. Waiting tests keep
# streams idle for minutes in all, and at 10 ms an idle stream's trigger loop is most of its CPU
# (benchmarks/idle_stream_cpu.py, figures in docs/testing.md); a record arriving waits at most
# 90 ms more, which no test measures.
# The drivers also map the classes an earlier driver loaded from a class-data-sharing archive,
# when scripts/test.sh made one for this JVM and PySpark (kafka_direct.testing.jvm_archive).
os.environ.setdefault(
    "SPARK_SUBMIT_OPTS",
    with_archive(f"{DRIVER_OPTIONS} -Dspark.sql.streaming.pollingDelay=100ms"),
)


def pytest_report_header() -> str:
    """Which broker this run tests against, first thing in its output."""
    kind = broker_kind()
    if kind == "kafka":
        return (
            f"kafka_direct test broker: Apache Kafka {default_kafka_version()} (KafkaCluster; "
            "KAFKA_DIRECT_KAFKA_VERSION chooses the release)"
        )
    return f"kafka_direct test broker: {kind}"


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    kind = broker_kind()
    if kind == "external":
        yield os.environ["KAFKA_BOOTSTRAP_SERVERS"]
        return
    if kind == "tansu":
        broker = EmbeddedBroker()
        try:
            broker.start()
        except Exception as exc:  # noqa: BLE001 - any failure to start must fail the run loudly
            pytest.fail(f"The embedded Kafka broker could not start: {exc}", pytrace=False)
        yield broker.bootstrap_servers
        broker.stop(timeout_s=2)
        return
    cluster = KafkaCluster()
    try:
        cluster.start()
    except Exception as exc:  # noqa: BLE001 - any failure to start must fail the run loudly
        pytest.fail(f"Apache Kafka could not start: {exc}", pytrace=False)
    yield cluster.bootstrap_servers
    cluster.stop()


@pytest.fixture(scope="session")
def secured_cluster() -> Iterator[Any]:
    """One SecuredKafkaCluster (SASL PLAIN and SCRAM, TLS, ACLs) for the session's secured
    tests: users alice and bob (passwords in tests/integration/secured_helpers.py). Tests make
    their own topics and grants; alice may read the executors' consumer groups (assign only,
    no commits): the source's default and the DStreams' "<group>-executor"."""
    from kafka_direct.testing.secured_cluster import SecuredKafkaCluster
    from tests.integration.secured_helpers import ALICE, BOB

    secured = SecuredKafkaCluster(users={"alice": ALICE, "bob": BOB})
    try:
        secured.start()
    except Exception as exc:  # noqa: BLE001 - a broker that cannot start fails the tests
        pytest.fail(f"The secured Kafka cluster could not start: {exc}", pytrace=False)
    secured.grant("User:alice", "group", "spark-kafka-source", "READ", prefixed=True)
    yield secured
    secured.stop()


@pytest.fixture(scope="session")
def worker_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the Spark workers' kafka_direct log records go (KAFKA_DIRECT_LOG_FILE)."""
    path = tmp_path_factory.mktemp("logs") / "kafka_direct-workers.log"
    path.touch()
    return path


@pytest.fixture(scope="session")
def task_stats_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where every read task records what it did (KAFKA_DIRECT_STATS_DIR, see executor.py)."""
    return tmp_path_factory.mktemp("task-stats")


@pytest.fixture(scope="session")
def spark(worker_log: Path, task_stats_dir: Path) -> Iterator[Any]:
    from kafka_direct.testing.local import local_spark

    # Set before the JVM starts, so every Python worker inherits them.
    os.environ["KAFKA_DIRECT_LOG_FILE"] = str(worker_log)
    os.environ["KAFKA_DIRECT_STATS_DIR"] = str(task_stats_dir)

    session = local_spark("kafka_direct-tests")
    yield session
    session.stop()


@pytest.fixture()
def make_topic(kafka_bootstrap: str) -> Callable[..., str]:
    """Create a fresh topic (unique name per call) and return its name."""

    def make(partitions: int = 1, prefix: str = "t", config: dict[str, str] | None = None) -> str:
        name = new_topic_name(prefix)
        create_topic(kafka_bootstrap, name, partitions=partitions, config=config)
        return name

    return make


@pytest.fixture()
def reader(spark: Any, kafka_bootstrap: str) -> Callable[..., Any]:
    """`reader(stream=False, **options)` → a DataStreamReader/DataFrameReader for kafka_direct."""

    def make(stream: bool = False, **options: str) -> Any:
        r = (spark.readStream if stream else spark.read).format("kafka_direct")
        r = r.option("kafka.bootstrap.servers", kafka_bootstrap)
        for key, value in options.items():
            r = r.option(key, value)
        return r

    return make
