"""Column functions for records in the Confluent wire format: ``from_avro`` and ``to_avro`` with
Databricks' PySpark signatures, so that code moves over unchanged. Runs in the Spark driver
(planning: the registry is asked for the schema once, here); the returned columns run in the
Python workers as vectorised Arrow UDFs (:mod:`kafka_direct.schema_registry.avro_codec`).

::

    from kafka_direct.functions import from_avro, to_avro

    events = df.select(from_avro("value", subject="events-value",
                                 schemaRegistryAddress="http://registry:8081").alias("event"))
    out = events.select(to_avro(struct("event.*"), subject="out-value",
                                schemaRegistryAddress="http://registry:8081").alias("value"))

``from_json_schema`` / ``to_json_schema`` do the same for JSON Schema records (see
:mod:`kafka_direct.schema_registry.json_schema`). Without ``schemaRegistryAddress`` the Avro
functions read and write bare Avro with
``jsonFormatSchema``, as Spark's own ``from_avro`` / ``to_avro`` do. Needs ``fastavro``
(``pip install 'kafka-direct[schema-registry]'``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kafka_direct.errors import ConfigurationError
from kafka_direct.schema_registry.avro_read import plan_avro_read, require_fastavro, spark_type_of
from kafka_direct.schema_registry.avro_types import parse_schema, record_full_name
from kafka_direct.schema_registry.client import RegistryClient
from kafka_direct.schema_registry.errors import SchemaNotFoundError
from kafka_direct.schema_registry.json_schema import from_json_schema, to_json_schema
from kafka_direct.schema_registry.options import (
    parse_registry,
    parse_write_options,
    registry_options_of,
)
from kafka_direct.schema_registry.protobuf_read import plan_protobuf_read
from kafka_direct.schema_registry.references import avro_schema
from kafka_direct.schema_registry.wire import subject_name

if TYPE_CHECKING:
    from pyspark.sql import Column

__all__ = [
    "from_avro",
    "from_json_schema",
    "from_protobuf",
    "to_avro",
    "to_json_schema",
    "to_protobuf",
]


def _column(data: Column | str) -> Any:
    from pyspark.sql.functions import col

    return col(data) if isinstance(data, str) else data


def from_avro(
    data: Column | str,
    jsonFormatSchema: str | None = None,
    options: Mapping[str, str] | None = None,
    subject: str | None = None,
    schemaRegistryAddress: str | None = None,
) -> Column:
    """Decode an Avro binary column into a Spark value.

    With ``schemaRegistryAddress``, each record is in the Confluent wire format and is decoded
    with the writer schema its header names, resolved to the reader schema: ``jsonFormatSchema``
    if given, else the ``subject``'s latest schema (or ``options["schemaVersion"]``). The
    result's type is the reader schema's, fixed now. Without it, records are bare Avro written
    with ``jsonFormatSchema``.

    Options: ``mode`` (``FAILFAST``, the default, fails the query on a bad record;
    ``PERMISSIVE`` returns null for it), ``schemaVersion``, and the registry's connection
    options ``confluent.schema.registry.*`` (basic auth, bearer token, TLS, timeout).
    """
    plan = plan_avro_read(jsonFormatSchema, options, subject, schemaRegistryAddress)
    decoded: Column = _arrow_udf(plan.decoder.decode, plan.spark_type, "from_avro")(_column(data))
    return decoded


def to_avro(
    data: Column | str,
    jsonFormatSchema: str | None = None,
    subject: str | None = None,
    schemaRegistryAddress: str | None = None,
    options: Mapping[str, str] | None = None,
) -> Column:
    """Encode a column (usually ``struct(...)``) as Avro binary.

    With ``schemaRegistryAddress`` the output is in the Confluent wire format. The schema is
    ``jsonFormatSchema``, registered under the subject now (``autoRegisterSchemas``, default
    true; false only looks it up), or, without it, the subject's latest schema. The subject is
    ``subject``, or named by ``options["subjectNameStrategy"]`` (``topic``, the default:
    ``<topic>-value``; ``record``; ``topic-record``) from ``options["topic"]`` and
    ``options["isKey"]``. Without a registry, writes bare Avro with ``jsonFormatSchema``.

    A subject without any schema, and no ``jsonFormatSchema``: the schema is derived from the
    column's Spark type as spark-avro's ``to_avro`` derives it (record ``topLevelRecord``,
    nullable fields as ``[type, "null"]``) and registered under the subject.
    """
    require_fastavro("to_avro")
    opts = dict(options or {})
    write = parse_write_options(opts)
    schema_id = None
    derive_for = None
    if schemaRegistryAddress is not None:
        registry = parse_registry(schemaRegistryAddress, registry_options_of(opts))
        client = RegistryClient(registry)
        if jsonFormatSchema is not None:
            parsed = parse_schema(jsonFormatSchema)
            subject = subject or subject_name(
                write.subject_name_strategy,
                topic=write.topic,
                record_name=record_full_name(parsed),
                is_key=write.is_key,
            )
            canonical = json.dumps(parsed, separators=(",", ":"))
            schema_id = (
                client.register(subject, canonical)
                if write.auto_register
                else client.lookup(subject, canonical)
            )
        else:
            if subject is None and write.subject_name_strategy == "topic" and write.topic:
                subject = subject_name(
                    "topic", topic=write.topic, record_name=None, is_key=write.is_key
                )
            if subject is None:
                raise ConfigurationError(
                    "subject",
                    None,
                    "a subject whose latest schema to write with, or a jsonFormatSchema",
                    "Pass subject='<topic>-value', or the writer schema as jsonFormatSchema.",
                )
            try:
                found = client.subject_version(subject, "latest")
                jsonFormatSchema, schema_id = avro_schema(client, found), found.schema_id
            except SchemaNotFoundError as exc:
                if not write.auto_register:
                    raise ConfigurationError(
                        "subject",
                        subject,
                        "a subject with at least one registered schema, since "
                        "autoRegisterSchemas is false",
                        "Pass the writer schema as jsonFormatSchema, or register one.",
                    ) from exc
                # A new subject: the schema is derived from the data's type as spark-avro's
                # to_avro derives it, and registered by the first batch (a Column has no type
                # before it is part of a DataFrame).
                derive_for = (registry, subject)
    elif jsonFormatSchema is None:
        raise ConfigurationError(
            "jsonFormatSchema",
            None,
            "the Avro schema to write with, when no schemaRegistryAddress is given",
        )
    else:
        spark_type_of(jsonFormatSchema, "jsonFormatSchema")  # validates it now, on the driver

    from pyspark.sql.types import BinaryType

    from kafka_direct.schema_registry.avro_encoder import AvroEncoder

    encoder = AvroEncoder(jsonFormatSchema, schema_id, derive_for)
    encoded: Column = _arrow_udf(encoder.encode, BinaryType(), "to_avro")(_column(data))
    return encoded


def _arrow_udf(function: Any, return_type: Any, name: str) -> Any:
    import pyarrow as pa
    from pyspark.sql.functions import arrow_udf  # type: ignore[attr-defined]

    def run(values: pa.Array) -> pa.Array:
        return function(values)

    run.__name__ = name
    # PySpark reads the UDF's kind from evaluated type hints; postponed ones name a local 'pa'.
    run.__annotations__ = {"values": pa.Array, "return": pa.Array}
    return arrow_udf(run, return_type)


def _protobuf_registry(
    options: Mapping[str, str] | None, function: str
) -> tuple[str, str, dict[str, str]]:
    """The subject, the registry's address and the other options of a Protobuf function."""
    opts = dict(options or {})
    subject = opts.pop("schema.registry.subject", None)
    address = opts.pop("schema.registry.address", None)
    if not subject or not address:
        missing = "schema.registry.subject" if not subject else "schema.registry.address"
        raise ConfigurationError(
            missing,
            None,
            f"both 'schema.registry.subject' and 'schema.registry.address' in {function}'s "
            "options (a descriptor file without a registry is not supported yet)",
        )
    return subject, address, opts


