"""Registering the format once per session: no Spark WARN at every DStream or receiver start.

Issue: every DStream and receiver start printed ``WARN DataSourceManager: The data source
kafka_direct replaced a previously registered data source``. Spark warns when a registration
replaces the object the session holds; the test watches that object.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kafka_direct
from kafka_direct.dstream.receiver.wal_source import register_wal_source
from kafka_direct.source.datasource import KafkaDirectDataSource
from kafka_direct.source.registration import (
    STREAMING_RUNNER_DEFAULTS,
    is_registered,
    register_with_worker_site,
)
from kafka_direct.testing.broker import create_topic
from tests.integration.kafka_helpers import new_topic_name


def _registered_object(spark: Any, name: str) -> int:
    """The identity of the JVM object the session holds for ``name``: a new registration is a
    new object (Spark's WARN is about exactly that replacement)."""
    manager = spark._jsparkSession.sessionState().dataSourceManager()
    return int(spark._jvm.System.identityHashCode(manager.lookupDataSource(name)))


def test_registering_again_replaces_nothing(spark: Any) -> None:
    assert is_registered(spark, "kafka_direct")  # the fixture's session registered it
    register_wal_source(spark)
    before = {n: _registered_object(spark, n) for n in ("kafka_direct", "kafka_direct_wal")}
    for _ in range(3):
        kafka_direct.register(spark)  # what every DStream and receiver start does
        register_wal_source(spark)
    after = {n: _registered_object(spark, n) for n in ("kafka_direct", "kafka_direct_wal")}
    assert after == before
    # The control: registering the plain way replaces it (and Spark warns).
    spark.dataSource.register(KafkaDirectDataSource)
    assert _registered_object(spark, "kafka_direct") != before["kafka_direct"]
    # Put the fast-start registration back for the tests that follow.
    assert register_with_worker_site(spark, KafkaDirectDataSource)


def _registered_environment(spark: Any) -> dict[str, str]:
    """The environment map of the function the session holds for ``kafka_direct``: the very map
    Spark's driver-side streaming source runner writes into at each streaming query's start."""
    manager = spark._jsparkSession.sessionState().dataSourceManager()
    env = manager.lookupDataSource("kafka_direct").dataSourceCls().envVars()
    return {str(k): str(env.get(k)) for k in env.keySet()}


def test_a_streaming_querys_start_adds_no_key_to_the_registered_environment(
    spark: Any, kafka_bootstrap: str, tmp_path: Path
) -> None:
    # Spark's PythonStreamingSourceRunner puts four variables into the registered function's own
    # map at a query's start. Had it to add them, the map would grow while the scheduler may be
    # serializing another query's task that carries it (OptionalDataException in every copy of
    # that task, seen once in the soak); with the keys there from the registration it only
    # replaces values. A fresh registration, so no earlier query of this session added them.
    assert register_with_worker_site(spark, KafkaDirectDataSource)
    before = _registered_environment(spark)
    assert set(STREAMING_RUNNER_DEFAULTS) <= set(before)

    topic = new_topic_name("registration")
    create_topic(kafka_bootstrap, topic, partitions=1)
    query = (
        spark.readStream.format("kafka_direct")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("subscribe", topic)
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120), "the AvailableNow query did not end within 120 s"
    assert query.exception() is None

    after = _registered_environment(spark)
    assert set(after) == set(before), f"keys added at the query's start: {set(after) - set(before)}"
    assert after["SPARK_PYTHON_RUNTIME"] == "PYTHON_WORKER"
