"""Registering the format once per session: no Spark WARN at every DStream or receiver start.

Issue: every DStream and receiver start printed ``WARN DataSourceManager: The data source
kafka_direct replaced a previously registered data source``. Spark warns when a registration
replaces the object the session holds; the test watches that object.
"""

from __future__ import annotations

from typing import Any

import kafka_direct
from kafka_direct.dstream.receiver.wal_source import register_wal_source
from kafka_direct.source.datasource import KafkaDirectDataSource
from kafka_direct.source.registration import is_registered, register_with_worker_site


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