def from_protobuf(
    data: Column | str,
    messageName: str | None = None,
    descFilePath: str | None = None,
    options: Mapping[str, str] | None = None,
) -> Column:
    """Decode Protobuf records in the Confluent wire format (Databricks' registry form:
    ``options={"schema.registry.subject": ..., "schema.registry.address": ...}``).

    The result type is the subject's latest schema's message ``messageName`` (default: its
    first message), mapped as spark-protobuf maps it; each record is decoded with the writer
    schema and message its header names. Options also: ``mode``, ``schemaVersion``, and the
    ``confluent.schema.registry.*`` connection options.
    """
    if descFilePath is not None:
        raise ConfigurationError(
            "descFilePath",
            descFilePath,
            "not to be set: only the Schema Registry form is supported",
        )
    subject, address, opts = _protobuf_registry(options, "from_protobuf")
    plan = plan_protobuf_read(subject, address, opts, messageName)
    decoded: Column = _arrow_udf(plan.decoder.decode, plan.spark_type, "from_protobuf")(
        _column(data)
    )
    return decoded


def to_protobuf(
    data: Column | str,
    messageName: str | None = None,
    descFilePath: str | None = None,
    options: Mapping[str, str] | None = None,
) -> Column:
    """Encode a struct column as Protobuf in the Confluent wire format, with the latest schema
    of ``options["schema.registry.subject"]`` (which must be registered) and its message
    ``messageName`` (default: the first)."""
    if descFilePath is not None:
        raise ConfigurationError(
            "descFilePath",
            descFilePath,
            "not to be set: only the Schema Registry form is supported",
        )
    subject, address, opts = _protobuf_registry(options, "to_protobuf")
    registry = parse_registry(address, registry_options_of(opts))
    parse_write_options(opts, "to_protobuf")
    from pyspark.sql.types import BinaryType

    from kafka_direct.schema_registry.protobuf_codec import ProtobufEncoder

    found = RegistryClient(registry).subject_version(subject, "latest")
    encoder = ProtobufEncoder(registry, found.schema_id, messageName)
    encoded: Column = _arrow_udf(encoder.encode, BinaryType(), "to_protobuf")(_column(data))
    return encoded
