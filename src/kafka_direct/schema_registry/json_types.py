"""JSON Schema → Spark SQL type, for ``from_json_schema``. Pure: the driver calls it while
planning; the result is Spark's JSON form of a type (as in :mod:`.avro_types`).

Spark has no converter of its own for JSON Schema, so this one follows the JSON types plainly:

=================================================  =========================================
JSON Schema                                        Spark
=================================================  =========================================
``object`` with ``properties``                     struct, fields in the order given; a field
                                                   is nullable unless ``required`` and not
                                                   ``null``-typed
``object`` with only ``additionalProperties: S``   map<string, S>
``array`` with ``items: S``                        array<S>
``string`` (any ``format``), ``enum``, ``const``   string
``integer`` / ``number`` / ``boolean``             bigint / double / boolean
``["null", X]``, ``oneOf``/``anyOf`` [null, X]     X, nullable
``$ref`` to ``#/definitions/...``, ``#/$defs/...``  the referenced schema
anything else (no type, several types, ``{}``)     string: the value's JSON text
=================================================  =========================================
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafka_direct.errors import ConfigurationError

__all__ = ["to_spark_type"]

_SCALARS: Mapping[str, str] = {
    "string": "string",
    "integer": "long",
    "number": "double",
    "boolean": "boolean",
    "null": "void",
}


def _field(name: str, spark: Any, nullable: bool) -> dict[str, Any]:
    return {"name": name, "type": spark, "nullable": nullable, "metadata": {}}


class _Converter:
    def __init__(self, root: Any) -> None:
        self.root = root

    def resolve(self, ref: str, stack: tuple[str, ...]) -> Any:
        if ref in stack:
            raise ConfigurationError(
                "jsonFormatSchema",
                ref,
                "a non-recursive JSON Schema: Spark cannot hold a recursive type",
            )
        if not ref.startswith("#/"):
            raise ConfigurationError(
                "jsonFormatSchema",
                ref,
                "a $ref within the schema ('#/definitions/...' or '#/$defs/...')",
                "Schema references to other subjects are not supported yet.",
            )
        target: Any = self.root
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or part not in target:
                raise ConfigurationError("jsonFormatSchema", ref, "a $ref that exists")
            target = target[part]
        return target

    def convert(self, schema: Any, stack: tuple[str, ...]) -> tuple[Any, bool]:
        """``(spark type, nullable)``."""
        if schema is True or schema == {}:
            return "string", True
        if not isinstance(schema, dict):
            raise ConfigurationError("jsonFormatSchema", schema, "a JSON Schema object")
        if "$ref" in schema:
            ref = str(schema["$ref"])
            return self.convert(self.resolve(ref, stack), (*stack, ref))
        for key in ("oneOf", "anyOf"):
            if key in schema:
                branches = schema[key]
                rest = [
                    b for b in branches if not (isinstance(b, dict) and b.get("type") == "null")
                ]
                if len(rest) == 1:
                    spark, _ = self.convert(rest[0], stack)
                    return spark, len(rest) < len(branches)
                return "string", True
        if "enum" in schema or "const" in schema:
            return "string", None in schema.get("enum", [schema.get("const")])
        kind = schema.get("type")
        nullable = False
        if isinstance(kind, list):
            nullable = "null" in kind
            rest = [k for k in kind if k != "null"]
            if len(rest) != 1:
                return ("void", True) if not rest else ("string", True)
            kind = rest[0]
        if kind is None:
            kind = "object" if "properties" in schema else None
        if isinstance(kind, str) and kind in _SCALARS:
            return _SCALARS[kind], nullable or kind == "null"
        if kind == "array":
            element, _ = self.convert(schema.get("items", {}), stack)
            return {"type": "array", "elementType": element, "containsNull": True}, nullable
        if kind == "object":
            properties = schema.get("properties")
            extra = schema.get("additionalProperties")
            if not properties and isinstance(extra, dict):
                value, _ = self.convert(extra, stack)
                return {
                    "type": "map",
                    "keyType": "string",
                    "valueType": value,
                    "valueContainsNull": True,
                }, nullable
            required = set(schema.get("required", []))
            fields = []
            for name, sub in (properties or {}).items():
                spark, sub_nullable = self.convert(sub, stack)
                fields.append(_field(name, spark, sub_nullable or name not in required))
            return {"type": "struct", "fields": fields}, nullable
        return "string", True


def to_spark_type(schema: Any) -> tuple[Any, bool]:
    """``(Spark's JSON form of the type, nullable)`` for a parsed JSON Schema."""
    return _Converter(schema).convert(schema, ())
