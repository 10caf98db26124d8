"""from_json_schema / to_json_schema against a real Schema Registry and local Spark, checked
against confluent-kafka's own JSONSerializer / JSONDeserializer."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pyspark.errors import PythonException, SparkRuntimeException

from kafka_direct.functions import from_json_schema, to_json_schema

ORDER = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Order",
    "type": "object",
    "definitions": {
        "Line": {
            "type": "object",
            "properties": {"sku": {"type": "string"}, "quantity": {"type": "integer"}},
            "required": ["sku", "quantity"],
        }
    },
    "properties": {
        "id": {"type": "integer"},
        "paid": {"type": "boolean"},
        "amount": {"type": "number"},
        "note": {"type": ["null", "string"]},
        "kind": {"enum": ["NEW", "OLD"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
        "lines": {"type": "array", "items": {"$ref": "#/definitions/Line"}},
    },
    "required": ["id", "paid", "amount", "kind", "tags", "counts", "lines"],
}


def _order(i: int) -> dict[str, Any]:
    return {
        "id": i,
        "paid": i % 2 == 0,
        "amount": i * 1.5,
        "note": None if i % 2 else f"note {i}",
        "kind": "NEW" if i % 2 else "OLD",
        "tags": [f"t{j}" for j in range(i)],
        "counts": {"a": i},
        "lines": [{"sku": f"s{j}", "quantity": j} for j in range(i % 3)],
    }


def _serializers(confluent: Any, schema: dict[str, Any]) -> tuple[Any, Any, Any]:
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    return (
        JSONSerializer(json.dumps(schema), confluent),
        JSONDeserializer(None, schema_registry_client=confluent),
        lambda topic: SerializationContext(topic, MessageField.VALUE),
    )


def test_json_schema_records_round_trip_with_confluents_serializers(
    spark: Any, registry_url: str, topic_name: str, confluent: Any
) -> None:
    serializer, deserializer, context = _serializers(confluent, ORDER)
    records = [_order(i) for i in range(5)]
    blobs = [serializer(r, context(topic_name)) for r in records]
    options = {
        "schema.registry.subject": f"{topic_name}-value",
        "schema.registry.address": registry_url,
    }
    frame = spark.createDataFrame([(i, b) for i, b in enumerate(blobs)], "n int, value binary")
    decoded = frame.select("n", from_json_schema("value", options=options).alias("o"))
    rows = sorted(decoded.collect(), key=lambda r: r.n)
    assert [r.o.asDict(recursive=True) for r in rows] == records
    encoded = decoded.select("n", to_json_schema("o", options=options).alias("v"))
    written = [bytes(r.v) for r in sorted(encoded.collect(), key=lambda r: r.n)]
    assert {w[:5] for w in written} == {blobs[0][:5]}  # the subject's schema id
    # Spark's to_json leaves out null fields; the schema allows that, and the values are equal.
    assert [deserializer(w, context(topic_name)) for w in written] == [
        {k: v for k, v in r.items() if v is not None} for r in records
    ]


def test_a_v1_and_v2_json_topic_reads_with_v2_and_old_records_lack_the_new_field(
    spark: Any, registry_url: str, topic_name: str, confluent: Any
) -> None:
    v1 = {"title": "U", "type": "object", "properties": {"id": {"type": "integer"}}}
    v2 = {**v1, "properties": {"id": {"type": "integer"}, "email": {"type": "string"}}}
    s1, _, context = _serializers(confluent, v1)
    s2, _, _ = _serializers(confluent, v2)
    blobs = [s1({"id": 1}, context(topic_name)), s2({"id": 2, "email": "e"}, context(topic_name))]
    frame = spark.createDataFrame([(i, b) for i, b in enumerate(blobs)], "n int, value binary")
    options = {
        "schema.registry.subject": f"{topic_name}-value",
        "schema.registry.address": registry_url,
    }
    rows = frame.select("n", from_json_schema("value", options=options).alias("u")).collect()
    assert sorted((r.n, r.u.id, r.u.email) for r in rows) == [(0, 1, None), (1, 2, "e")]


def test_a_json_record_without_the_magic_byte_fails_or_is_null(
    spark: Any, registry_url: str, topic_name: str, confluent: Any
) -> None:
    serializer, _, context = _serializers(confluent, ORDER)
    good = serializer(_order(1), context(topic_name))
    frame = spark.createDataFrame([(0, good), (1, b'{"id": 2}')], "n int, value binary")
    options = {
        "schema.registry.subject": f"{topic_name}-value",
        "schema.registry.address": registry_url,
    }
    with pytest.raises((SparkRuntimeException, PythonException)) as info:
        frame.select(from_json_schema("value", options=options)).collect()
    assert "A record is not in the Confluent wire format" in str(info.value)
    assert "9 byte(s) long and starts with 0x7b226964223a2032" in str(info.value)
    permissive = frame.select(
        "n", from_json_schema("value", options={**options, "mode": "PERMISSIVE"}).alias("o")
    )
    rows = sorted(permissive.collect(), key=lambda r: r.n)
    assert [None if r.o is None else r.o.id for r in rows] == [1, None]


def test_an_avro_subject_is_refused_by_from_json_schema(
    registry_url: str, topic_name: str, confluent: Any
) -> None:
    from confluent_kafka.schema_registry import Schema

    confluent.register_schema(
        f"{topic_name}-value",
        Schema(json.dumps({"type": "record", "name": "R", "fields": []}), "AVRO"),
    )
    options = {
        "schema.registry.subject": f"{topic_name}-value",
        "schema.registry.address": registry_url,
    }
    with pytest.raises(Exception, match="a subject of JSON schemas, not AVRO"):
        from_json_schema("value", options=options)
