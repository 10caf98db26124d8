"""The plan of a Protobuf read: the reader message, its Spark type, and the decoder the Python
workers run. Runs in the Spark driver, for ``from_protobuf`` and for the source's
``valueFormat=protobuf`` (one planning path for both, so they decode alike); the registry is
asked here, once, for the reader schema.
"""

from __future__ import annotations

from collections.abc import Mapping

from kafka_direct.errors import ConfigurationError
from kafka_direct.schema_registry.client import RegistryClient
from kafka_direct.schema_registry.options import (
    parse_read_options,
    parse_registry,
    registry_options_of,
)
from kafka_direct.schema_registry.read_plan import ReadPlan

__all__ = ["plan_protobuf_read"]


def plan_protobuf_read(
    subject: str,
    address: str,
    options: Mapping[str, str],
    messageName: str | None,
    function: str = "from_protobuf",
    subject_option: str = "schema.registry.subject",
) -> ReadPlan:
    """Check the options, fetch the subject's schema (``options["schemaVersion"]`` or the
    latest) and build the decoder for its message ``messageName`` (default: the first).
    ``subject_option`` names the subject's option in messages."""
    from pyspark.sql.pandas.types import to_arrow_type
    from pyspark.sql.types import _parse_datatype_json_value

    from kafka_direct.schema_registry.protobuf_codec import (
        ProtobufDecoder,
        message_descriptor,
        registered_file,
    )
    from kafka_direct.schema_registry.protobuf_codec import to_spark_type as protobuf_type

    opts = dict(options)
    read = parse_read_options(opts, function)
    registry = parse_registry(address, registry_options_of(opts))
    found = RegistryClient(registry).subject_version(subject, read.schema_version or "latest")
    if found.schema_type.upper() != "PROTOBUF":
        raise ConfigurationError(
            subject_option, subject, f"a subject of Protobuf schemas, not {found.schema_type}"
        )
    message = message_descriptor(registered_file(registry, found), name=messageName)
    spark_type = _parse_datatype_json_value(protobuf_type(message))
    arrow_type = to_arrow_type(spark_type, timezone="UTC")
    decoder = ProtobufDecoder(
        arrow_type,
        registry,
        read.mode,
        reader_id=found.schema_id,
        reader_message=message.full_name,
    )
    described = (
        f"message {message.full_name} of subject '{subject}' version {found.version} "
        f"(schema id {found.schema_id})"
    )
    return ReadPlan(spark_type, arrow_type, decoder, described)
