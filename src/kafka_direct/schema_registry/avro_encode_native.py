"""The C Avro encoder's Python side: an Arrow array of Spark values → an Arrow binary array of
Avro records (bare, or after the Confluent header), through ``_avro_encode`` and no Python
object per record or field. Runs in the Spark Python worker, inside ``to_avro``'s Arrow UDF
(:class:`kafka_direct.schema_registry.avro_encoder.AvroEncoder` drives it).

One pass in C writes every record with the program compiled once per (writer schema, Arrow
type) (:mod:`.avro_encode_program`) into one data buffer and one offsets buffer, which become
the ``binary`` array with ``pyarrow.Array.from_buffers``. A batch the C code stops on (a null
the schema does not allow, an enum symbol not in the schema...) goes through fastavro instead,
which writes it or raises today's error.

It is used when the extension was compiled at install and the environment variable
``KAFKA_DIRECT_NATIVE_AVRO`` is not ``0`` (as for the decoder); :func:`status` says which.
"""

from __future__ import annotations

import sys
from typing import Any, NamedTuple

import pyarrow as pa

from kafka_direct.schema_registry.avro_encode_program import (
    EncodeProgram,
    Step,
    Unsupported,
    compile_encoder,
)
from kafka_direct.schema_registry.native_switch import native_on, native_status

__all__ = ["DISABLE_ENV", "REASONS", "Encoded", "available", "encode", "program", "status"]

DISABLE_ENV = "KAFKA_DIRECT_NATIVE_AVRO"

try:
    from kafka_direct.schema_registry import _avro_encode  # type: ignore[attr-defined]

    _IMPORT_ERROR: str | None = None
except ImportError as exc:  # built without a C compiler
    _avro_encode = None
    _IMPORT_ERROR = str(exc)

if sys.byteorder != "little":  # Avro's floats and Arrow's buffers are little-endian here
    _avro_encode = None
    _IMPORT_ERROR = "a big-endian machine"

# Why the C encoder handed a batch to fastavro (_native/_avro_encode.h's codes).
REASONS = {
    1: "a null where the schema has no null",
    2: "a date or timestamp outside years 1 to 9999",
    3: "a string that is not one of the enum's symbols",
    4: "binary of another length than the fixed type's size",
    5: "a decimal with more digits than its precision, or too wide for its fixed type",
    6: "a map with the same key twice",
    7: "Arrow buffers shorter than the array's length",
    8: "out of memory",
    9: "more than 2 GiB of Avro in one batch",
    10: "an unknown program operation",
    11: "a string that is not UTF-8",
}


def available() -> bool:
    return native_on(_avro_encode, DISABLE_ENV)


def status() -> str:
    """Whether to_avro encodes in C here, and if not, why."""
    return native_status(
        _avro_encode,
        _IMPORT_ERROR,
        DISABLE_ENV,
        "fastavro",
        "encoder",
    )


def program(schema: Any, arrow_type: pa.DataType) -> EncodeProgram | None:
    """The program for this writer schema (parsed JSON) and column type, or None when the C
    encoder is off or does not cover them (then fastavro writes every batch)."""
    if not available():
        return None
    try:
        return compile_encoder(schema, arrow_type)
    except Unsupported:
        return None


def _follow(array: pa.Array, path: tuple[Step, ...]) -> pa.Array:
    """The Arrow array a column's path names. A struct's fields come aligned with the struct
    (``field`` applies its offset); a list's and a map's children come whole, and the parent's
    offsets index them."""
    for step, index in path:
        if step == "field":
            array = array.field(index)
        elif step == "values":
            array = array.values
        else:  # a map's keys or items: the fields of its whole entries struct
            array = array.values.field(0 if step == "keys" else 1)
    return array


def _column(array: pa.Array) -> tuple[Any, Any, Any, int, int]:
    """(validity, buffer 1, buffer 2, offset, length) of one array's own buffers."""
    own = array.buffers()
    kind = array.type
    if pa.types.is_struct(kind) or pa.types.is_null(kind):
        first, second = None, None
    elif (
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
    ):
        first, second = own[1], own[2]
    else:  # fixed-width values, or a list's / map's offsets
        first, second = own[1], None
    validity = own[0] if array.null_count else None
    return validity, first, second, array.offset, len(array)


class Encoded(NamedTuple):
    #: the binary array, or None when the C code stopped (then: row and code say where, why)
    array: pa.Array | None
    row: int
    code: int


def encode(values: pa.Array, compiled: EncodeProgram, prefix: bytes) -> Encoded:
    """Encode one batch; a null row stays null, every other row is ``prefix`` + its Avro."""
    assert _avro_encode is not None
    columns = [_column(_follow(values, path)) for path in compiled.paths]
    data, offsets, row, code = _avro_encode.encode(
        compiled.nodes, compiled.kids, compiled.consts, columns, prefix, len(values)
    )
    if data is None:
        return Encoded(None, row, code)
    validity = values.is_valid().buffers()[1] if values.null_count else None
    array = pa.Array.from_buffers(
        pa.binary(),
        len(values),
        [validity, pa.py_buffer(offsets), pa.py_buffer(data)],
        null_count=values.null_count,
    )
    return Encoded(array, -1, 0)
