"""The source's decode of the ``value`` column (``valueFormat=avro`` or ``protobuf``). Runs in
the Spark driver's Python processes (planning: the reader schema, the row schema) and, pickled
with the reader, in the executors' Python workers (decoding each Arrow batch the consumer
filled).

The options are :mod:`kafka_direct.config.value_format`'s; the planning is ``from_avro``'s
(:func:`kafka_direct.schema_registry.avro_read.plan_avro_read`) or ``from_protobuf``'s
(:mod:`kafka_direct.schema_registry.protobuf_read`), so the source and the column functions
decode alike. What only the source can do: decode in the worker that read the records (the
bytes never go to the JVM and back to a second Python worker), name a bad record by its topic,
partition and offset, and keep the bytes of the values that did not decode in a corrupt-record
column.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

from kafka_direct.config.value_format import ValueFormat
from kafka_direct.errors import ConfigurationError
from kafka_direct.schema_registry.errors import SchemaNotFoundError

if TYPE_CHECKING:
    from kafka_direct.schema_registry.read_plan import ReadPlan

__all__ = ["ValueDecode", "row_schema", "value_decode"]

_VALUE = 1  # the value column's index in the source's rows (consumer.rows)
_TOPIC, _PARTITION, _OFFSET = 2, 3, 4


def value_decode(value_format: ValueFormat) -> ValueDecode | None:
    """The decode ``value_format`` asks for, planned now (the registry is asked once), or None
    for Kafka's bytes."""
    if not value_format.decodes:
        return None
    # Here, not at the top: a source without valueFormat (most) never loads the registry's
    # client and codecs, in the Python process Spark starts for each stream.
    from kafka_direct.schema_registry.avro_read import plan_avro_read
    from kafka_direct.schema_registry.protobuf_read import plan_protobuf_read

    try:
        if value_format.format == "protobuf":
            assert value_format.subject is not None and value_format.registry_address is not None
            plan = plan_protobuf_read(
                value_format.subject,
                value_format.registry_address,
                value_format.options,
                value_format.message_name,
                function="source's valueFormat 'protobuf'",
                subject_option="subject",
            )
        else:
            plan = plan_avro_read(
                value_format.json_format_schema,
                value_format.options,
                value_format.subject,
                value_format.registry_address,
                function="source's valueFormat 'avro'",
            )
    except SchemaNotFoundError as exc:
        if not value_format.subject_by_default:
            raise
        raise SchemaNotFoundError(
            f"{exc} The option 'subject' defaults to '<topic>-value' (Confluent's topic name "
            "strategy): set 'subject' to where this topic's schemas are registered."
        ) from None
    return ValueDecode(plan, value_format.corrupt_column)


def row_schema(include_headers: bool, decode: ValueDecode | None) -> Any:
    """The source's rows as a Spark ``StructType``: Spark's Kafka schema, with ``value`` of the
    reader schema's type and the corrupt-record column when the values are decoded."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        DataType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    value: DataType = BinaryType() if decode is None else decode.plan.spark_type
    fields = [
        StructField("key", BinaryType()),
        StructField("value", value),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    if decode is not None and decode.corrupt_column is not None:
        fields.append(StructField(decode.corrupt_column, BinaryType()))
    return StructType(fields)


class ValueDecode:
    """Decodes the ``value`` column of the source's Arrow batches; pickled with the reader."""

    def __init__(self, plan: ReadPlan, corrupt_column: str | None) -> None:
        self.plan = plan
        self.corrupt_column = corrupt_column

    def __repr__(self) -> str:
        corrupt = f", corrupt records in '{self.corrupt_column}'" if self.corrupt_column else ""
        return f"ValueDecode(reader schema {self.plan.described}{corrupt})"

    def check_planned(self, schema: Any) -> None:
        """Refuse a reader built for another value type than ``load()`` planned: the subject's
        latest schema changed in between."""
        planned = schema["value"].dataType if "value" in schema.fieldNames() else None
        if planned is not None and planned != self.plan.spark_type:
            raise ConfigurationError(
                "subject",
                self.plan.described,
                "the reader schema load() planned the value column with "
                f"({planned.simpleString()[:200]})",
                "The subject's latest schema changed after load(): call load() again, or pin "
                "the reader schema with the option 'schemaVersion' (or 'jsonFormatSchema').",
            )

    def apply(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` with its value column decoded (and the corrupt-record column added)."""
        values = batch.column(_VALUE)

        def where(row: int) -> str:
            return (
                f"the record at offset {batch.column(_OFFSET)[row].as_py()} in partition "
                f"{batch.column(_PARTITION)[row].as_py()} of topic "
                f"'{batch.column(_TOPIC)[row].as_py()}'"
            )

        failed: list[int] | None = [] if self.corrupt_column is not None else None
        decoded = self.plan.decoder.decode(values, where, failed)
        columns = batch.columns
        columns[_VALUE] = decoded
        fields = [batch.schema.field(i) for i in range(batch.num_columns)]
        fields[_VALUE] = pa.field("value", self.plan.arrow_type)
        if self.corrupt_column is not None:
            columns.append(_corrupt(values, failed or []))
            fields.append(pa.field(self.corrupt_column, pa.binary()))
        return pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields))


def _corrupt(values: pa.Array, failed: list[int]) -> pa.Array:
    """The bytes of the rows in ``failed``; null elsewhere."""
    if not failed:
        return pa.nulls(len(values), pa.binary())
    indices: list[int | None] = [None] * len(values)
    for row in failed:
        indices[row] = row
    taken: pa.Array = values.take(pa.array(indices, pa.int64()))
    return taken.cast(pa.binary())
