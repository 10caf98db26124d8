"""A record field's default (JSON, as the Avro specification gives it) as Avro binary, for the
C decoder's programs (:mod:`.avro_program` puts the bytes in a program's constants, and the C
decoder reads them as if the writer had written them). Pure: no pyspark, no fastavro; runs in
the Spark Python worker, once per writer schema.

A ``bytes`` or ``fixed`` default is a string whose code points 0-255 are the bytes, as the
specification and Java's Avro read it; a union's default is of its first branch.
"""

from __future__ import annotations

import json
import struct
from typing import Any

__all__ = ["Unsupported", "encode_default"]


class Unsupported(Exception):
    """The C decoder does not cover this schema (or pair of schemas); fastavro decodes it."""


def _kind(schema: Any) -> str:
    if isinstance(schema, list):
        return "union"
    return schema if isinstance(schema, str) else str(schema["type"])


def _zigzag(value: int) -> bytes:
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_default(schema: Any, value: Any) -> bytes:
    """A default value (JSON, as the Avro spec gives it) in Avro binary; :class:`Unsupported`
    when it does not fit the schema."""
    try:
        return _encode(schema, value)
    except (KeyError, TypeError, ValueError, IndexError, struct.error, OverflowError) as exc:
        raise Unsupported(f"default {json.dumps(value)[:80]}: {exc}") from exc


def _encode(schema: Any, value: Any) -> bytes:
    kind = _kind(schema)
    if kind == "union":  # a union's default is of its first branch
        return _zigzag(0) + _encode(schema[0], value)
    if kind == "null":
        if value is not None:
            raise ValueError("not null")
        return b""
    if kind == "boolean":
        if not isinstance(value, bool):
            raise TypeError("not a boolean")
        return b"\x01" if value else b"\x00"
    if kind in ("int", "long"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError("not an integer")
        limit = 2**31 if kind == "int" else 2**63
        if not -limit <= value < limit:
            raise ValueError("out of range")
        return _zigzag(value)
    if kind in ("float", "double"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError("not a number")
        return struct.pack("<f" if kind == "float" else "<d", value)
    if kind in ("bytes", "string"):
        data = bytes(value.encode("latin-1" if kind == "bytes" else "utf-8"))
        return _zigzag(len(data)) + data
    if kind == "fixed":
        data = bytes(value.encode("latin-1"))
        if len(data) != int(schema["size"]):
            raise ValueError("wrong size")
        return data
    if kind == "enum":
        return _zigzag(list(schema["symbols"]).index(value))
    if kind == "array":
        items = b"".join(_encode(schema["items"], v) for v in value)
        return (_zigzag(len(value)) + items if value else b"") + b"\x00"
    if kind == "map":
        entries = b"".join(
            _encode("string", k) + _encode(schema["values"], v) for k, v in value.items()
        )
        return (_zigzag(len(value)) + entries if value else b"") + b"\x00"
    if kind in ("record", "error"):
        out = b""
        for f in schema["fields"]:
            out += _encode(f["type"], value[f["name"]] if f["name"] in value else f["default"])
        return out
    raise ValueError(f"type {kind}")
