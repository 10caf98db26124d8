"""(Avro writer schema, Arrow type of the Spark column) → the program the C Avro encoder
(``_avro_encode``) walks. Pure (no pyspark, no confluent_kafka); runs in the Spark Python
worker, once per ``to_avro`` column and Arrow type.

The program is a tree of nodes, one per schema position, stored flat as int64s. Each node reads
one Arrow array of the batch (a "column"): the C code walks the Arrow buffers (validity bitmaps,
offsets, children) of that array and writes Avro, with no Python object per record or field.
``paths`` says how to reach each column from the batch's array, per batch, in a few steps.

What it compiles must give exactly fastavro's bytes (the ``to_avro`` path it replaces), so
everything where fastavro's choice depends on the Python value (a union branch another branch
could also take, a column type that is not spark-avro's for the schema) raises
:class:`Unsupported`, and the whole batch goes through fastavro.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from fastavro.schema import SchemaParseException, expand_schema

__all__ = ["EncodeProgram", "Unsupported", "compile_encoder"]

# Node operations; the numbers are _avro_encode.c's (keep in step).
OP_NULL, OP_BOOL, OP_INT, OP_FLOAT, OP_DOUBLE, OP_BYTES, OP_FIXED, OP_ENUM = range(8)
OP_DEC_BYTES, OP_DEC_FIXED, OP_DATE, OP_TIMESTAMP, OP_RECORD, OP_ARRAY, OP_MAP = range(8, 15)
OP_UNION = 15
# Union modes: one non-null branch; [int, long]; spark-avro's struct<member0, ...>.
U_ONE, U_INT_LONG, U_MEMBERS = range(3)
NODE_WIDTH = 8  # op, column, a, b, c, d, first kid, kid count

#: What datetime holds (fastavro's path goes through datetime): 0001-01-01 .. 9999-12-31.
_DAYS = (-719_162, 2_932_896)
_MICROS = (-62_135_596_800_000_000, 253_402_300_799_999_999)
_DAY_MICROS = 86_400_000_000

Step = tuple[str, int]  # ("field", i), ("values", 0), ("keys", 0), ("items", 0)


class Unsupported(Exception):
    """The C encoder does not cover this schema and Arrow type: use fastavro."""


@dataclass(frozen=True)
class EncodeProgram:
    nodes: bytes  # NODE_WIDTH int64s per node; node 0 is the root
    kids: bytes  # int64s: child nodes of records and arrays; (branch, node) of unions
    consts: bytes  # enum symbols: a uint32 length and the UTF-8 bytes, each
    paths: list[tuple[Step, ...]]  # per column, from the batch's array


def _name(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    if isinstance(schema, list):
        return "union"
    kind = schema.get("type")
    return kind if isinstance(kind, str) else _name(kind)


def _logical(schema: Any) -> str | None:
    return schema.get("logicalType") if isinstance(schema, dict) else None


def _integer_width(arrow_type: pa.DataType, widest: int) -> int:
    if pa.types.is_signed_integer(arrow_type) and arrow_type.bit_width <= widest:
        return int(arrow_type.bit_width // 8)
    raise Unsupported(f"{arrow_type} for an Avro {'int' if widest == 32 else 'long'}")


def _offset_width(arrow_type: pa.DataType, kind: str) -> int:
    small = {"string": pa.types.is_string, "binary": pa.types.is_binary}[kind]
    large = {"string": pa.types.is_large_string, "binary": pa.types.is_large_binary}[kind]
    if small(arrow_type):
        return 4
    if large(arrow_type):
        return 8
    raise Unsupported(f"{arrow_type} where {kind} is expected")


def _ambiguous(branches: list[Any], at: int) -> bool:
    """Whether fastavro could write the value of branch ``at`` (its Python value, not in tuple
    notation) with an earlier branch: it takes the first branch whose validation passes."""
    name, logical = _name(branches[at]), _logical(branches[at])
    earlier = [(_name(b), _logical(b)) for b in branches[:at] if _name(b) != "null"]
    names = {n for n, _ in earlier}
    if name in ("float", "double"):  # fastavro prefers a later double to a float
        return sum(_name(b) in ("float", "double") for b in branches) > 1
    if name in ("int", "long") and logical in (None, "time-millis", "time-micros"):
        return bool(names & {"int", "long", "float", "double"})
    if name == "string":  # an ISO date string passes a date branch; a symbol, an enum
        return "enum" in names or ("int", "date") in earlier
    if name == "bytes" and logical is None:  # bytes is a Sequence: an array may take it
        return bool(names & {"fixed", "array"})
    if name == "bytes":  # decimal on bytes: a decimal fixed takes a Decimal too
        return "fixed" in names
    if name == "long":  # a timestamp: datetime is a date, so a date branch takes it
        return ("int", "date") in earlier
    if name == "map":  # a dict may pass a record's validation
        return "record" in names or "error" in names
    return False  # boolean, date, array: no other branch takes their values


class _Compiler:
    def __init__(self) -> None:
        self.nodes: list[list[int]] = []
        self.kids: list[int] = []
        self.consts = bytearray()
        self.paths: list[tuple[Step, ...]] = []
        self.columns: dict[tuple[Step, ...], int] = {}

    def column(self, path: tuple[Step, ...]) -> int:
        if path not in self.columns:
            self.columns[path] = len(self.paths)
            self.paths.append(path)
        return self.columns[path]

    def add(self, op: int, path: tuple[Step, ...], *args: int) -> int:
        self.nodes.append([op, self.column(path), *args, *[0] * (NODE_WIDTH - 2 - len(args))])
        return len(self.nodes) - 1

    def kids_of(self, node: int, kids: list[int], count: int) -> None:
        self.nodes[node][6], self.nodes[node][7] = len(self.kids), count
        self.kids.extend(kids)

    def node(self, schema: Any, arrow: pa.DataType, path: tuple[Step, ...]) -> int:
        if isinstance(schema, list):
            return self.union(schema, arrow, path)
        if isinstance(schema, dict) and isinstance(schema.get("type"), (dict, list)):
            return self.node(schema["type"], arrow, path)
        name, logical = _name(schema), _logical(schema)
        if name == "null" and pa.types.is_null(arrow):
            return self.add(OP_NULL, path)
        if name == "boolean" and pa.types.is_boolean(arrow):
            return self.add(OP_BOOL, path)
        if name == "int" and logical == "date":
            if not pa.types.is_date32(arrow):
                raise Unsupported(f"{arrow} for a date")
            return self.add(OP_DATE, path, *_DAYS)
        if name == "long" and logical in (
            "timestamp-millis",
            "timestamp-micros",
            "local-timestamp-millis",
            "local-timestamp-micros",
        ):
            return self.timestamp(str(logical), arrow, path)
        if name in ("int", "long") and logical in (None, "time-millis", "time-micros"):
            if logical is not None:
                raise Unsupported("time-millis / time-micros")  # no Spark type; fastavro's
            return self.add(OP_INT, path, _integer_width(arrow, 32 if name == "int" else 64))
        if name == "float" and pa.types.is_float32(arrow):
            return self.add(OP_FLOAT, path)
        if name == "double" and pa.types.is_float64(arrow):
            return self.add(OP_DOUBLE, path)
        if name in ("bytes", "fixed") and logical == "decimal":
            return self.decimal(schema, arrow, path)
        if name == "string" and logical in (None, "uuid"):
            return self.add(OP_BYTES, path, _offset_width(arrow, "string"), 1)  # 1: check UTF-8
        if name == "bytes" and logical is None:
            return self.add(OP_BYTES, path, _offset_width(arrow, "binary"))
        if name == "fixed":
            return self.add(OP_FIXED, path, _offset_width(arrow, "binary"), int(schema["size"]))
        if name == "enum":
            start = len(self.consts)
            for symbol in schema["symbols"]:
                encoded = str(symbol).encode()
                self.consts += struct.pack("<I", len(encoded)) + encoded
            width = _offset_width(arrow, "string")
            return self.add(OP_ENUM, path, width, start, len(schema["symbols"]))
        if name in ("record", "error") and pa.types.is_struct(arrow):
            return self.record(schema, arrow, path)
        if name == "array" and (pa.types.is_list(arrow) or pa.types.is_large_list(arrow)):
            width = 4 if pa.types.is_list(arrow) else 8
            node = self.add(OP_ARRAY, path, width)
            item = self.node(schema["items"], arrow.value_type, (*path, ("values", 0)))
            self.kids_of(node, [item], 1)
            return node
        if name == "map" and pa.types.is_map(arrow):
            if not pa.types.is_string(arrow.key_type):
                raise Unsupported(f"map keys of type {arrow.key_type}")
            keys = self.column((*path, ("keys", 0)))
            node = self.add(OP_MAP, path, 4, keys)
            value = self.node(schema["values"], arrow.item_type, (*path, ("items", 0)))
            self.kids_of(node, [value], 1)
            return node
        raise Unsupported(f"Avro {name} ({logical}) from Arrow {arrow}")

    def timestamp(self, logical: str, arrow: pa.DataType, path: tuple[Step, ...]) -> int:
        local = logical.startswith("local-")
        if not pa.types.is_timestamp(arrow) or arrow.unit != "us":
            raise Unsupported(f"{arrow} for {logical}")
        if local != (arrow.tz is None):
            # fastavro's value would depend on the machine's or the column's time zone
            raise Unsupported(f"{arrow} for {logical}")
        low, high = _MICROS
        if arrow.tz not in (None, "UTC", "utc", "+00:00", "Etc/UTC"):
            # the Python value is in the column's zone: keep a day from datetime's ends
            low, high = low + _DAY_MICROS, high - _DAY_MICROS
        divisor = 1000 if logical.endswith("millis") else 1
        return self.add(OP_TIMESTAMP, path, divisor, low, high)

    def decimal(self, schema: dict[str, Any], arrow: pa.DataType, path: tuple[Step, ...]) -> int:
        if not pa.types.is_decimal128(arrow) or arrow.scale != int(schema.get("scale", 0)):
            raise Unsupported(f"{arrow} for {schema}")
        if arrow.scale < 0:
            raise Unsupported("a negative scale")
        precision = int(schema["precision"])
        if _name(schema) == "bytes":
            return self.add(OP_DEC_BYTES, path, precision)
        return self.add(OP_DEC_FIXED, path, precision, int(schema["size"]))

    def record(self, schema: dict[str, Any], arrow: pa.StructType, path: tuple[Step, ...]) -> int:
        names = [arrow.field(i).name for i in range(arrow.num_fields)]
        if len(set(names)) != len(names):
            raise Unsupported("a struct with two fields of one name")
        node = self.add(OP_RECORD, path)
        kids = []
        for field in schema["fields"]:
            if field["name"] not in names:  # fastavro would write the field's default
                raise Unsupported(f"no column for field {field['name']}")
            at = names.index(field["name"])
            kids.append(self.node(field["type"], arrow.field(at).type, (*path, ("field", at))))
        self.kids_of(node, kids, len(kids))
        return node

    def union(self, branches: list[Any], arrow: pa.DataType, path: tuple[Step, ...]) -> int:
        null = next((i for i, b in enumerate(branches) if _name(b) == "null"), -1)
        rest = [(i, b) for i, b in enumerate(branches) if _name(b) != "null"]
        if not rest:
            raise Unsupported("a union of null only")
        plain = [b if isinstance(b, str) else b.get("type") for _, b in rest]
        if len(rest) == 1:
            index, branch = rest[0]
            node = self.add(OP_UNION, path, U_ONE, null, index)
            self.kids_of(node, [self.node(branch, arrow, path)], 1)
            return node
        if sorted(map(str, plain)) == ["int", "long"] and pa.types.is_integer(arrow):
            int_at = next(i for i, b in rest if _name(b) == "int")
            long_at = next(i for i, b in rest if _name(b) == "long")
            node = self.add(OP_UNION, path, U_INT_LONG, null, int_at, long_at)
            self.kids_of(node, [self.add(OP_INT, path, _integer_width(arrow, 64))], 1)
            return node
        if sorted(map(str, plain)) == ["double", "float"] and pa.types.is_float64(arrow):
            # fastavro skips a float for a later double, and takes a first double: always double
            index = next(i for i, b in rest if _name(b) == "double")
            node = self.add(OP_UNION, path, U_ONE, null, index)
            self.kids_of(node, [self.add(OP_DOUBLE, path)], 1)
            return node
        if not pa.types.is_struct(arrow):
            raise Unsupported(f"{arrow} for a union")
        names = [arrow.field(i).name for i in range(arrow.num_fields)]
        node = self.add(OP_UNION, path, U_MEMBERS, null)  # before its members: the root is 0
        kids: list[int] = []
        for member, (index, branch) in enumerate(rest):
            named = _name(branch) in ("record", "error", "enum", "fixed")  # tuple notation
            if f"member{member}" not in names or (not named and _ambiguous(branches, index)):
                raise Unsupported(f"union member {member}")
            at = names.index(f"member{member}")
            child = self.node(branch, arrow.field(at).type, (*path, ("field", at)))
            kids += [index, child]
        self.kids_of(node, kids, len(rest))
        return node


def compile_encoder(schema: Any, arrow_type: pa.DataType) -> EncodeProgram:
    """The program that writes ``schema`` from Arrow arrays of ``arrow_type``, or
    :class:`Unsupported`. ``schema`` is the JSON (parsed) of the writer schema."""
    compiler = _Compiler()
    compiler.column(())  # the C code reads the batch's own array as column 0
    try:
        compiler.node(expand_schema(schema), arrow_type, ())
    except (KeyError, TypeError, ValueError, SchemaParseException) as exc:  # fastavro's to judge
        raise Unsupported(str(exc)) from exc
    return EncodeProgram(
        nodes=b"".join(struct.pack(f"<{NODE_WIDTH}q", *node) for node in compiler.nodes),
        kids=struct.pack(f"<{len(compiler.kids)}q", *compiler.kids),
        consts=bytes(compiler.consts),
        paths=compiler.paths,
    )
