"""from_protobuf / to_protobuf against a real Schema Registry and local Spark, checked against
confluent-kafka's own ProtobufSerializer / ProtobufDeserializer (schemas registered as base64
descriptors), and against a schema registered as .proto text (compiled in the workers)."""

from __future__ import annotations

import datetime
from types import ModuleType
from typing import Any

import pytest
from pyspark.errors import PythonException

from kafka_direct.functions import from_protobuf, to_protobuf
from kafka_direct.schema_registry.protobuf_codec import message_indexes
from kafka_direct.schema_registry.wire import header
from kafka_direct.testing.samples import ORDER_PROTO as PROTO

UTC = datetime.timezone.utc


def _orders(pb2: ModuleType) -> list[Any]:
    orders = []
    for i in range(1, 5):
        order = pb2.Order(
            id=i,
            customer=f"c{i}",
            tags=[f"t{j}" for j in range(i)],
            counts={"a": i},
            kind=i % 2,
            first=pb2.Line(sku=f"s{i}", quantity=i),
            lines=[pb2.Line(sku="x", quantity=j + 1) for j in range(i % 3)],
            blob=bytes([i]),
            amount=i * 1.5,
            paid=i % 2 == 0,
        )
        order.at.FromDatetime(datetime.datetime(2024, 1, i, 12, 0, 0, 250000, tzinfo=UTC))
        if i % 2:
            order.note = f"note {i}"
        orders.append(order)
    return orders


def _spark_value(i: int) -> dict[str, Any]:
    """What Spark gives for order i: fields left at their default are null (spark-protobuf)."""
    return {
        "id": i,
        "customer": f"c{i}",
        "tags": [f"t{j}" for j in range(i)],
        "counts": {"a": i},
        "kind": "OLD" if i % 2 else None,
        "first": {"sku": f"s{i}", "quantity": i},
        "lines": [{"sku": "x", "quantity": j + 1} for j in range(i % 3)] or None,
        "at": datetime.datetime(2024, 1, i, 12, 0, 0, 250000),
        "note": f"note {i}" if i % 2 else None,
        "blob": bytes([i]),
        "amount": i * 1.5,
        "paid": True if i % 2 == 0 else None,
    }


def test_protobuf_records_round_trip_with_confluents_serializers(
    spark: Any, registry_url: str, topic_name: str, confluent: Any, order_pb2: ModuleType
) -> None:
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    context = SerializationContext(topic_name, MessageField.VALUE)
    conf = {"use.deprecated.format": False}
    serializer = ProtobufSerializer(order_pb2.Order, confluent, conf)
    orders = _orders(order_pb2)
    blobs = [serializer(o, context) for o in orders]
    options = {
        "schema.registry.subject": f"{topic_name}-value",
        "schema.registry.address": registry_url,
    }
    frame = spark.createDataFrame([(i, b) for i, b in enumerate(blobs)], "n int, value binary")
    decoded = frame.select("n", from_protobuf("value", "Order", options=options).alias("o"))
    assert dict(decoded.dtypes)["o"].startswith(
        "struct<id:bigint,customer:string,tags:array<string>,counts:map<string,int>,kind:string,"
    )
    rows = sorted(decoded.collect(), key=lambda r: r.n)
    got = [r.o.asDict(recursive=True) for r in rows]
    assert got == [_spark_value(i) for i in range(1, 5)]
    encoded = decoded.select("n", to_protobuf("o", "Order", options=options).alias("v"))
    written = [bytes(r.v) for r in sorted(encoded.collect(), key=lambda r: r.n)]
    deserializer = ProtobufDeserializer(order_pb2.Order, conf)
    assert [deserializer(w, context) for w in written] == orders
    assert written == blobs


def test_a_schema_registered_as_proto_text_is_compiled_in_the_workers(
    spark: Any, registry_url: str, topic_name: str, confluent: Any, order_pb2: ModuleType
) -> None:
    from confluent_kafka.schema_registry import Schema

    subject = f"{topic_name}-value"
    schema_id = confluent.register_schema(subject, Schema(PROTO, "PROTOBUF"))
    orders = _orders(order_pb2)
    line = order_pb2.Line(sku="only", quantity=9)
    blobs = [header(schema_id) + message_indexes([0]) + o.SerializeToString() for o in orders]
    frame = spark.createDataFrame([(i, b) for i, b in enumerate(blobs)], "n int, value binary")
    options = {"schema.registry.subject": subject, "schema.registry.address": registry_url}
    rows = sorted(
        frame.select("n", from_protobuf("value", options=options).alias("o")).collect(),
        key=lambda r: r.n,
    )
    assert [r.o.asDict(recursive=True) for r in rows] == [_spark_value(i) for i in range(1, 5)]
    # The second message of the file: message indexes [1], read with messageName "Line".
    line = (
        header(schema_id)
        + message_indexes([1])
        + order_pb2.Line(sku="k", quantity=9).SerializeToString()
    )
    lines = spark.createDataFrame([(line,)], "value binary").select(
        from_protobuf("value", "Line", options=options).alias("l")
    )
    assert [r.l.asDict() for r in lines.collect()] == [{"sku": "k", "quantity": 9}]


def test_a_protobuf_record_without_the_magic_byte_fails_or_is_null(
    spark: Any, registry_url: str, topic_name: str, confluent: Any, order_pb2: ModuleType
) -> None:
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    serializer = ProtobufSerializer(order_pb2.Order, confluent, {"use.deprecated.format": False})
    good = serializer(_orders(order_pb2)[0], SerializationContext(topic_name, MessageField.VALUE))
    frame = spark.createDataFrame([(0, good), (1, b"\x08\x01")], "n int, value binary")
    options = {
        "schema.registry.subject": f"{topic_name}-value",
        "schema.registry.address": registry_url,
    }
    with pytest.raises(PythonException) as info:
        frame.select(from_protobuf("value", options=options)).collect()
    assert "is not in the Confluent wire format: it is 2 byte(s) long" in str(info.value)
    permissive = frame.select(
        "n", from_protobuf("value", options={**options, "mode": "PERMISSIVE"}).alias("o")
    )
    rows = sorted(permissive.collect(), key=lambda r: r.n)
    assert [None if r.o is None else r.o.id for r in rows] == [1, None]
