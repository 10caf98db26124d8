"""The Confluent wire format's 5-byte header and the subject name strategies. Pure: imported by
the driver and the Python workers, no I/O.

A record is ``0x00`` (the magic byte), the schema id as a big-endian unsigned 32-bit integer,
then the payload (Avro binary, without Avro's own container header).
"""

from __future__ import annotations

import struct
from typing import Literal

from kafka_direct.errors import ConfigurationError
from kafka_direct.schema_registry.errors import WireFormatError

__all__ = [
    "HEADER_SIZE",
    "MAGIC_BYTE",
    "SubjectNameStrategy",
    "header",
    "preview",
    "split_header",
    "subject_name",
]

MAGIC_BYTE = 0
HEADER_SIZE = 5
_HEADER = struct.Struct(">bI")
_PREVIEW_BYTES = 8

SubjectNameStrategy = Literal["topic", "record", "topic-record"]
_STRATEGIES: tuple[str, ...] = ("topic", "record", "topic-record")


def header(schema_id: int) -> bytes:
    """The 5 bytes that precede a payload written with schema ``schema_id``."""
    return _HEADER.pack(MAGIC_BYTE, schema_id)


def preview(data: bytes) -> str:
    """The first bytes in hex, for error messages (never the whole record)."""
    shown = data[:_PREVIEW_BYTES].hex(" ")
    return shown + (" ..." if len(data) > _PREVIEW_BYTES else "")


def split_header(data: bytes, where: str = "") -> tuple[int, memoryview]:
    """``(schema id, payload)`` of one record; :class:`WireFormatError` if it has no header."""
    if len(data) < HEADER_SIZE or data[0] != MAGIC_BYTE:
        problem = (
            f"is {len(data)} byte(s) long"
            if len(data) < HEADER_SIZE
            else f"starts with byte 0x{data[0]:02x}"
        )
        raise WireFormatError(
            f"A record{where} is not in the Confluent wire format: it {problem}, but records "
            f"written with a Schema Registry start with the magic byte 0x00 and a 4-byte "
            f"schema id (first bytes: {preview(data) or 'none'}). Was this topic written "
            "without a registry serializer? Use mode 'PERMISSIVE' to get null for such records."
        )
    schema_id = int.from_bytes(data[1:HEADER_SIZE], "big")
    return schema_id, memoryview(data)[HEADER_SIZE:]


def subject_name(
    strategy: str, *, topic: str | None, record_name: str | None, is_key: bool = False
) -> str:
    """The subject a schema is registered under, as Confluent's serializers name it.

    ``topic``: ``<topic>-value`` (or ``-key``); ``record``: the record's full name;
    ``topic-record``: ``<topic>-<record full name>``.
    """
    if strategy not in _STRATEGIES:
        raise ConfigurationError(
            "subjectNameStrategy", strategy, f"one of {', '.join(_STRATEGIES)}"
        )
    if strategy in ("topic", "topic-record") and not topic:
        raise ConfigurationError(
            "topic",
            topic,
            f"a topic name, because subjectNameStrategy '{strategy}' names the subject after it",
            "Pass options={'topic': ...}, or pass subject= directly.",
        )
    if strategy in ("record", "topic-record") and not record_name:
        raise ConfigurationError(
            "jsonFormatSchema",
            None,
            f"an Avro record schema, because subjectNameStrategy '{strategy}' names the "
            "subject after the record's full name",
        )
    if strategy == "topic":
        return f"{topic}-{'key' if is_key else 'value'}"
    if strategy == "record":
        return str(record_name)
    return f"{topic}-{record_name}"
