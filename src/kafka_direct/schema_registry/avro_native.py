"""The C Avro decoder's Python side: a batch of Avro records (an Arrow binary column) → one Arrow
array of the reader's type, through ``_avro_arrow`` and no Python object per record or field.
Runs in the Spark Python worker, inside ``from_avro``'s Arrow UDF
(:class:`kafka_direct.schema_registry.avro_codec.AvroDecoder` drives it).

One pass in C decodes every record with the program of its writer schema (compiled once per
schema id, :mod:`.avro_program`) straight into the reader type's buffers, which become the
Arrow array with ``pyarrow.Array.from_buffers``: no copy of the batch, no regrouping. Records
whose writer schema the compiler does not cover come back as "fallback rows" for the fastavro
path; the caller decodes them and :func:`merge` puts them in their places.

It is used when the extension was compiled at install (a C compiler is needed) and the
environment variable ``KAFKA_DIRECT_NATIVE_AVRO`` is not ``0``; :func:`status` says which.
"""

from __future__ import annotations

import sys
from typing import Any, NamedTuple

import pyarrow as pa

from kafka_direct.schema_registry.avro_program import (
    K_BIN,
    K_LIST,
    K_STRUCT,
    Builders,
    Program,
    Unsupported,
    compile_program,
    normalize,
)
from kafka_direct.schema_registry.native_switch import native_on, native_status

__all__ = [
    "DISABLE_ENV",
    "Decoded",
    "NativeReader",
    "assemble",
    "available",
    "binary_buffers",
    "decode",
    "merge",
    "native_reader",
    "schema_ids",
    "status",
]

DISABLE_ENV = "KAFKA_DIRECT_NATIVE_AVRO"

try:
    from kafka_direct.schema_registry import _avro_arrow  # type: ignore[attr-defined]

    _IMPORT_ERROR: str | None = None
except ImportError as exc:  # built without a C compiler
    _avro_arrow = None
    _IMPORT_ERROR = str(exc)

if sys.byteorder != "little":  # Avro's floats and Arrow's buffers are little-endian here
    _avro_arrow = None
    _IMPORT_ERROR = "a big-endian machine"

# The C decoder's error codes (_native/_avro_arrow.h) and what they mean in a message.
TOO_LARGE = 11
NOT_FRAMED = 13
LEFT_OVER = 12
NO_SCHEMA = 17
ITEMS = 18
REASONS = {
    1: "the record ends before its last field",
    2: "a variable-length integer is longer than 10 bytes",
    3: "a negative length",
    4: "a string that is not valid UTF-8",
    5: "a union branch index outside the union",
    6: "an enum index outside the enum's symbols",
    7: "an enum symbol the reader schema does not have, and no enum default",
    8: "null for a field the reader schema does not allow to be null",
    9: "a decimal of no bytes, or with more digits than its precision",
    10: "an int outside 32 bits, or a timestamp outside 64-bit microseconds",
    TOO_LARGE: "the record alone decodes to more than 2 GiB in one Arrow array (32-bit offsets)",
    14: "an array or map block with more items than bytes left",
    NO_SCHEMA: "a schema id the Schema Registry could not give",
    ITEMS: "more array or map items in all than the record's size allows",
}
#: The largest offset in an Arrow array of the C decoder's: Arrow's binary, string, list and
#: map arrays have 32-bit offsets. Only tests lower it, to reach it without gigabytes.
OFFSET_LIMIT = 2**31 - 1


def available() -> bool:
    return native_on(_avro_arrow, DISABLE_ENV)


def status() -> str:
    """Whether from_avro decodes in C here, and if not, why."""
    return native_status(
        _avro_arrow,
        _IMPORT_ERROR,
        DISABLE_ENV,
        "fastavro",
        "decoder",
    )


def binary_buffers(values: pa.Array) -> tuple[Any, Any, int, Any]:
    """(data, offsets, offset width, validity) of a binary or large binary array."""
    if pa.types.is_large_binary(values.type):
        width = 8
    elif pa.types.is_binary(values.type):
        width = 4
    else:
        raise TypeError(f"expected a binary column, got Arrow type {values.type}")
    validity, offsets, data = values.buffers()
    return data, offsets, width, validity if values.null_count else None


def schema_ids(values: pa.Array) -> set[int]:
    """The distinct schema ids in the headers of a batch of framed records."""
    assert _avro_arrow is not None
    data, offsets, width, validity = binary_buffers(values)
    ids: set[int] = _avro_arrow.schema_ids(
        data, offsets, width, validity, values.offset, len(values)
    )
    return ids


