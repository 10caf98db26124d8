"""The Avro tests above run the C decoder in Spark's Python workers, not only in the driver:
a worker reports which decoder it has."""

from __future__ import annotations

from typing import Any


def _status(_: Any) -> str:
    from kafka_direct.schema_registry import avro_native

    return avro_native.status()


def test_spark_python_workers_decode_avro_in_c(spark: Any) -> None:
    statuses = spark.sparkContext.parallelize([0, 1], 2).map(_status).collect()
    assert statuses == ["C decoder (kafka_direct.schema_registry._avro_arrow)"] * 2
