"""Schema references against a real Schema Registry and local Spark: a Protobuf file importing
other registered files (registered as references by confluent-kafka's ProtobufSerializer), and
an Avro schema whose named type is another subject's, each read with exact content and written
back byte for byte."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pyarrow as pa

from kafka_direct.functions import (
    from_avro,
    from_json_schema,
    from_protobuf,
    to_avro,
    to_protobuf,
)
from kafka_direct.schema_registry.avro_codec import AvroDecoder
from kafka_direct.schema_registry.options import parse_registry

from .protobuf_classes import message_classes

ADDRESS_PROTO = """syntax = "proto3";
package kd.refs;
message Address { string city = 1; repeated string lines = 2; }
"""
CUSTOMER_PROTO = """syntax = "proto3";
package kd.refs;
import "kd_refs_address.proto";
message Customer { string name = 1; int32 tier = 2; Address home = 3; }
"""
ORDER_PROTO = """syntax = "proto3";
package kd.refs;
import "kd_refs_customer.proto";
import "google/protobuf/timestamp.proto";
message Order {
  int64 id = 1;
  Customer buyer = 2;
  repeated Customer others = 3;
  google.protobuf.Timestamp at = 4;
}
"""


def test_a_protobuf_file_importing_registered_files_reads_and_writes(
    spark: Any, registry_url: str, topic_name: str, confluent: Any
) -> None:
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    classes = message_classes(
        {
            "kd_refs_address.proto": ADDRESS_PROTO,
            "kd_refs_customer.proto": CUSTOMER_PROTO,
            "kd_refs_order.proto": ORDER_PROTO,
        }
    )
    order, customer, address = (classes[f"kd.refs.{n}"] for n in ("Order", "Customer", "Address"))
    orders = []
    for i in range(1, 4):
        o = order(
            id=i,
            buyer=customer(name=f"c{i}", tier=i, home=address(city=f"town{i}", lines=["a"] * i)),
            others=[customer(name=f"o{j}") for j in range(i - 1)],
        )
        o.at.FromSeconds(1_700_000_000 + i)
        orders.append(o)
    context = SerializationContext(topic_name, MessageField.VALUE)
    serializer = ProtobufSerializer(order, confluent, {"use.deprecated.format": False})
    blobs = [serializer(o, context) for o in orders]
    subject = f"{topic_name}-value"
    registered = confluent.get_latest_version(subject)
    # confluent-kafka registered each imported file under its own subject, as a reference.
    assert [r.name for r in registered.schema.references] == ["kd_refs_customer.proto"]

    options = {"schema.registry.subject": subject, "schema.registry.address": registry_url}
    frame = spark.createDataFrame(list(enumerate(blobs)), "n int, value binary")
    decoded = frame.select("n", from_protobuf("value", "Order", options=options).alias("o"))
    assert dict(decoded.dtypes)["o"] == (
        "struct<id:bigint,buyer:struct<name:string,tier:int,home:struct<city:string,"
        "lines:array<string>>>,others:array<struct<name:string,tier:int,home:struct<city:string,"
        "lines:array<string>>>>,at:timestamp>"
    )
    rows = sorted(decoded.collect(), key=lambda r: r.n)
    assert [r.o.asDict(recursive=True) for r in rows] == [
        {
            "id": i,
            "buyer": {"name": f"c{i}", "tier": i, "home": {"city": f"town{i}", "lines": ["a"] * i}},
            "others": [{"name": f"o{j}", "tier": None, "home": None} for j in range(i - 1)] or None,
            "at": datetime.datetime.fromtimestamp(1_700_000_000 + i),
        }
        for i in range(1, 4)
    ]
    written = decoded.select("n", to_protobuf("o", "Order", options=options).alias("v"))
    assert [bytes(r.v) for r in sorted(written.collect(), key=lambda r: r.n)] == blobs


CUSTOMER_AVRO = {
    "type": "record",
    "name": "Customer",
    "namespace": "com.acme.crm",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "tier", "type": {"type": "enum", "name": "Tier", "symbols": ["GOLD", "TIN"]}},
    ],
}
ORDER_AVRO = {
    "type": "record",
    "name": "Order",
    "namespace": "com.acme.shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "buyer", "type": "com.acme.crm.Customer"},
        {"name": "seller", "type": ["null", "com.acme.crm.Customer"], "default": None},
        {"name": "tiers", "type": {"type": "array", "items": "com.acme.crm.Tier"}},
    ],
}


def test_an_avro_schema_using_another_subjects_record_reads_and_writes(
    spark: Any, registry_url: str, topic_name: str, confluent: Any
) -> None:
    from confluent_kafka.schema_registry import Schema, SchemaReference
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    customer_subject = f"{topic_name}-customer"
    confluent.register_schema(customer_subject, Schema(json.dumps(CUSTOMER_AVRO), "AVRO"))
    version = confluent.get_latest_version(customer_subject).version
    reference = SchemaReference("com.acme.crm.Customer", customer_subject, version)
    subject = f"{topic_name}-value"
    schema_id = confluent.register_schema(
        subject, Schema(json.dumps(ORDER_AVRO), "AVRO", [reference])
    )
    records = [
        {
            "id": i,
            "buyer": {"name": f"b{i}", "tier": "GOLD"},
            "seller": {"name": f"s{i}", "tier": "TIN"} if i % 2 else None,
            "tiers": ["TIN"] * i,
        }
        for i in range(1, 5)
    ]
    serializer = AvroSerializer(
        confluent,
        Schema(json.dumps(ORDER_AVRO), "AVRO", [reference]),
        conf={"auto.register.schemas": False, "use.latest.version": True},
    )
    context = SerializationContext(topic_name, MessageField.VALUE)
    blobs = [serializer(r, context) for r in records]
    assert {b[1:5] for b in blobs} == {schema_id.to_bytes(4, "big")}

    frame = spark.createDataFrame(list(enumerate(blobs)), "n int, value binary")
    decoded = frame.select(
        "n", from_avro("value", subject=subject, schemaRegistryAddress=registry_url).alias("o")
    )
    assert dict(decoded.dtypes)["o"] == (
        "struct<id:bigint,buyer:struct<name:string,tier:string>,"
        "seller:struct<name:string,tier:string>,tiers:array<string>>"
    )
    rows = sorted(decoded.collect(), key=lambda r: r.n)
    assert [r.o.asDict(recursive=True) for r in rows] == records
    written = decoded.select(
        "n", to_avro("o", subject=subject, schemaRegistryAddress=registry_url).alias("v")
    )
    assert [bytes(r.v) for r in sorted(written.collect(), key=lambda r: r.n)] == blobs

    # The C decoder takes the resolved schema: its program covers the writer, no fastavro rows.
    from pyspark.sql.pandas.types import to_arrow_type

    from kafka_direct.schema_registry.client import RegistryClient
    from kafka_direct.schema_registry.references import avro_schema

    registry = parse_registry(registry_url, {})
    client = RegistryClient(registry)
    reader = avro_schema(client, client.subject_version(subject))
    arrow_type = to_arrow_type(decoded.schema["o"].dataType, timezone="UTC")
    decoder = AvroDecoder(reader, arrow_type, registry=registry, reader_id=schema_id)
    native = decoder._native_reader()
    assert native is not None
    assert native.program(schema_id, decoder._writer_json(schema_id)) is not None
    assert decoder.decode(pa.array(blobs, pa.binary())).to_pylist() == records


ADDRESS_JSON = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "zip": {"type": "integer"}},
}
CUSTOMER_JSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "home": {"$ref": "kd_refs_address.json"}},
}
ORDER_JSON = {
    "type": "object",
    "title": "Order",
    "properties": {
        "id": {"type": "integer"},
        "buyer": {"$ref": "kd_refs_customer.json"},
        "others": {"type": "array", "items": {"$ref": "kd_refs_customer.json"}},
    },
}


def test_a_json_schema_with_refs_to_other_subjects_reads(
    spark: Any, registry_url: str, topic_name: str, confluent: Any
) -> None:
    from confluent_kafka.schema_registry import Schema, SchemaReference
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    def register(subject: str, schema: Any, references: list[Any]) -> SchemaReference:
        confluent.register_schema(subject, Schema(json.dumps(schema), "JSON", references))
        return confluent.get_latest_version(subject).version

    address = f"{topic_name}-address"
    customer = f"{topic_name}-customer"
    address_ref = SchemaReference(
        "kd_refs_address.json", address, register(address, ADDRESS_JSON, [])
    )
    customer_ref = SchemaReference(
        "kd_refs_customer.json", customer, register(customer, CUSTOMER_JSON, [address_ref])
    )
    subject = f"{topic_name}-value"
    schema_id = confluent.register_schema(
        subject, Schema(json.dumps(ORDER_JSON), "JSON", [customer_ref])
    )
    serializer = JSONSerializer(
        Schema(json.dumps(ORDER_JSON), "JSON", [customer_ref]),
        confluent,
        conf={"auto.register.schemas": False, "use.latest.version": True},
    )
    records = [
        {
            "id": i,
            "buyer": {"name": f"b{i}", "home": {"city": f"t{i}", "zip": 1000 + i}},
            "others": [{"name": "o", "home": {"city": "x", "zip": i}}] * (i - 1),
        }
        for i in range(1, 4)
    ]
    context = SerializationContext(topic_name, MessageField.VALUE)
    blobs = [serializer(r, context) for r in records]
    assert {b[1:5] for b in blobs} == {schema_id.to_bytes(4, "big")}
    frame = spark.createDataFrame(list(enumerate(blobs)), "n int, value binary")
    options = {"schema.registry.subject": subject, "schema.registry.address": registry_url}
    decoded = frame.select("n", from_json_schema("value", options=options).alias("o"))
    assert dict(decoded.dtypes)["o"] == (
        "struct<id:bigint,buyer:struct<name:string,home:struct<city:string,zip:bigint>>,"
        "others:array<struct<name:string,home:struct<city:string,zip:bigint>>>>"
    )
    rows = sorted(decoded.collect(), key=lambda r: r.n)
    assert [r.o.asDict(recursive=True) for r in rows] == records
