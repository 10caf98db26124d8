"""Compiles what the C Avro decoder (``_avro_arrow``) runs: the builder spec of the reader's
Arrow type, and per writer schema a decode program already resolved to the reader schema.
Pure: no pyspark, no fastavro; runs in the Spark Python worker (once per schema id), and in
unit tests.

Avro's resolution rules are applied here, once per writer schema, so that the C loop only
reads and appends: a writer field the reader lacks is read and dropped, a reader field the
writer lacks gets its default (the default's Avro bytes are compiled into the program's
constants), ``int``→``long``→``float``→``double`` and ``string``⇄``bytes`` are promoted, enum
symbols are mapped by name (the reader's default for unknown ones). What the compiler does not
cover raises :class:`Unsupported`, and the records of that writer schema are decoded by the
fastavro path instead: a written type that more than one branch of a reader union could read
with different rules (Java's Avro takes the branch of the same type first, fastavro the first
that reads it), named types whose names differ between writer and reader, logical types
that differ between writer and reader (say ``timestamp-millis`` against ``timestamp-micros``),
decimals whose scales differ, reader fields without a default that the writer lacks, recursive
schemas, defaults that do not fit their type, and programs nested deeper than the C decoder
recurses (:data:`MAX_DEPTH`).

The numbers below are the C header's (``_native/_avro_arrow.h``); keep both in step.
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from kafka_direct.schema_registry.avro_defaults import Unsupported, encode_default

__all__ = [
    "MAX_DEPTH",
    "Builders",
    "Program",
    "Unsupported",
    "builders_of",
    "compile_program",
    "normalize",
    "program_depth",
]

K_BOOL, K_I32, K_I64, K_F32, K_F64, K_BIN, K_DEC, K_STRUCT, K_LIST = range(1, 10)
(
    OP_NULL,
    OP_BOOL,
    OP_INT,
    OP_LONG,
    OP_FLOAT,
    OP_DOUBLE,
    OP_BYTES,
    OP_FIXED,
    OP_DEC_BYTES,
    OP_DEC_FIXED,
    OP_ENUM,
    OP_RECORD,
    OP_DEFAULT,
    OP_ARRAY,
    OP_MAP,
    OP_UNION,
    OP_ERROR,
    OP_MEMBER,
) = range(1, 19)
CV_I32, CV_I64, CV_F32, CV_F64, CV_MILLIS = range(1, 6)
E_NULL = 8
#: The deepest node (the root is 0) the C decoder runs: it refuses a deeper program as malformed,
#: which would fail every batch, where fastavro reads the schema (KD_MAX_DEPTH, _avro_decode.c).
MAX_DEPTH = 256
#: Where a node's children begin (its int32s before them), per op that has children.
_FIRST_CHILD = {OP_RECORD: 3, OP_DEFAULT: 5, OP_ARRAY: 4, OP_MAP: 6, OP_UNION: 4, OP_MEMBER: 4}

_PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")
_NAMED = ("record", "error", "enum", "fixed")
_PROMOTIONS = {
    "int": ("long", "float", "double"),
    "long": ("float", "double"),
    "float": ("double",),
    "string": ("bytes",),
    "bytes": ("string",),
}


# -- schemas: named references expanded, full names, nothing recursive ----------------------


def normalize(schema: Any) -> Any:
    """The schema with every named reference replaced by its definition and every named type's
    ``name`` made its full name. :class:`Unsupported` for a recursive schema."""
    return _normalize(schema, None, {}, ())


def _full(name: str, namespace: str | None) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _normalize(
    schema: Any, namespace: str | None, named: dict[str, Any], stack: tuple[str, ...]
) -> Any:
    if isinstance(schema, list):
        return [_normalize(b, namespace, named, stack) for b in schema]
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return schema
        full = _full(schema, namespace)
        found = named.get(full, named.get(schema))
        if found is None:
            raise Unsupported(f"unknown type {schema!r}")
        if found["name"] in stack:
            raise Unsupported(f"recursive type {schema!r}")
        return found
    if not isinstance(schema, Mapping) or "type" not in schema:
        raise Unsupported(f"not an Avro schema: {schema!r}")
    kind = schema["type"]
    if isinstance(kind, (list, Mapping)):
        return _normalize(kind, namespace, named, stack)
    if kind in _PRIMITIVES and "logicalType" not in schema:
        return kind
    if kind not in _PRIMITIVES and kind not in _NAMED and kind not in ("array", "map"):
        return _normalize(kind, namespace, named, stack)  # {"type": "SomeNamedType"}
    out = dict(schema)
    if kind in _NAMED:
        name = str(schema["name"])
        space = schema.get("namespace", namespace) if "." not in name else name.rsplit(".", 1)[0]
        full = _full(name, space or None)
        out["name"] = full
        named[full] = out
        if kind in ("record", "error"):
            inner = (*stack, full)
            out["fields"] = [
                {**f, "type": _normalize(f["type"], space or None, named, inner)}
                for f in schema.get("fields", [])
            ]
    elif kind == "array":
        out["items"] = _normalize(schema["items"], namespace, named, stack)
    elif kind == "map":
        out["values"] = _normalize(schema["values"], namespace, named, stack)
    return out


def _kind(schema: Any) -> str:
    if isinstance(schema, list):
        return "union"
    return schema if isinstance(schema, str) else str(schema["type"])


def _logical(schema: Any) -> str | None:
    """The logical type as far as Spark's value is concerned (None: the plain type's)."""
    if not isinstance(schema, Mapping):
        return None
    logical = schema.get("logicalType")
    kind = schema["type"]
    if logical == "decimal" and kind in ("bytes", "fixed"):
        return "decimal"
    if logical == "date" and kind == "int":
        return "date"
    if kind == "long" and logical in (
        "timestamp-millis",
        "local-timestamp-millis",
    ):
        return "millis"
    if kind == "long" and logical in ("timestamp-micros", "local-timestamp-micros"):
        return "micros"
    return None


# -- builders: one per Arrow array of the reader's type ------------------------------------


class Builders:
    """The reader's Arrow type as the C decoder's builders: ``kinds[i]`` and ``children[i]``
    of builder ``i`` (preorder; builder 0 is the column), and the flat ``spec`` for C."""

    def __init__(self, arrow_type: pa.DataType) -> None:
        self.kinds: list[int] = []
        self.types: list[pa.DataType] = []
        self.children: list[list[int]] = []
        self._add(arrow_type)
        flat = [len(self.kinds)]
        for kind, children in zip(self.kinds, self.children, strict=True):
            flat += [kind, len(children), *children]
        self.spec = array("i", flat).tobytes()

    def _add(self, t: pa.DataType) -> int:
        index = len(self.kinds)
        self.kinds.append(0)
        self.types.append(t)
        self.children.append([])
        if pa.types.is_boolean(t):
            kind = K_BOOL
        elif pa.types.is_int32(t) or pa.types.is_date32(t):
            kind = K_I32
        elif pa.types.is_int64(t) or (pa.types.is_timestamp(t) and t.unit == "us"):
            kind = K_I64
        elif pa.types.is_float32(t):
            kind = K_F32
        elif pa.types.is_float64(t):
            kind = K_F64
        elif pa.types.is_binary(t) or pa.types.is_string(t):
            kind = K_BIN
        elif pa.types.is_decimal128(t):
            kind = K_DEC
        elif pa.types.is_struct(t):
            kind = K_STRUCT
            self.children[index] = [self._add(t.field(i).type) for i in range(t.num_fields)]
        elif pa.types.is_map(t):
            kind = K_LIST
            entries = pa.struct([pa.field("key", t.key_type, False), t.item_field])
            self.children[index] = [self._add(entries)]
        elif pa.types.is_list(t):
            kind = K_LIST
            self.children[index] = [self._add(t.value_type)]
        else:
            raise Unsupported(f"Arrow type {t}")
        self.kinds[index] = kind
        return index


def builders_of(arrow_type: pa.DataType) -> Builders:
    return Builders(arrow_type)


# -- programs ---------------------------------------------------------------------------------


class Program:
    """A decode program (int32s) and its constants (enum symbols, defaults' Avro bytes)."""

    def __init__(self, code: bytes, consts: bytes) -> None:
        self.code = code
        self.consts = consts


def compile_program(writer: Any, reader: Any, builders: Builders) -> Program:
    """The program that decodes records written with ``writer`` into the builders of
    ``reader``'s Arrow type (both schemas normalised)."""
    compiler = _Compiler(builders)
    code = compiler.node(writer, reader, 0)
    depth = program_depth(code)
    if depth > MAX_DEPTH:
        raise Unsupported(f"a program {depth} nodes deep, deeper than the C decoder's {MAX_DEPTH}")
    return Program(array("i", code).tobytes(), bytes(compiler.consts))


def program_depth(code: list[int]) -> int:
    """The depth of a program's deepest node, as the C interpreter counts it (the root is 0,
    each child one more). Iterative: a program too deep for C may be too deep for Python's
    recursion too."""
    deepest = 0
    pending = [(0, len(code), 0)]  # (first node, end, depth) of a run of sibling nodes
    while pending:
        at, end, depth = pending.pop()
        while at < end:
            op, size = code[at], code[at + 2]
            deepest = max(deepest, depth)
            if op in _FIRST_CHILD:
                pending.append((at + _FIRST_CHILD[op], at + size, depth + 1))
            at += size
    return deepest


def _node(
    op: int, target: int, args: list[int], children: list[list[int]] | None = None
) -> list[int]:
    flat = [x for child in children or [] for x in child]
    return [op, target, 3 + len(args) + len(flat), *args, *flat]


def _names_match(writer: Mapping[str, Any], reader: Mapping[str, Any]) -> bool:
    return writer["name"] == reader["name"] or writer["name"] in reader.get("aliases", [])


class _Compiler:
    def __init__(self, builders: Builders) -> None:
        self.builders = builders
        self.consts = bytearray()

    def _const(self, data: bytes) -> tuple[int, int]:
        at = len(self.consts)
        self.consts += data
        return at, len(data)

    def _expect(self, target: int, *kinds: int) -> None:
        if target >= 0 and self.builders.kinds[target] not in kinds:
            raise Unsupported("the reader's Arrow type does not match its schema")

    def node(self, w: Any, r: Any, t: int) -> list[int]:
        """Decode ``w`` into builder ``t`` as reader type ``r`` (``r`` None, ``t`` -1: skip)."""
        if isinstance(w, list):
            null_refused = r is not None and not self._nullable(r)
            branches = [
                _node(OP_ERROR, -1, [E_NULL])
                if b == "null" and null_refused
                else self.node(b, r, t)
                for b in w
            ]
            return _node(OP_UNION, -1, [len(w)], branches)
        if r is None:
            return self._leaf(w, None, -1)
        if isinstance(r, list):
            rest = [b for b in r if b != "null"]
            if w == "null":
                if len(rest) == len(r):
                    raise Unsupported("null written, reader union without null")
                return _node(OP_NULL, t, [])
            kinds = sorted(_kind(b) for b in rest)
            if len(rest) == 1:
                return self.node(w, rest[0], t)
            if kinds == ["int", "long"]:
                return self.node(w, "long", t)
            if kinds == ["double", "float"]:
                return self.node(w, "double", t)
            return self._member(w, rest, t)
        if w == "null":
            raise Unsupported("null written, reader not nullable")
        return self._leaf(w, r, t)

    def _member(self, w: Any, branches: list[Any], t: int) -> list[int]:
        """A writer type into a reader union of several types (struct<member0, ...>): the
        branch of the same type (or name), else the first the writer's type promotes to."""
        self._expect(t, K_STRUCT)
        if len(self.builders.children[t]) != len(branches):
            raise Unsupported("the reader's Arrow type does not match its schema")
        wk = _kind(w)
        same = [
            k
            for k, b in enumerate(branches)
            if _kind(b) == wk
            and _logical(b) == _logical(w)
            and (wk not in _NAMED or _names_match(w, b))
        ]
        promoted = [
            k
            for k, b in enumerate(branches)
            if _logical(b) is None and _logical(w) is None and _kind(b) in _PROMOTIONS.get(wk, ())
        ]
        if not same and not promoted:
            raise Unsupported(f"{wk} written, no branch of the reader's union reads it")
        if same and promoted and promoted[0] < same[0]:
            raise Unsupported("resolution libraries differ on which union branch reads it")
        k = same[0] if same else promoted[0]
        inner = self.node(w, branches[k], self.builders.children[t][k])
        return _node(OP_MEMBER, t, [k], [inner])

    @staticmethod
    def _nullable(r: Any) -> bool:
        return isinstance(r, list) and "null" in r

    def _leaf(self, w: Any, r: Any, t: int) -> list[int]:
        wk = _kind(w)
        if r is not None:
            rk = _kind(r)
            if _logical(w) != _logical(r):
                raise Unsupported(f"logical types differ: {_logical(w)} against {_logical(r)}")
        else:
            rk = wk
        logical = _logical(w)
        if wk == "null":
            return _node(OP_NULL, t, [])
        if wk == "boolean" and rk == "boolean":
            self._expect(t, K_BOOL)
            return _node(OP_BOOL, t, [])
        if wk in ("int", "long") and rk in ("int", "long", "float", "double"):
            if wk == "long" and rk == "int":
                raise Unsupported("long written, int read")
            conv = {"int": CV_I32, "long": CV_I64, "float": CV_F32, "double": CV_F64}[rk]
            if logical == "millis":
                conv = CV_MILLIS
            self._expect(t, {CV_I32: K_I32, CV_F32: K_F32, CV_F64: K_F64}.get(conv, K_I64))
            return _node(OP_INT if wk == "int" else OP_LONG, t, [conv])
        if wk == "float" and rk in ("float", "double"):
            self._expect(t, K_F32 if rk == "float" else K_F64)
            return _node(OP_FLOAT, t, [CV_F32 if rk == "float" else CV_F64])
        if wk == "double" and rk == "double":
            self._expect(t, K_F64)
            return _node(OP_DOUBLE, t, [])
        if logical == "decimal":
            return self._decimal(w, r, t)
        if wk in ("bytes", "string") and rk in ("bytes", "string"):
            self._expect(t, K_BIN)
            # Arrow strings must be UTF-8, and fastavro refuses an Avro string that is not
            check = wk == "string" or (t >= 0 and pa.types.is_string(self.builders.types[t]))
            return _node(OP_BYTES, t, [int(check)])
        if wk == "fixed" and rk == "fixed":
            if r is not None and (not _names_match(w, r) or w["size"] != r["size"]):
                raise Unsupported("fixed types differ")
            self._expect(t, K_BIN)
            return _node(OP_FIXED, t, [int(w["size"])])
        if wk == "enum" and rk == "enum":
            return self._enum(w, r, t)
        if wk in ("record", "error") and rk in ("record", "error"):
            return self._record(w, r, t)
        if wk == "array" and rk == "array":
            self._expect(t, K_LIST)
            child = self.builders.children[t][0] if t >= 0 else -1
            items = self.node(w["items"], r["items"] if r is not None else None, child)
            return _node(OP_ARRAY, t, [_min_bytes(w["items"])], [items])
        if wk == "map" and rk == "map":
            self._expect(t, K_LIST)
            entries = self.builders.children[t][0] if t >= 0 else -1
            key, value = self.builders.children[entries] if t >= 0 else (-1, -1)
            values = self.node(w["values"], r["values"] if r is not None else None, value)
            return _node(OP_MAP, t, [_min_bytes(w["values"]), entries, key], [values])
        raise Unsupported(f"{wk} written, {rk} read")

    def _decimal(self, w: Any, r: Any, t: int) -> list[int]:
        precision = int(w.get("precision", 0))
        if r is not None:
            if int(w.get("scale", 0)) != int(r.get("scale", 0)):
                raise Unsupported("decimal scales differ")
            precision = int(r.get("precision", 0))
            self._expect(t, K_DEC)
        if not 1 <= precision <= 38:
            raise Unsupported(f"decimal precision {precision}")
        if w["type"] == "fixed":
            return _node(OP_DEC_FIXED, t, [precision, int(w["size"])])
        return _node(OP_DEC_BYTES, t, [precision])

    def _enum(self, w: Any, r: Any, t: int) -> list[int]:
        pairs: list[int] = []
        if r is None:
            for _ in w["symbols"]:
                pairs += [0, 0]
            return _node(OP_ENUM, -1, [len(w["symbols"]), *pairs])
        if not _names_match(w, r):
            raise Unsupported("enum names differ")
        self._expect(t, K_BIN)
        for symbol in w["symbols"]:
            chosen = symbol if symbol in r["symbols"] else r.get("default")
            if chosen is None:
                pairs += [-1, 0]
            else:
                pairs += list(self._const(str(chosen).encode()))
        return _node(OP_ENUM, t, [len(w["symbols"]), *pairs])

    def _record(self, w: Any, r: Any, t: int) -> list[int]:
        if r is None:
            return _node(OP_RECORD, -1, [], [self.node(f["type"], None, -1) for f in w["fields"]])
        if not _names_match(w, r):
            raise Unsupported("record names differ")
        self._expect(t, K_STRUCT)
        children = self.builders.children[t]
        readers = {f["name"]: i for i, f in enumerate(r["fields"])}
        for i, f in enumerate(r["fields"]):
            for alias in f.get("aliases", []):
                readers.setdefault(alias, i)
        if len(children) != len(r["fields"]):
            raise Unsupported("the reader's Arrow type does not match its schema")
        nodes: list[list[int]] = []
        seen: set[int] = set()
        for f in w["fields"]:
            match = readers.get(f["name"])
            if match is None or match in seen:
                nodes.append(self.node(f["type"], None, -1))
            else:
                seen.add(match)
                nodes.append(self.node(f["type"], r["fields"][match]["type"], children[match]))
        for i, f in enumerate(r["fields"]):
            if i in seen:
                continue
            if "default" not in f:
                raise Unsupported(f"reader field {f['name']!r} has no default")
            data = encode_default(f["type"], f["default"])
            at, length = self._const(data)
            inner = self.node(f["type"], f["type"], children[i])
            nodes.append(_node(OP_DEFAULT, -1, [at, length], [inner]))
        return _node(OP_RECORD, t, [], nodes)


def _min_bytes(schema: Any) -> int:
    kind = _kind(schema)
    if kind == "null":
        return 0
    if kind == "float":
        return 4
    if kind == "double":
        return 8
    if kind == "fixed":
        return int(schema["size"])
    if kind in ("record", "error"):
        return sum(_min_bytes(f["type"]) for f in schema["fields"])
    return 1
