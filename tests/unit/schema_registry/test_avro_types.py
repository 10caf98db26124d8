"""Unit tests for kafka_direct.schema_registry.avro_types: Avro → Spark type, table-style, as
spark-avro's SchemaConverters.toSqlType maps each case. No Spark, no registry."""

from __future__ import annotations

from typing import Any

import pytest

from kafka_direct.errors import ConfigurationError
from kafka_direct.schema_registry.avro_types import (
    parse_schema,
    record_full_name,
    to_spark_type,
)


def _field(name: str, spark: Any, nullable: bool) -> dict[str, Any]:
    return {"name": name, "type": spark, "nullable": nullable, "metadata": {}}


CASES = [
    ("null", "void", True),
    ("boolean", "boolean", False),
    ("int", "integer", False),
    ("long", "long", False),
    ("float", "float", False),
    ("double", "double", False),
    ("bytes", "binary", False),
    ("string", "string", False),
    ({"type": "string", "logicalType": "uuid"}, "string", False),
    ({"type": "enum", "name": "E", "symbols": ["A"]}, "string", False),
    ({"type": "fixed", "name": "F", "size": 4}, "binary", False),
    (
        {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
        "decimal(10,2)",
        False,
    ),
    (
        {"type": "fixed", "name": "D", "size": 8, "logicalType": "decimal", "precision": 18},
        "decimal(18,0)",
        False,
    ),
    ({"type": "int", "logicalType": "date"}, "date", False),
    ({"type": "int", "logicalType": "time-millis"}, "integer", False),
    ({"type": "long", "logicalType": "timestamp-millis"}, "timestamp", False),
    ({"type": "long", "logicalType": "timestamp-micros"}, "timestamp", False),
    ({"type": "long", "logicalType": "local-timestamp-micros"}, "timestamp_ntz", False),
    (["null", "string"], "string", True),
    (["string", "null"], "string", True),
    (["int", "long"], "long", False),
    (["null", "float", "double"], "double", True),
    # A branch's type as a dict is its type too, logical type aside: spark-avro compares Avro's
    # Schema.getType of the branches.
    (["null", {"type": "int"}, "long"], "long", True),
    ([{"type": "int"}, {"type": "long"}], "long", False),
    (["null", {"type": "float"}, {"type": "double"}], "double", True),
    (["int", {"type": "long", "logicalType": "timestamp-millis"}], "long", False),
    (["null", {"type": "int", "logicalType": "date"}, "long"], "long", True),
    (
        [{"type": "int"}, {"type": "string"}],
        {
            "type": "struct",
            "fields": [_field("member0", "integer", True), _field("member1", "string", True)],
        },
        False,
    ),
    (["null"], "void", True),
    (
        ["null", "int", "string"],
        {
            "type": "struct",
            "fields": [_field("member0", "integer", True), _field("member1", "string", True)],
        },
        True,
    ),
    (
        {"type": "array", "items": ["null", "long"]},
        {"type": "array", "elementType": "long", "containsNull": True},
        False,
    ),
    (
        {"type": "map", "values": "double"},
        {"type": "map", "keyType": "string", "valueType": "double", "valueContainsNull": False},
        False,
    ),
]


@pytest.mark.parametrize(("avro", "spark", "nullable"), CASES, ids=[repr(c[0]) for c in CASES])
def test_each_avro_type_maps_as_spark_avro_maps_it(avro: Any, spark: Any, nullable: bool) -> None:
    assert to_spark_type(avro) == (spark, nullable)


def test_records_nest_and_named_types_are_referenced_by_name() -> None:
    schema = {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [
            {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
            {"name": "again", "type": "Kind"},
            {"name": "other", "type": ["null", "shop.Kind"]},
            {
                "name": "addr",
                "type": {
                    "type": "record",
                    "name": "Addr",
                    "fields": [{"name": "c", "type": "string"}],
                },
            },
        ],
    }
    spark, nullable = to_spark_type(schema)
    assert nullable is False
    assert spark == {
        "type": "struct",
        "fields": [
            _field("kind", "string", False),
            _field("again", "string", False),
            _field("other", "string", True),
            _field("addr", {"type": "struct", "fields": [_field("c", "string", False)]}, False),
        ],
    }
    assert record_full_name(schema) == "shop.Order"
    assert record_full_name("string") is None


def test_a_recursive_record_is_refused_as_spark_avro_refuses_it() -> None:
    schema = {
        "type": "record",
        "name": "Node",
        "fields": [{"name": "next", "type": ["null", "Node"]}],
    }
    with pytest.raises(ConfigurationError, match="recursive"):
        to_spark_type(schema)


def test_malformed_schema_json_names_the_option() -> None:
    with pytest.raises(ConfigurationError, match=r"Invalid option 'jsonFormatSchema'.*Avro schema"):
        parse_schema("{not json")
