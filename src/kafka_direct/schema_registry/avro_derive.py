"""Spark type (as the Arrow type a Python worker receives) → Avro schema, as spark-avro's
``SchemaConverters.toAvroType`` derives it for ``to_avro`` without a schema. Pure (pyarrow
only): runs in the Spark Python worker, on the first batch of ``to_avro``'s column.

spark-avro's rules, kept so that the registered schema is the one Spark's own ``to_avro``
would write:

- the top-level record is named ``topLevelRecord``, without namespace; a nested struct is a
  record named after its field, in the namespace of the records around it
  (``topLevelRecord.address``);
- a nullable field is the union ``[type, "null"]`` (the type first, as spark-avro writes it),
  with no default;
- byte, short and int → ``int``; timestamp → ``long``/``timestamp-micros``; timestamp_ntz →
  ``long``/``local-timestamp-micros``; date → ``int``/``date``; decimal(p, s) → a ``fixed``
  of the fewest bytes that hold p digits, named ``<namespace>.<field>.fixed``; binary →
  ``bytes``; map<string, v> → ``map``; array → ``array``.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from kafka_direct.errors import ConfigurationError

__all__ = ["TOP_LEVEL_RECORD", "avro_schema_of", "min_bytes_for_precision"]

TOP_LEVEL_RECORD = "topLevelRecord"


def min_bytes_for_precision(precision: int) -> int:
    """The fewest bytes whose two's complement holds every ``precision``-digit integer."""
    size = 1
    while 2 ** (8 * size - 1) < 10**precision:
        size += 1
    return size


def avro_schema_of(
    arrow_type: pa.DataType,
    nullable: bool = False,
    record_name: str = TOP_LEVEL_RECORD,
    namespace: str = "",
) -> Any:
    """The Avro schema (JSON) spark-avro derives for a value of this type."""
    t = arrow_type
    schema: Any
    if pa.types.is_boolean(t):
        schema = "boolean"
    elif pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_int32(t):
        schema = "int"
    elif pa.types.is_int64(t):
        schema = "long"
    elif pa.types.is_date32(t):
        schema = {"type": "int", "logicalType": "date"}
    elif pa.types.is_timestamp(t):
        logical = "timestamp-micros" if t.tz is not None else "local-timestamp-micros"
        schema = {"type": "long", "logicalType": logical}
    elif pa.types.is_float32(t):
        schema = "float"
    elif pa.types.is_float64(t):
        schema = "double"
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        schema = "string"
    elif pa.types.is_null(t):
        schema = "null"
    elif pa.types.is_decimal(t):
        name = f"{record_name}.fixed" if not namespace else f"{namespace}.{record_name}.fixed"
        schema = {
            "type": "fixed",
            "name": name,
            "size": min_bytes_for_precision(t.precision),
            "logicalType": "decimal",
            "precision": t.precision,
            "scale": t.scale,
        }
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t):
        schema = "bytes"
    elif pa.types.is_map(t):
        if not (pa.types.is_string(t.key_type) or pa.types.is_large_string(t.key_type)):
            raise ConfigurationError(
                "data", str(t), "a map with string keys (Avro map keys are strings)"
            )
        values = avro_schema_of(t.item_type, t.item_field.nullable, record_name, namespace)
        schema = {"type": "map", "values": values}
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        items = avro_schema_of(t.value_type, t.value_field.nullable, record_name, namespace)
        schema = {"type": "array", "items": items}
    elif pa.types.is_struct(t):
        inner = f"{namespace}.{record_name}" if namespace else record_name
        fields = [
            {"name": f.name, "type": avro_schema_of(f.type, f.nullable, f.name, inner)}
            for f in (t.field(i) for i in range(t.num_fields))
        ]
        schema = {"type": "record", "name": record_name, "fields": fields}
        if namespace:
            schema["namespace"] = namespace
    else:
        raise ConfigurationError(
            "data",
            str(t),
            "a Spark type that Avro can hold (spark-avro's to_avro refuses it too)",
            "Pass the Avro schema as jsonFormatSchema, or cast the column.",
        )
    if nullable and schema != "null":
        return [schema, "null"]
    return schema
