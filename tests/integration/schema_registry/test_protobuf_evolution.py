"""Protobuf evolution against a real Schema Registry and local Spark: v1 and v2 of one message
in one topic, both written by confluent-kafka's ProtobufSerializer, read with either version as
the reader type. Fields match by number, as spark-protobuf parses: an added field is null in
old records, a removed one is skipped, a renamed one keeps its value."""

from __future__ import annotations

from typing import Any

from kafka_direct.functions import from_protobuf

from .protobuf_classes import message_classes

V1 = """syntax = "proto3";
package kd.evo;
message Reading {
  int64 id = 1;
  string unit = 2;
  double value = 3;
  string place = 4;
}
"""
# v2 removes 'unit' (2), renames 'place' to 'site' (4), adds 'source' (5) and 'labels' (6).
V2 = """syntax = "proto3";
package kd.evo;
message Reading {
  reserved 2;
  int64 id = 1;
  double value = 3;
  string site = 4;
  string source = 5;
  repeated string labels = 6;
}
"""


def test_v1_and_v2_records_in_one_topic_read_with_either_version(
    spark: Any, registry_url: str, topic_name: str, confluent: Any
) -> None:
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    v1 = message_classes({"kd_evo_reading.proto": V1})["kd.evo.Reading"]
    v2 = message_classes({"kd_evo_reading.proto": V2})["kd.evo.Reading"]
    context = SerializationContext(topic_name, MessageField.VALUE)
    conf = {"use.deprecated.format": False}
    old = ProtobufSerializer(v1, confluent, conf)
    new = ProtobufSerializer(v2, confluent, conf)
    blobs = [old(v1(id=i, unit="C", value=i + 0.5, place=f"p{i}"), context) for i in (1, 2)]
    blobs += [
        new(v2(id=i, value=i + 0.5, site=f"p{i}", source="s", labels=["x"] * (i - 2)), context)
        for i in (3, 4)
    ]
    subject = f"{topic_name}-value"
    assert confluent.get_versions(subject) == [1, 2]
    frame = spark.createDataFrame(list(enumerate(blobs)), "n int, value binary")
    options = {"schema.registry.subject": subject, "schema.registry.address": registry_url}

    latest = frame.select("n", from_protobuf("value", options=options).alias("r"))
    assert dict(latest.dtypes)["r"] == (
        "struct<id:bigint,value:double,site:string,source:string,labels:array<string>>"
    )
    assert [r.r.asDict() for r in sorted(latest.collect(), key=lambda r: r.n)] == [
        {"id": 1, "value": 1.5, "site": "p1", "source": None, "labels": None},
        {"id": 2, "value": 2.5, "site": "p2", "source": None, "labels": None},
        {"id": 3, "value": 3.5, "site": "p3", "source": "s", "labels": ["x"]},
        {"id": 4, "value": 4.5, "site": "p4", "source": "s", "labels": ["x", "x"]},
    ]

    first = frame.select(
        "n", from_protobuf("value", options={**options, "schemaVersion": "1"}).alias("r")
    )
    assert dict(first.dtypes)["r"] == "struct<id:bigint,unit:string,value:double,place:string>"
    assert [r.r.asDict() for r in sorted(first.collect(), key=lambda r: r.n)] == [
        {"id": 1, "unit": "C", "value": 1.5, "place": "p1"},
        {"id": 2, "unit": "C", "value": 2.5, "place": "p2"},
        {"id": 3, "unit": None, "value": 3.5, "place": "p3"},
        {"id": 4, "unit": None, "value": 4.5, "place": "p4"},
    ]


def _status(_: Any) -> str:
    from kafka_direct.schema_registry import protobuf_native

    return protobuf_native.status()


def test_spark_python_workers_decode_protobuf_in_c(spark: Any) -> None:
    """The Protobuf tests run the C decoder in Spark's Python workers, not only here."""
    statuses = spark.sparkContext.parallelize([0, 1], 2).map(_status).collect()
    assert statuses == ["C decoder (kafka_direct.schema_registry._protobuf_arrow)"] * 2
