"""Unit tests for kafka_direct.schema_registry.references: walking schema references (with a
fake fetch function) and inlining referenced Avro named types."""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import pytest

from kafka_direct.schema_registry.client import RegisteredSchema, SchemaReference
from kafka_direct.schema_registry.errors import WireFormatError
from kafka_direct.schema_registry.json_types import to_spark_type
from kafka_direct.schema_registry.references import inline_avro, inline_json_schema, resolve


def _registry(
    schemas: dict[tuple[str, int], tuple[str, tuple[SchemaReference, ...]]],
) -> tuple[Any, list[tuple[str, int]]]:
    calls: list[tuple[str, int]] = []

    def fetch(subject: str, version: int) -> RegisteredSchema:
        calls.append((subject, version))
        text, refs = schemas[(subject, version)]
        return RegisteredSchema(len(calls), text, "AVRO", subject, version, refs)

    return fetch, calls


def _ref(subject: str, version: int = 1) -> SchemaReference:
    return SchemaReference(f"name-{subject}", subject, version)


def test_references_of_references_come_first_and_each_version_is_fetched_once() -> None:
    # a -> b -> d, a -> c -> d: d once, before b and c; b before a's other reference c.
    fetch, calls = _registry(
        {
            ("b", 1): ("B", (_ref("d"),)),
            ("c", 2): ("C", (_ref("d"),)),
            ("d", 1): ("D", ()),
        }
    )
    resolved = resolve((_ref("b"), _ref("c", 2)), fetch)
    assert [(r.subject, found.schema) for r, found in resolved] == [
        ("d", "D"),
        ("b", "B"),
        ("c", "C"),
    ]
    assert calls == [("b", 1), ("d", 1), ("c", 2)]


def test_two_versions_of_one_subject_are_two_schemas() -> None:
    fetch, _ = _registry({("b", 1): ("B1", ()), ("b", 2): ("B2", ())})
    resolved = resolve((_ref("b", 1), _ref("b", 2)), fetch)
    assert [found.schema for _, found in resolved] == ["B1", "B2"]


def test_no_references_fetch_nothing() -> None:
    fetch, calls = _registry({})
    assert resolve((), fetch) == []
    assert calls == []


def test_a_cycle_of_references_is_refused_with_its_path() -> None:
    fetch, _ = _registry({("b", 1): ("B", (_ref("c"),)), ("c", 1): ("C", (_ref("b"),))})
    with pytest.raises(WireFormatError, match="cycle: b v1 -> c v1 -> b v1"):
        resolve((_ref("b"),), fetch)


CUSTOMER = {
    "type": "record",
    "name": "Customer",
    "namespace": "com.acme.crm",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "tier", "type": {"type": "enum", "name": "Tier", "symbols": ["GOLD", "TIN"]}},
    ],
}
ADDRESS = {
    "type": "record",
    "name": "com.acme.geo.Address",
    "fields": [{"name": "city", "type": "string"}],
}
ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "com.acme.shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "buyer", "type": "com.acme.crm.Customer"},
        {"name": "seller", "type": ["null", "com.acme.crm.Customer"], "default": None},
        {"name": "ship_to", "type": {"type": "array", "items": "com.acme.geo.Address"}},
        {"name": "tiers", "type": {"type": "map", "values": "com.acme.crm.Tier"}},
    ],
}


def test_a_referenced_named_type_is_inlined_at_its_first_use_and_named_after() -> None:
    inlined = inline_avro(ORDER, [CUSTOMER, ADDRESS])
    fields = {f["name"]: f["type"] for f in inlined["fields"]}
    assert fields["buyer"]["name"] == "com.acme.crm.Customer"
    assert "namespace" not in fields["buyer"]
    assert fields["seller"] == ["null", "com.acme.crm.Customer"]
    assert fields["ship_to"]["items"]["name"] == "com.acme.geo.Address"
    assert fields["tiers"] == {"type": "map", "values": "com.acme.crm.Tier"}
    # fastavro reads the result as one schema, and records round-trip through it.
    parsed = fastavro.parse_schema(json.loads(json.dumps(inlined)))
    record = {
        "id": 7,
        "buyer": {"name": "ann", "tier": "GOLD"},
        "seller": {"name": "bob", "tier": "TIN"},
        "ship_to": [{"city": "Oslo"}],
        "tiers": {"x": "TIN"},
    }
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, parsed, record)
    buffer.seek(0)
    assert fastavro.schemaless_reader(buffer, parsed, None) == record


def test_a_type_defined_inside_a_referenced_record_can_be_used_first() -> None:
    schema = {
        "type": "record",
        "name": "Pair",
        "fields": [
            {"name": "tier", "type": "com.acme.crm.Tier"},
            {"name": "customer", "type": "com.acme.crm.Customer"},
        ],
    }
    inlined = inline_avro(schema, [CUSTOMER])
    tier, customer = (f["type"] for f in inlined["fields"])
    assert tier["type"] == "enum" and tier["name"] == "com.acme.crm.Tier"
    assert customer["fields"][1]["type"] == "com.acme.crm.Tier"  # defined above: a name now
    fastavro.parse_schema(inlined)


def test_a_referenced_type_without_a_namespace_keeps_its_name_inside_a_namespace() -> None:
    point = {"type": "record", "name": "Point", "fields": [{"name": "x", "type": "int"}]}
    schema = {
        "type": "record",
        "name": "Shape",
        "namespace": "geo",
        "fields": [{"name": "at", "type": "Point"}],
    }
    inlined = inline_avro(schema, [point])
    assert inlined["fields"][0]["type"]["namespace"] == ""
    assert fastavro.parse_schema(inlined)["__named_schemas"].keys() >= {"geo.Shape", "Point"}


def test_a_schema_without_references_is_unchanged() -> None:
    assert inline_avro(CUSTOMER, []) == CUSTOMER
    assert inline_avro("string", []) == "string"


def test_json_schema_documents_go_under_defs_and_refs_point_there() -> None:
    address = {"type": "object", "properties": {"city": {"type": "string"}}}
    customer = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "home": {"$ref": "address.json"},
            "tier": {"$ref": "#/definitions/Tier"},
        },
        "definitions": {"Tier": {"type": "integer"}},
    }
    order = {
        "type": "object",
        "properties": {
            "buyer": {"$ref": "customer.json"},
            "tier": {"$ref": "customer.json#/definitions/Tier"},
            "own": {"$ref": "#/$defs/Own"},
        },
        "$defs": {"Own": {"type": "boolean"}},
    }
    inlined = inline_json_schema(order, [("address.json", address), ("customer.json", customer)])
    assert inlined["properties"] == {
        "buyer": {"$ref": "#/$defs/kafka_direct_reference_1"},
        "tier": {"$ref": "#/$defs/kafka_direct_reference_1/definitions/Tier"},
        "own": {"$ref": "#/$defs/Own"},
    }
    defs = inlined["$defs"]
    assert defs["Own"] == {"type": "boolean"}
    assert defs["kafka_direct_reference_0"] == address
    assert defs["kafka_direct_reference_1"]["properties"]["home"] == {
        "$ref": "#/$defs/kafka_direct_reference_0"
    }
    assert defs["kafka_direct_reference_1"]["properties"]["tier"] == {
        "$ref": "#/$defs/kafka_direct_reference_1/definitions/Tier"
    }
    assert to_spark_type(inlined)[0]["fields"][0]["type"]["fields"][1]["type"]["fields"] == [
        {"name": "city", "type": "string", "nullable": True, "metadata": {}}
    ]
    assert inline_json_schema(order, []) == order
