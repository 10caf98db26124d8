"""Unit tests for kafka_direct.schema_registry.json_types: JSON Schema → Spark type, table-style."""

from __future__ import annotations

from typing import Any

import pytest

from kafka_direct.errors import ConfigurationError
from kafka_direct.schema_registry.json_types import to_spark_type


def _field(name: str, spark: Any, nullable: bool) -> dict[str, Any]:
    return {"name": name, "type": spark, "nullable": nullable, "metadata": {}}


CASES = [
    ({"type": "string"}, "string", False),
    ({"type": "string", "format": "date-time"}, "string", False),
    ({"type": "integer"}, "long", False),
    ({"type": "number"}, "double", False),
    ({"type": "boolean"}, "boolean", False),
    ({"type": ["null", "integer"]}, "long", True),
    ({"enum": ["A", "B"]}, "string", False),
    ({"oneOf": [{"type": "null"}, {"type": "number"}]}, "double", True),
    ({"oneOf": [{"type": "string"}, {"type": "number"}]}, "string", True),
    ({}, "string", True),
    (
        {"type": "array", "items": {"type": "integer"}},
        {"type": "array", "elementType": "long", "containsNull": True},
        False,
    ),
    (
        {"type": "object", "additionalProperties": {"type": "number"}},
        {"type": "map", "keyType": "string", "valueType": "double", "valueContainsNull": True},
        False,
    ),
]


@pytest.mark.parametrize(("schema", "spark", "nullable"), CASES, ids=[repr(c[0]) for c in CASES])
def test_each_json_schema_type_maps_to_its_spark_type(
    schema: Any, spark: Any, nullable: bool
) -> None:
    assert to_spark_type(schema) == (spark, nullable)


def test_objects_keep_property_order_and_required_fields_are_not_nullable() -> None:
    schema = {
        "type": "object",
        "definitions": {"Addr": {"type": "object", "properties": {"city": {"type": "string"}}}},
        "properties": {
            "id": {"type": "integer"},
            "name": {"type": ["null", "string"]},
            "addr": {"$ref": "#/definitions/Addr"},
        },
        "required": ["id", "name"],
    }
    assert to_spark_type(schema) == (
        {
            "type": "struct",
            "fields": [
                _field("id", "long", False),
                _field("name", "string", True),
                _field(
                    "addr", {"type": "struct", "fields": [_field("city", "string", True)]}, True
                ),
            ],
        },
        False,
    )


@pytest.mark.parametrize(
    ("schema", "phrase"),
    [
        ({"$ref": "#/$defs/Node", "$defs": {"Node": {"$ref": "#/$defs/Node"}}}, "non-recursive"),
        ({"$ref": "other.json"}, "references to other subjects are not supported"),
        ({"$ref": "#/definitions/Missing"}, "a \\$ref that exists"),
    ],
)
def test_refs_that_cannot_be_resolved_are_refused(schema: Any, phrase: str) -> None:
    with pytest.raises(ConfigurationError, match=phrase):
        to_spark_type(schema)
