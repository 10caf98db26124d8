"""Avro schema → Spark SQL type, as spark-avro's ``SchemaConverters.toSqlType`` maps it. Pure:
the driver calls it while planning; no pyspark import (the result is Spark's JSON form of a
type, which the driver turns into a ``DataType`` with ``DataType.fromJson``).

The mapping (spark-avro's, so that a query moved from Spark's ``from_avro`` gets the same
columns):

==============================  ==========================================================
Avro                            Spark
==============================  ==========================================================
null                            void (NullType)
boolean / int / long            boolean / integer / long
float / double                  float / double
string, enum, uuid              string
bytes, fixed                    binary
decimal (on bytes or fixed)     decimal(precision, scale)
date                            date
timestamp-millis / -micros      timestamp
local-timestamp-millis/-micros  timestamp_ntz
record                          struct (a field is nullable when its type is a union with null)
array / map                     array / map<string, ...>
union [null, X]                 X, nullable
union [int, long]               long (with or without null; a date, time or timestamp
                                branch gives its number as written, as in spark-avro)
union [float, double]           double (with or without null)
any other union                 struct<member0, member1, ...>, one nullable field per
                                non-null branch in order; nullable if null is a branch
==============================  ==========================================================

Recursive records cannot be a Spark type and are refused, as spark-avro refuses them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kafka_direct.errors import ConfigurationError

__all__ = ["SparkType", "parse_schema", "record_full_name", "to_spark_type"]

#: Spark's JSON form of a type: a name such as ``"long"`` or a dict for struct/array/map.
SparkType = Any

_PRIMITIVES: Mapping[str, str] = {
    "null": "void",
    "boolean": "boolean",
    "int": "integer",
    "long": "long",
    "float": "float",
    "double": "double",
    "bytes": "binary",
    "string": "string",
}
_NAMED = ("record", "error", "enum", "fixed")


def parse_schema(text: str, option: str = "jsonFormatSchema") -> Any:
    """The JSON of an Avro schema; :class:`ConfigurationError` naming ``option`` if malformed."""
    try:
        return json.loads(text)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(
            option, text[:200] if isinstance(text, str) else text, f"an Avro schema in JSON ({exc})"
        ) from exc


def _full_name(schema: Mapping[str, Any], namespace: str | None) -> str:
    name = str(schema["name"])
    if "." in name:
        return name
    space = schema.get("namespace", namespace)
    return f"{space}.{name}" if space else name


def record_full_name(schema: Any) -> str | None:
    """The full name of a top-level named schema (for the record subject name strategies)."""
    if isinstance(schema, dict) and schema.get("type") in _NAMED and "name" in schema:
        return _full_name(schema, None)
    return None


class _Converter:
    def __init__(self) -> None:
        self.named: dict[str, Any] = {}

    def convert(
        self, schema: Any, namespace: str | None, stack: tuple[str, ...]
    ) -> tuple[SparkType, bool]:
        """``(spark type, nullable)`` of one Avro schema."""
        if isinstance(schema, list):
            return self._union(schema, namespace, stack)
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                return _PRIMITIVES[schema], schema == "null"
            return self._reference(schema, namespace, stack)
        if not isinstance(schema, dict) or "type" not in schema:
            raise ConfigurationError("jsonFormatSchema", schema, "an Avro schema")
        kind = schema["type"]
        logical = schema.get("logicalType")
        if kind in ("bytes", "fixed") and logical == "decimal":
            self._register(schema, namespace)
            return f"decimal({int(schema['precision'])},{int(schema.get('scale', 0))})", False
        if kind == "int" and logical == "date":
            return "date", False
        if kind == "long" and logical in ("timestamp-millis", "timestamp-micros"):
            return "timestamp", False
        if kind == "long" and logical in ("local-timestamp-millis", "local-timestamp-micros"):
            return "timestamp_ntz", False
        if isinstance(kind, str) and kind in _PRIMITIVES:
            return _PRIMITIVES[kind], kind == "null"
        if kind == "enum":
            self._register(schema, namespace)
            return "string", False
        if kind == "fixed":
            self._register(schema, namespace)
            return "binary", False
        if kind == "array":
            element, nullable = self.convert(schema["items"], namespace, stack)
            return {"type": "array", "elementType": element, "containsNull": nullable}, False
        if kind == "map":
            value, nullable = self.convert(schema["values"], namespace, stack)
            return {
                "type": "map",
                "keyType": "string",
                "valueType": value,
                "valueContainsNull": nullable,
            }, False
        if kind in ("record", "error"):
            return self._record(schema, namespace, stack), False
        if isinstance(kind, (dict, list)):
            return self.convert(kind, namespace, stack)
        if isinstance(kind, str):
            return self._reference(kind, namespace, stack)
        raise ConfigurationError("jsonFormatSchema", schema, "an Avro schema")

    def _register(self, schema: Mapping[str, Any], namespace: str | None) -> str:
        if "name" not in schema:  # a decimal on bytes is anonymous
            return ""
        full = _full_name(schema, namespace)
        self.named[full] = schema
        return full

    def _reference(
        self, name: str, namespace: str | None, stack: tuple[str, ...]
    ) -> tuple[SparkType, bool]:
        full = name if "." in name or not namespace else f"{namespace}.{name}"
        target = self.named.get(full, self.named.get(name))
        if target is None:
            raise ConfigurationError(
                "jsonFormatSchema", name, "a type defined earlier in the schema", None
            )
        if full in stack or name in stack:
            raise ConfigurationError(
                "jsonFormatSchema",
                name,
                "a non-recursive Avro schema: Spark cannot hold a recursive record",
                "spark-avro refuses recursive schemas too.",
            )
        space = full.rsplit(".", 1)[0] if "." in full else None
        return self.convert(target, space, stack)

    def _record(
        self, schema: Mapping[str, Any], namespace: str | None, stack: tuple[str, ...]
    ) -> SparkType:
        full = self._register(schema, namespace)
        space = full.rsplit(".", 1)[0] if "." in full else None
        fields = []
        for field in schema.get("fields", []):
            spark_type, nullable = self.convert(field["type"], space, (*stack, full))
            fields.append(
                {"name": field["name"], "type": spark_type, "nullable": nullable, "metadata": {}}
            )
        return {"type": "struct", "fields": fields}

    def _union(
        self, branches: list[Any], namespace: str | None, stack: tuple[str, ...]
    ) -> tuple[SparkType, bool]:
        has_null = any(_is_null(b) for b in branches)
        rest = [b for b in branches if not _is_null(b)]
        if not rest:
            return "void", True
        if len(rest) == 1:
            spark_type, _ = self.convert(rest[0], namespace, stack)
            return spark_type, has_null
        names = sorted(_primitive_name(b) for b in rest)
        if names == ["int", "long"]:
            return "long", has_null
        if names == ["double", "float"]:
            return "double", has_null
        fields = []
        for index, branch in enumerate(rest):
            spark_type, _ = self.convert(branch, namespace, stack)
            fields.append(
                {"name": f"member{index}", "type": spark_type, "nullable": True, "metadata": {}}
            )
        return {"type": "struct", "fields": fields}, has_null


def _is_null(schema: Any) -> bool:
    return schema == "null" or (isinstance(schema, dict) and schema.get("type") == "null")


def _primitive_name(schema: Any) -> str:
    """A union branch's primitive type, "" for any other: ``{"type": "int"}`` is ``int`` too,
    logical type or not, as spark-avro compares unions' branches by Avro's ``Schema.getType``
    (so ``["int", {"type": "long", "logicalType": "timestamp-millis"}]`` is Spark's long)."""
    while isinstance(schema, dict):
        schema = schema.get("type")
    return schema if isinstance(schema, str) and schema in _PRIMITIVES else ""


def to_spark_type(schema: Any) -> tuple[SparkType, bool]:
    """``(Spark's JSON form of the type, nullable)`` for a parsed Avro schema."""
    return _Converter().convert(schema, None, ())