class Decoded(NamedTuple):
    array: pa.Array
    #: (row, error code, schema id or -1, bytes left over) of each bad record, in row order
    errors: list[tuple[int, int, int, int]]
    #: rows left null for the fastavro path: their writer schema has no program
    fallback: list[int]


def decode(
    values: pa.Array,
    builders: Builders,
    programs: list[tuple[int, Program | None]],
    *,
    framed: bool,
    stop_at_error: bool,
) -> Decoded:
    """Decode a batch. ``programs``: (schema id, program) per writer schema (one, id -1, for
    bare Avro); a None program makes its records null (an unknown id in PERMISSIVE mode)."""
    assert _avro_arrow is not None
    data, offsets, width, validity = binary_buffers(values)
    parts, errors, fallback = _avro_arrow.decode(
        builders.spec,
        [(i, None if p is None else p.code, b"" if p is None else p.consts) for i, p in programs],
        data,
        offsets,
        width,
        validity,
        values.offset,
        len(values),
        framed,
        stop_at_error,
        OFFSET_LIMIT,
    )
    if errors and stop_at_error:
        return Decoded(pa.nulls(0, builders.types[0]), errors, fallback)
    array = assemble(builders, parts, 0)
    array.validate()
    return Decoded(array, errors, fallback)


def assemble(builders: Builders, parts: list[Any], index: int) -> pa.Array:
    """The Arrow array of builder ``index`` (and its children) from the C decoder's parts;
    shared with the Protobuf decoder, which fills the same builders."""
    length, null_count, validity, data, offsets = parts[index]
    kind, arrow_type = builders.kinds[index], builders.types[index]
    bitmap = None if validity is None else pa.py_buffer(validity)
    if kind == K_STRUCT:
        children = [assemble(builders, parts, c) for c in builders.children[index]]
        return pa.Array.from_buffers(
            arrow_type, length, [bitmap], null_count=null_count, children=children
        )
    if kind == K_LIST:
        child = assemble(builders, parts, builders.children[index][0])
        return pa.Array.from_buffers(
            arrow_type,
            length,
            [bitmap, pa.py_buffer(offsets)],
            null_count=null_count,
            children=[child],
        )
    if kind == K_BIN:
        buffers = [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)]
    else:
        buffers = [bitmap, pa.py_buffer(data)]
    return pa.Array.from_buffers(arrow_type, length, buffers, null_count=null_count)


def merge(decoded: pa.Array, rows: list[int], values: pa.Array) -> pa.Array:
    """``decoded`` with row ``rows[i]`` replaced by ``values[i]`` (same type)."""
    import pyarrow.compute as pc

    n = len(decoded)
    indices = list(range(n))
    for i, row in enumerate(rows):
        indices[row] = n + i
    combined = pa.concat_arrays([decoded, values.cast(decoded.type)])
    taken: pa.Array = pc.take(combined, pa.array(indices))
    return taken


class NativeReader:
    """The C decoder's state for one reader schema: its builders, and the program of each
    writer schema, compiled on first use (None: the compiler does not cover it)."""

    def __init__(self, reader_schema: Any, arrow_type: pa.DataType) -> None:
        self.reader = normalize(reader_schema)
        self.builders = Builders(arrow_type)
        self._programs: dict[Any, Program | None] = {}

    def program(self, key: Any, writer_schema: Any) -> Program | None:
        """The program for ``writer_schema`` (cached under ``key``), or None to fall back."""
        if key not in self._programs:
            try:
                writer = self.reader if writer_schema is None else normalize(writer_schema)
                self._programs[key] = compile_program(writer, self.reader, self.builders)
            # RecursionError: a schema nested deeper than the compiler's recursion goes (some
            # hundreds of levels), which fastavro still reads.
            except (Unsupported, RecursionError):
                self._programs[key] = None
        return self._programs[key]


def native_reader(reader_schema: Any, arrow_type: pa.DataType) -> NativeReader | None:
    """A :class:`NativeReader`, or None when the C decoder is off or the reader's type is one
    it does not build (then every record goes through fastavro)."""
    if not available():
        return None
    try:
        return NativeReader(reader_schema, arrow_type)
    except (Unsupported, RecursionError):  # RecursionError: as in NativeReader.program
        return None
