"""``from_json_schema`` / ``to_json_schema``: JSON Schema records in the Confluent wire format.
Runs in the Spark driver (planning); the columns it returns are Spark's own expressions, so no
Python runs per record.

A JSON record carries its field names, so it needs no writer schema to be read: the payload
after the 5-byte header goes to Spark's ``from_json`` with the reader schema's type, and a field
that a record lacks is null. The header is checked by a Spark expression: in ``FAILFAST`` mode
a record without the magic byte fails the query with ``raise_error``, in ``PERMISSIVE`` it is
null. Writing is ``header || to_json(data)``, the id being the one the subject's schema is
registered under.

The exported functions are in :mod:`kafka_direct.functions`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kafka_direct.errors import ConfigurationError
from kafka_direct.schema_registry.client import RegistryClient
from kafka_direct.schema_registry.errors import SchemaNotFoundError
from kafka_direct.schema_registry.json_types import to_spark_type
from kafka_direct.schema_registry.options import (
    parse_read_options,
    parse_registry,
    parse_write_options,
    registry_options_of,
)
from kafka_direct.schema_registry.references import json_schema
from kafka_direct.schema_registry.wire import HEADER_SIZE, header, subject_name

__all__ = ["from_json_schema", "to_json_schema"]

SUBJECT = "schema.registry.subject"
ADDRESS = "schema.registry.address"
_MAX_LENGTH = 2_147_483_647


def _split(options: Mapping[str, str] | None) -> tuple[str | None, str | None, dict[str, str]]:
    opts = dict(options or {})
    return opts.pop(SUBJECT, None), opts.pop(ADDRESS, None), opts


def _parse(text: str) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(
            "jsonFormatSchema", str(text)[:200], f"a JSON Schema in JSON ({exc})"
        ) from exc


def _column(data: Any) -> Any:
    from pyspark.sql.functions import col

    return col(data) if isinstance(data, str) else data


def from_json_schema(
    data: Any, jsonFormatSchema: str | None = None, options: Mapping[str, str] | None = None
) -> Any:
    """Decode a column of JSON Schema records in the Confluent wire format.

    ``options``: ``schema.registry.address`` and ``schema.registry.subject`` (the reader schema
    is the subject's latest, or ``schemaVersion``), or ``jsonFormatSchema``; ``mode``; the
    ``confluent.schema.registry.*`` connection options. Without an address, the column is
    plain JSON text read with ``jsonFormatSchema``.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import _parse_datatype_json_value

    subject, address, opts = _split(options)
    read = parse_read_options(opts, "from_json_schema")
    if address is not None:
        registry = parse_registry(address, registry_options_of(opts))
        if jsonFormatSchema is None:
            if not subject:
                raise ConfigurationError(
                    SUBJECT,
                    subject,
                    "the subject whose schema is the reader schema",
                    f"Pass options={{'{SUBJECT}': '<topic>-value', ...}} or jsonFormatSchema.",
                )
            found = RegistryClient(registry).subject_version(
                subject, read.schema_version or "latest"
            )
            if found.schema_type.upper() != "JSON":
                raise ConfigurationError(
                    SUBJECT, subject, f"a subject of JSON schemas, not {found.schema_type}"
                )
            jsonFormatSchema = json_schema(RegistryClient(registry), found)  # references
    elif jsonFormatSchema is None:
        raise ConfigurationError(
            "jsonFormatSchema",
            None,
            f"the JSON Schema of the records, when no '{ADDRESS}' option is given",
        )
    spark_json = to_spark_type(_parse(jsonFormatSchema))[0]
    if not isinstance(spark_json, dict):
        raise ConfigurationError(
            "jsonFormatSchema",
            str(jsonFormatSchema)[:200],
            "a JSON Schema of an object, an array or a map at the top level, which Spark's "
            f"from_json can read into a column (this one maps to {spark_json})",
        )
    spark_type: Any = _parse_datatype_json_value(spark_json)
    column = _column(data)
    parse_options = {"mode": read.mode}
    if address is None:
        return F.from_json(column.cast("string"), spark_type, parse_options)
    payload = F.substring(column, HEADER_SIZE + 1, _MAX_LENGTH).cast("string")
    decoded = F.from_json(payload, spark_type, parse_options)
    framed = (F.length(column) >= HEADER_SIZE) & (F.substring(column, 1, 1) == F.unhex(F.lit("00")))
    if read.mode == "PERMISSIVE":
        return F.when(framed, decoded)
    problem = F.concat(
        F.lit(
            "A record is not in the Confluent wire format: records written with a Schema "
            "Registry start with the magic byte 0x00 and a 4-byte schema id, this one is "
        ),
        F.length(column).cast("string"),
        F.lit(" byte(s) long and starts with 0x"),
        F.lower(F.hex(F.substring(column, 1, 8))),
        F.lit(". Use mode 'PERMISSIVE' to get null for such records."),
    )
    return (
        F.when(column.isNull(), F.lit(None).cast(spark_type))
        .when(framed, decoded)
        .otherwise(F.raise_error(problem))
    )


def to_json_schema(
    data: Any, jsonFormatSchema: str | None = None, options: Mapping[str, str] | None = None
) -> Any:
    """Encode a column as JSON Schema records in the Confluent wire format.

    The schema (``jsonFormatSchema``) is registered under ``schema.registry.subject`` (or the
    subject that ``subjectNameStrategy`` / ``topic`` name) now; without it, the subject's
    latest schema's id is used. Without ``schema.registry.address``, plain JSON text is
    written.
    """
    from pyspark.sql import functions as F

    subject, address, opts = _split(options)
    write = parse_write_options(opts, "to_json_schema")
    if address is None:
        return F.to_json(_column(data)).cast("binary")
    client = RegistryClient(parse_registry(address, registry_options_of(opts)))
    if jsonFormatSchema is not None:
        parsed = _parse(jsonFormatSchema)
        title = parsed.get("title") if isinstance(parsed, dict) else None
        subject = subject or subject_name(
            write.subject_name_strategy, topic=write.topic, record_name=title, is_key=write.is_key
        )
        canonical = json.dumps(parsed, separators=(",", ":"))
        schema_id = (
            client.register(subject, canonical, "JSON")
            if write.auto_register
            else client.lookup(subject, canonical, "JSON")
        )
    else:
        if subject is None and write.topic:
            subject = subject_name(
                "topic", topic=write.topic, record_name=None, is_key=write.is_key
            )
        if subject is None:
            raise ConfigurationError(
                SUBJECT, None, "a subject whose latest schema to write with, or jsonFormatSchema"
            )
        try:
            schema_id = client.subject_version(subject, "latest").schema_id
        except SchemaNotFoundError as exc:
            raise ConfigurationError(
                SUBJECT,
                subject,
                "a subject with at least one registered schema",
                "Pass the writer schema as jsonFormatSchema to register it.",
            ) from exc
    column = _column(data)
    encoded = F.concat(F.lit(bytearray(header(schema_id))), F.to_json(column).cast("binary"))
    return F.when(column.isNotNull(), encoded)
