"""The plan of an Avro read: the reader schema, its Spark type, and the decoder that the Python
workers run. Runs in the Spark driver, for ``from_avro`` and for the source's
``valueFormat=avro`` (one planning path for both, so they decode alike); the registry is asked
here, once, for the reader schema.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafka_direct.errors import ConfigurationError
from kafka_direct.schema_registry.avro_types import parse_schema, to_spark_type
from kafka_direct.schema_registry.client import RegistryClient
from kafka_direct.schema_registry.options import (
    parse_read_options,
    parse_registry,
    registry_options_of,
)
from kafka_direct.schema_registry.read_plan import ReadPlan
from kafka_direct.schema_registry.references import avro_schema

__all__ = ["plan_avro_read", "require_fastavro", "spark_type_of"]


def require_fastavro(function: str) -> None:
    try:
        import fastavro  # noqa: F401
    except ImportError:
        raise ConfigurationError(
            function,
            None,
            "the 'fastavro' package, which decodes and encodes Avro",
            "Install it with: pip install 'kafka-direct[schema-registry]'.",
        ) from None


def spark_type_of(schema_text: str, option: str) -> tuple[Any, Any]:
    """The Spark type and its Arrow form for an Avro schema (Spark's ``SchemaConverters``)."""
    from pyspark.sql.pandas.types import to_arrow_type
    from pyspark.sql.types import _parse_datatype_json_value

    spark_json, _ = to_spark_type(parse_schema(schema_text, option))
    spark_type = _parse_datatype_json_value(spark_json)
    return spark_type, to_arrow_type(spark_type, timezone="UTC")


def plan_avro_read(
    jsonFormatSchema: str | None,
    options: Mapping[str, str] | None,
    subject: str | None,
    schemaRegistryAddress: str | None,
    function: str = "from_avro",
) -> ReadPlan:
    """Check the options, fetch the reader schema if it comes from the registry, and build the
    decoder (pickled to the workers). Arguments are ``from_avro``'s."""
    require_fastavro(function)
    opts = dict(options or {})
    read = parse_read_options(opts, function)
    described = "jsonFormatSchema"
    registry = None
    reader_id = None
    if schemaRegistryAddress is not None:
        registry = parse_registry(schemaRegistryAddress, registry_options_of(opts))
        if jsonFormatSchema is None:
            if not subject:
                raise ConfigurationError(
                    "subject",
                    subject,
                    "the subject whose schema is the reader schema",
                    "Pass subject='<topic>-value', or the reader schema as jsonFormatSchema.",
                )
            found = RegistryClient(registry).subject_version(
                subject, read.schema_version or "latest"
            )
            if found.schema_type.upper() != "AVRO":
                raise ConfigurationError(
                    "subject", subject, f"a subject of Avro schemas, not {found.schema_type}"
                )
            # its references to other subjects' named types inlined: one self-contained schema
            jsonFormatSchema = avro_schema(RegistryClient(registry), found)
            reader_id = found.schema_id
            described = f"subject '{subject}' version {found.version} (schema id {found.schema_id})"
    elif jsonFormatSchema is None:
        raise ConfigurationError(
            "jsonFormatSchema",
            None,
            "the Avro schema of the records, when no schemaRegistryAddress is given",
            "Pass jsonFormatSchema, or schemaRegistryAddress and subject.",
        )
    elif opts:
        registry_part = registry_options_of(opts)
        if registry_part:
            raise ConfigurationError(
                next(iter(registry_part)),
                "(set)",
                "schemaRegistryAddress to be given with the registry's connection options",
            )
    spark_type, arrow_type = spark_type_of(jsonFormatSchema, "jsonFormatSchema")

    from kafka_direct.schema_registry.avro_codec import AvroDecoder

    decoder = AvroDecoder(
        jsonFormatSchema, arrow_type, registry=registry, mode=read.mode, reader_id=reader_id
    )
    return ReadPlan(spark_type, arrow_type, decoder, described)
