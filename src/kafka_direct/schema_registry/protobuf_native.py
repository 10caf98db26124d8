"""The C Protobuf decoder's Python side: a batch of Protobuf records in the Confluent wire
format (an Arrow binary column) → one Arrow array of the reader message's Spark type, through
``_protobuf_arrow`` and no Python object per record or field. Runs in the Spark Python worker,
inside ``from_protobuf``'s Arrow UDF
(:class:`kafka_direct.schema_registry.protobuf_codec.ProtobufDecoder` drives it).

The C pass decodes the records whose header names the reader's message (the caller says which
schema ids and message indexes those are) with the reader's program (:mod:`.protobuf_program`)
straight into Arrow buffers, which become the array with ``pyarrow.Array.from_buffers`` (the
Avro decoder's builders and assembly). Every other record, and every record the program leaves
to Python (see ``_native/_protobuf_decode.c``), comes back as a "fallback row" for the Python
path, which decodes it or raises its error; :func:`kafka_direct.schema_registry.avro_native.merge`
puts them in their places.

It is used when the extension was compiled at install and the environment variable
``KAFKA_DIRECT_NATIVE_PROTOBUF`` is not ``0``; :func:`status` says which.
"""

from __future__ import annotations

import sys

import pyarrow as pa

from kafka_direct.schema_registry.avro_native import assemble, binary_buffers
from kafka_direct.schema_registry.native_switch import native_on, native_status
from kafka_direct.schema_registry.protobuf_program import Program

__all__ = ["DISABLE_ENV", "available", "decode", "headers", "status"]

DISABLE_ENV = "KAFKA_DIRECT_NATIVE_PROTOBUF"

try:
    from kafka_direct.schema_registry import _protobuf_arrow  # type: ignore[attr-defined]

    _IMPORT_ERROR: str | None = None
except ImportError as exc:  # built without a C compiler
    _protobuf_arrow = None
    _IMPORT_ERROR = str(exc)

if sys.byteorder != "little":  # Protobuf's fixed-width values and Arrow's are little-endian
    _protobuf_arrow = None
    _IMPORT_ERROR = "a big-endian machine"


def available() -> bool:
    return native_on(_protobuf_arrow, DISABLE_ENV)


def status() -> str:
    """Whether from_protobuf decodes in C here, and if not, why."""
    return native_status(
        _protobuf_arrow,
        _IMPORT_ERROR,
        DISABLE_ENV,
        "Python",
        "decoder",
    )


def headers(values: pa.Array) -> set[tuple[int, bytes]]:
    """The distinct (schema id, message index bytes) of the framed records in a batch."""
    assert _protobuf_arrow is not None
    data, offsets, width, validity = binary_buffers(values)
    found: set[tuple[int, bytes]] = _protobuf_arrow.headers(
        data, offsets, width, validity, values.offset, len(values)
    )
    return found


def decode(
    values: pa.Array, program: Program, accepted: list[tuple[int, bytes]]
) -> tuple[pa.Array, list[int]]:
    """The batch decoded in C, and the rows left null for the Python path."""
    assert _protobuf_arrow is not None
    data, offsets, width, validity = binary_buffers(values)
    parts, fallback = _protobuf_arrow.decode(
        program.builders.spec,
        program.code,
        program.names,
        program.slots,
        accepted,
        data,
        offsets,
        width,
        validity,
        values.offset,
        len(values),
    )
    array = assemble(program.builders, parts, 0)
    array.validate()
    return array, fallback
