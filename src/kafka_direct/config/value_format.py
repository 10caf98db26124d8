"""The source's ``valueFormat`` options: decode the ``value`` column inside the read. Pure: plain
library, used wherever the source's options are parsed (the Spark driver's Python processes).

``valueFormat=avro`` is ``from_avro("value", jsonFormatSchema, options, subject,
schemaRegistryAddress)`` done by the source itself, with the same keywords as source options:
the records are decoded in the Python worker that read them, straight from the Arrow batch
the consumer filled, so the binary column never travels to the JVM and back to a second
Python worker. The ``value`` column's type becomes the reader schema's, and errors can name
the topic, partition and offset of a bad record (a column function cannot see them).

Options (names as ``from_avro``'s keywords and options, so a query moves between the two):

- ``valueFormat``: ``binary`` (the default: Spark's Kafka schema), ``avro`` or ``protobuf``
  (``from_protobuf`` done by the source; its reader message is ``messageName``, by default the
  subject's schema's first);
- ``schemaRegistryAddress``: the registry, for records in the Confluent wire format; without it
  the values are bare Avro written with ``jsonFormatSchema``;
- ``subject``: the subject whose latest schema (or ``schemaVersion``) is the reader schema;
  by default ``<topic>-value`` (Confluent's topic name strategy) when the read names one topic;
- ``jsonFormatSchema``: the reader schema, instead of the subject's;
- ``mode``: ``FAILFAST`` (default) or ``PERMISSIVE``; ``columnNameOfCorruptRecord``: in
  ``PERMISSIVE`` mode, the column that holds the bytes of each value that did not decode
  (default ``_corrupt_record``; null for the others);
- ``confluent.schema.registry.*``: the registry's connection options (credentials, TLS).

A ``user:password@`` in ``schemaRegistryAddress`` is moved into the registry options (as
``confluent.schema.registry.basic.auth.user.info``, unless that is set), which no ``repr``
shows: the source's options are logged and shown whole.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from kafka_direct.config.kafka import Subscription
from kafka_direct.config.reader import OptionReader
from kafka_direct.errors import ConfigurationError
from kafka_direct.schema_registry.options import move_credentials, shown_address

__all__ = ["VALUE_FORMAT_DEFAULTS", "ValueFormat", "parse_value_format"]

#: The options of the value decode, and their defaults (merged into the source's table).
VALUE_FORMAT_DEFAULTS: dict[str, str] = {
    "valueFormat": "binary",
    "schemaRegistryAddress": "",
    "subject": "",
    "jsonFormatSchema": "",
    "messageName": "",
    "schemaVersion": "",
    "mode": "FAILFAST",
    "columnNameOfCorruptRecord": "_corrupt_record",
}

Format = Literal["binary", "avro", "protobuf"]
_FORMATS: tuple[Format, ...] = ("binary", "avro", "protobuf")
_REGISTRY_PREFIX = "confluent.schema.registry."
#: Options that only mean something when the values are decoded (refused with 'binary').
_DECODE_OPTIONS = tuple(name for name in VALUE_FORMAT_DEFAULTS if name != "valueFormat")
#: The Kafka source's own columns, which the corrupt-record column must not shadow.
_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers")


@dataclass(frozen=True)
class ValueFormat:
    """How the source returns ``value``: as Kafka's bytes, or decoded."""

    format: Format
    #: the registry's URL, without user info (moved into ``options``)
    registry_address: str | None = None
    #: The reader schema's subject (None: jsonFormatSchema is the reader schema).
    subject: str | None = None
    json_format_schema: str | None = None
    #: Protobuf: the reader message (None: the schema's first)
    message_name: str | None = None
    #: from_avro's ``options``: mode, schemaVersion, confluent.schema.registry.*
    options: dict[str, str] = field(default_factory=dict, repr=False)
    #: PERMISSIVE mode: the column of undecodable values' bytes.
    corrupt_column: str | None = None
    #: whether ``subject`` is the default '<topic>-value' rather than the user's
    subject_by_default: bool = False

    @property
    def decodes(self) -> bool:
        return self.format != "binary"


