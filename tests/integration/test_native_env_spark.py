"""The ``KAFKA_DIRECT_NATIVE=0`` switch inside Spark: a source registered while the SparkContext's
environment carries it reads in Python workers of their own, through the Python path, with the
same rows as the fast path."""

from __future__ import annotations

import uuid
from datetime import timezone
from typing import Any

from kafka_direct.consumer import native
from kafka_direct.source.registration import register_with_worker_site
from tests.integration.test_native_read import KEYS, VALUES, produce, rows_of


def _path_checked_source(name: str, expect_native: bool) -> Any:
    """The kafka_direct source under another name, whose read tasks first check which path
    their worker uses. Defined in a function so that cloudpickle ships it by value."""
    from kafka_direct.source.batch import KafkaBatchReader
    from kafka_direct.source.datasource import KafkaDirectDataSource

    class CheckedReader(KafkaBatchReader):
        def read(self, partition: Any) -> Any:
            from kafka_direct.consumer import native as worker_native

            if worker_native.available() != expect_native:
                raise RuntimeError(f"wrong read path in this worker: {worker_native.status()}")
            return super().read(partition)

    class CheckedSource(KafkaDirectDataSource):
        @classmethod
        def name(cls) -> str:
            return name

        def reader(self, schema: Any) -> Any:
            return CheckedReader(super().reader(schema).opts)

    return CheckedSource


def test_spark_batch_read_is_the_same_on_both_paths(
    spark, make_topic, kafka_bootstrap, monkeypatch
):
    """Python workers get KAFKA_DIRECT_NATIVE=0 from the SparkContext's environment at
    registration: Spark keys its Python daemons by environment, so that source's reads run in
    a daemon of their own, started with the variable set."""
    topic = make_topic(partitions=2, prefix="native-spark")
    produced = produce(
        kafka_bootstrap, topic, [(i % 2, KEYS[i % 10], VALUES[i % 7]) for i in range(41)]
    )
    suffix = uuid.uuid4().hex[:8]
    fast = _path_checked_source(f"kafka_direct_fast_{suffix}", expect_native=True)
    slow = _path_checked_source(f"kafka_direct_python_{suffix}", expect_native=False)
    assert register_with_worker_site(spark, fast)
    monkeypatch.setitem(spark.sparkContext.environment, native.DISABLE_ENV, "0")
    assert register_with_worker_site(spark, slow)
    manager = spark._jsparkSession.sessionState().dataSourceManager()
    env = {s: manager.lookupDataSource(s.name()).dataSourceCls().envVars() for s in (fast, slow)}
    assert (native.DISABLE_ENV in env[fast], env[slow][native.DISABLE_ENV]) == (False, "0")

    for source in ("kafka_direct", fast.name(), slow.name()):
        options = {"kafka.bootstrap.servers": kafka_bootstrap, "subscribe": topic}
        df = spark.read.format(source).options(arrowBatchSize="4", **options).load()
        got = [r.asDict() for r in df.collect()]
        for r in got:  # PySpark hands out naive datetimes in this process's local time
            r["timestamp"] = r["timestamp"].astimezone(timezone.utc)
        assert sorted(got, key=lambda r: (r["partition"], r["offset"])) == rows_of(produced), source