def parse_value_format(opts: OptionReader, strategy: Subscription) -> ValueFormat:
    """The ``valueFormat`` options, checked; ``strategy`` names the topics the read has, for
    the default subject."""
    fmt = opts.choice("valueFormat", _FORMATS)
    registry_options = {
        key: value for key, value in opts.raw.items() if key.startswith(_REGISTRY_PREFIX)
    }
    if fmt == "binary":
        given = [name for name in _DECODE_OPTIONS if opts.get(name) is not None]
        given += sorted(registry_options)
        if given:
            value = opts.get(given[0])
            if given[0].startswith(_REGISTRY_PREFIX):
                value = "(set)"
            elif given[0] == "schemaRegistryAddress" and value is not None:
                value = shown_address(value)  # it may hold user:password@
            raise ConfigurationError(
                given[0],
                value,
                "to be set only with 'valueFormat' = 'avro' or 'protobuf'",
                "Set the option 'valueFormat' to decode the values in the source, or remove it.",
            )
        return ValueFormat("binary")
    address = opts.get("schemaRegistryAddress") or None
    reader_schema = opts.get("jsonFormatSchema") or None
    subject = opts.get("subject") or None
    message_name = opts.get("messageName") or None
    if fmt == "protobuf":
        if address is None:
            raise ConfigurationError(
                "schemaRegistryAddress",
                None,
                "the Schema Registry's address, since Protobuf records are read with their "
                "schemas from it",
                "Set 'schemaRegistryAddress' (and 'subject' unless it is '<topic>-value').",
            )
        if reader_schema is not None:
            raise ConfigurationError(
                "jsonFormatSchema",
                "(set)",
                "no Avro schema with 'valueFormat' = 'protobuf'",
                "The reader schema is the subject's: choose it with 'subject', "
                "'schemaVersion' and 'messageName'.",
            )
    elif message_name is not None:
        raise ConfigurationError(
            "messageName", message_name, "to be set only with 'valueFormat' = 'protobuf'"
        )
    if address is None:
        if reader_schema is None:
            raise ConfigurationError(
                "jsonFormatSchema",
                None,
                "the Avro schema of the values, when no 'schemaRegistryAddress' is given",
                "Set 'schemaRegistryAddress' (and 'subject') for records in the Confluent wire "
                "format, or 'jsonFormatSchema' for bare Avro.",
            )
        misplaced = [n for n in ("subject", "schemaVersion") if opts.get(n)]
        misplaced += sorted(registry_options)
        if misplaced:
            raise ConfigurationError(
                misplaced[0],
                "(set)",
                "'schemaRegistryAddress' to be given with the registry's options",
            )
    by_default = address is not None and reader_schema is None and subject is None
    if by_default:
        subject = _default_subject(strategy)
    mode = opts.choice("mode", ("failfast", "permissive"), "'FAILFAST' or 'PERMISSIVE'")
    corrupt = opts.text("columnNameOfCorruptRecord") if mode == "permissive" else None
    if corrupt is not None and (not corrupt or corrupt.lower() in (c.lower() for c in _COLUMNS)):
        raise ConfigurationError(
            "columnNameOfCorruptRecord",
            corrupt,
            f"a column name that is not one of the source's own columns ({', '.join(_COLUMNS)})",
        )
    if address is not None:
        address, registry_options = move_credentials(address, registry_options)
    decode_options = {"mode": mode.upper(), **registry_options}
    version = opts.get("schemaVersion")
    if version:
        decode_options["schemaVersion"] = version
    return ValueFormat(
        fmt,
        registry_address=address,
        subject=subject if reader_schema is None else None,
        json_format_schema=reader_schema,
        message_name=message_name,
        options=decode_options,
        corrupt_column=corrupt,
        subject_by_default=by_default,
    )


def _default_subject(strategy: Subscription) -> str:
    """``<topic>-value`` when the read names exactly one topic (Confluent's default)."""
    if strategy.kind == "subscribe":
        topics = sorted(set(strategy.topics))
    elif strategy.kind == "assign":
        topics = sorted({tp.topic for tp in strategy.partitions})
    else:
        topics = []
    if len(topics) == 1:
        return f"{topics[0]}-value"
    raise ConfigurationError(
        "subject",
        None,
        "the subject whose schema is the reader schema, since this read does not name exactly "
        "one topic (so '<topic>-value' cannot be assumed)",
        "Set the option 'subject' (for example 'orders-value'), or 'jsonFormatSchema'.",
    )
