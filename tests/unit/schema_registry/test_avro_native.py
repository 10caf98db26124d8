"""Differential unit tests of the C Avro decoder (kafka_direct.schema_registry._avro_arrow):
on random schemas and random records it gives exactly what the fastavro path gives; across
schema evolution it applies Avro's resolution rules as fastavro does; and on malformed,
truncated or random input it never reads out of bounds (a crash here kills the test run) and
gives null (PERMISSIVE) or an error naming the row (FAILFAST)."""

from __future__ import annotations

import decimal
import io
import json
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from fastavro.schema import expand_schema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_direct.schema_registry import avro_native
from kafka_direct.schema_registry.avro_codec import AvroDecoder, to_spark_converter
from kafka_direct.schema_registry.avro_defaults import encode_default
from kafka_direct.schema_registry.avro_native import NativeReader
from kafka_direct.schema_registry.avro_read import spark_type_of
from kafka_direct.schema_registry.errors import WireFormatError
from kafka_direct.schema_registry.wire import header


def test_the_c_decoder_is_built_and_on() -> None:
    assert avro_native.available(), avro_native.status()


# -- random schemas and records -------------------------------------------------------------

_MILLIS = (-62_135_596_800_000, 253_402_300_799_999)  # what datetime can hold
_LEAVES: list[Any] = [
    "boolean",
    "int",
    "long",
    "float",
    "double",
    "bytes",
    "string",
    {"type": "int", "logicalType": "date"},
    {"type": "int", "logicalType": "time-millis"},
    {"type": "long", "logicalType": "timestamp-millis"},
    {"type": "long", "logicalType": "timestamp-micros"},
    {"type": "long", "logicalType": "local-timestamp-millis"},
    {"type": "long", "logicalType": "local-timestamp-micros"},
    {"type": "string", "logicalType": "uuid"},
    {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 3},
    {"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 0},
    {"type": "fixed", "name": "F", "size": 5},
    {
        "type": "fixed",
        "name": "D",
        "size": 8,
        "logicalType": "decimal",
        "precision": 18,
        "scale": 2,
    },
    {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]},
]


# Types whose Python values fastavro's path can tell apart, none promotable to another (where
# fastavro and Java choose different branches, and the compiler leaves the writer to fastavro).
_DISTINCT = ["boolean", "int", "string"]


def _schemas() -> st.SearchStrategy[Any]:
    def extend(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.one_of(
            st.builds(lambda t: {"type": "array", "items": t}, inner),
            st.builds(lambda t: {"type": "map", "values": t}, inner),
            st.builds(lambda t: ["null", t], inner.filter(lambda t: not isinstance(t, list))),
            # unions of several types: spark-avro's struct<member0, member1, ...>
            st.builds(
                lambda leaves, extra, null: (["null"] if null else []) + leaves + extra,
                st.lists(st.sampled_from(_DISTINCT), min_size=1, max_size=3, unique=True),
                st.lists(
                    inner.filter(
                        lambda t: isinstance(t, dict) and t["type"] in ("record", "array")
                    ),
                    max_size=1,
                ),
                st.booleans(),
            ).filter(lambda u: len([b for b in u if b != "null"]) >= 2),
            st.lists(inner, min_size=0, max_size=4).map(
                lambda ts: {
                    "type": "record",
                    "name": "R",
                    "fields": [{"name": f"f{i}", "type": t} for i, t in enumerate(ts)],
                }
            ),
        )

    return st.recursive(st.sampled_from(_LEAVES), extend, max_leaves=8)


# Built once: Hypothesis validates a strategy on its first draw, and this recursive one with its
# filters costs far more to validate than to draw from (rebuilt per example, most of the test).
SCHEMAS = _schemas()


def _unique_names(schema: Any) -> Any:
    """Each named type gets its own name (fastavro refuses a name defined twice)."""
    count = iter(range(10**6))

    def walk(s: Any) -> Any:
        if isinstance(s, list):
            return [walk(b) for b in s]
        if not isinstance(s, dict):
            return s
        out = dict(s)
        if "name" in out:
            out["name"] = f"{out['name']}{next(count)}"
        if "fields" in out:
            out["fields"] = [{**f, "type": walk(f["type"])} for f in out["fields"]]
        if "items" in out:
            out["items"] = walk(out["items"])
        if "values" in out:
            out["values"] = walk(out["values"])
        return out

    return walk(schema)


def _top(schema: Any) -> Any:
    return _unique_names(
        {"type": "record", "name": "Top", "fields": [{"name": "value", "type": schema}]}
    )


def _values(schema: Any) -> st.SearchStrategy[Any]:
    if isinstance(schema, list):
        return st.one_of(*(_values(b) if b != "null" else st.none() for b in schema))
    if schema == "null":
        return st.none()
    if isinstance(schema, str):
        schema = {"type": schema}
    kind, logical = schema["type"], schema.get("logicalType")
    if logical == "decimal":
        digits, scale = schema["precision"], schema["scale"]
        return st.integers(-(10**digits) + 1, 10**digits - 1).map(
            lambda n: decimal.Decimal(n).scaleb(-scale, decimal.Context(prec=60))
        )
    if logical == "date":
        return st.integers(-719_162, 2_932_896)
    if logical == "time-millis":
        return st.integers(0, 86_399_999)
    if logical in ("timestamp-millis", "local-timestamp-millis"):
        return st.integers(*_MILLIS)
    if logical in ("timestamp-micros", "local-timestamp-micros"):
        return st.integers(_MILLIS[0] * 1000, _MILLIS[1] * 1000)
    if logical == "uuid":
        return st.uuids().map(str)
    simple: dict[str, st.SearchStrategy[Any]] = {
        "boolean": st.booleans(),
        "int": st.integers(-(2**31), 2**31 - 1),
        "long": st.integers(-(2**63), 2**63 - 1),
        "float": st.floats(width=32, allow_nan=False),
        "double": st.floats(allow_nan=False),
        "bytes": st.binary(max_size=20),
        "string": st.text(max_size=10),
    }
    if kind in simple:
        return simple[kind]
    if kind == "fixed":
        return st.binary(min_size=schema["size"], max_size=schema["size"])
    if kind == "enum":
        return st.sampled_from(schema["symbols"])
    if kind == "array":
        return st.lists(_values(schema["items"]), max_size=4)
    if kind == "map":
        return st.dictionaries(st.text(max_size=5), _values(schema["values"]), max_size=3)
    return st.fixed_dictionaries({f["name"]: _values(f["type"]) for f in schema["fields"]})


def _encode(schema: Any, records: list[Any]) -> list[bytes]:
    parsed = fastavro.parse_schema(schema)
    out = []
    for record in records:
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, parsed, record)
        out.append(buffer.getvalue())
    return out


def _decoder(schema: Any, mode: str = "PERMISSIVE") -> AvroDecoder:
    _, arrow_type = spark_type_of(json.dumps(schema), "jsonFormatSchema")
    return AvroDecoder(json.dumps(schema), arrow_type, registry=None, mode=mode)  # type: ignore[arg-type]


@st.composite
def _schema_and_records(draw: st.DrawFn) -> tuple[Any, list[Any]]:
    schema = _top(draw(SCHEMAS))
    return schema, draw(st.lists(_values(schema), min_size=1, max_size=8))


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(_schema_and_records())
def test_random_records_decode_in_c_exactly_as_with_fastavro(case: tuple[Any, list[Any]]) -> None:
    schema, records = case
    decoder = _decoder(schema)
    native = decoder._native_reader()
    assert native is not None and native.program(None, None) is not None, schema
    values = pa.array([None, *_encode(schema, records), None], pa.binary())
    assert decoder.decode(values).to_pylist() == decoder._decode_python(values).to_pylist()


def test_a_sliced_batch_of_large_binary_decodes_in_c() -> None:
    schema = _top({"type": "array", "items": ["null", "string"]})
    records = [{"value": ["a", None, "ü"]}, {"value": []}, {"value": [None]}]
    values = pa.array([b"x", *_encode(schema, records), None], pa.large_binary())[1:]
    assert _decoder(schema).decode(values).to_pylist() == [*records, None]


# -- evolution: writer v1, reader v2, as fastavro resolves them -----------------------------


def _record(*fields: dict[str, Any], name: str = "Event") -> dict[str, Any]:
    return {"type": "record", "name": name, "namespace": "ns", "fields": list(fields)}


EVOLUTION = [
    pytest.param(
        _record({"name": "id", "type": "long"}),
        _record(
            {"name": "id", "type": "long"},
            {"name": "note", "type": ["null", "string"], "default": None},
            {"name": "n", "type": "int", "default": 7},
            {"name": "tags", "type": {"type": "array", "items": "string"}, "default": ["x"]},
            {"name": "s", "type": "string", "default": "dflt"},
            {
                "name": "sub",
                "type": _record({"name": "a", "type": "double"}, name="Sub"),
                "default": {"a": 1.5},
            },
            {"name": "m", "type": {"type": "map", "values": "long"}, "default": {"k": 3}},
            {"name": "b", "type": "bytes", "default": "ab\u0001"},
        ),
        [{"id": 1}, {"id": -5}],
        id="added-fields-get-their-defaults",
    ),
    pytest.param(
        _record(
            {"name": "id", "type": "int"},
            {"name": "gone", "type": {"type": "map", "values": ["null", "bytes"]}},
            {"name": "x", "type": "float"},
            {"name": "y", "type": "long"},
            {"name": "s", "type": "string"},
            {"name": "b", "type": "bytes"},
        ),
        _record(
            {"name": "id", "type": "long"},
            {"name": "x", "type": "double"},
            {"name": "y", "type": "float"},
            {"name": "s", "type": "bytes"},
            {"name": "b", "type": "string"},
        ),
        [
            {"id": 3, "gone": {"k": None, "l": b"zz"}, "x": 0.5, "y": 2**40, "s": "é", "b": b"ok"},
            {"id": -1, "gone": {}, "x": -2.0, "y": -3, "s": "", "b": b""},
        ],
        id="removed-fields-dropped-and-promotions",
    ),
    pytest.param(
        _record({"name": "e", "type": {"type": "enum", "name": "K", "symbols": ["A", "B", "Z"]}}),
        _record(
            {
                "name": "e",
                "type": {"type": "enum", "name": "K", "symbols": ["B", "A", "U"], "default": "U"},
            }
        ),
        [{"e": "A"}, {"e": "Z"}, {"e": "B"}],
        id="enum-symbols-by-name-unknown-to-default",
    ),
    pytest.param(
        _record({"name": "v", "type": "int"}, {"name": "w", "type": ["null", "long"]}),
        _record(
            {"name": "v", "type": ["null", "long"]},
            {"name": "w", "type": ["null", "double"]},
        ),
        [{"v": 1, "w": None}, {"v": 2, "w": 9}],
        id="into-nullable-and-promoted-through-unions",
    ),
    pytest.param(
        _record({"name": "old_name", "type": "string"}),
        _record({"name": "new_name", "type": "string", "aliases": ["old_name"]}),
        [{"old_name": "kept"}],
        id="field-aliases",
    ),
]


@pytest.mark.parametrize(("writer", "reader", "records"), EVOLUTION)
def test_evolution_resolves_in_c_as_fastavro_resolves_it(
    writer: dict[str, Any], reader: dict[str, Any], records: list[dict[str, Any]]
) -> None:
    _, arrow_type = spark_type_of(json.dumps(reader), "jsonFormatSchema")
    native = NativeReader(reader, arrow_type)
    program = native.program(1, writer)
    assert program is not None
    framed = [header(1) + b for b in _encode(writer, records)]
    decoded = avro_native.decode(
        pa.array(framed, pa.binary()),
        native.builders,
        [(1, program)],
        framed=True,
        stop_at_error=True,
    )
    assert decoded.errors == [] and decoded.fallback == []
    parsed_writer, parsed_reader = fastavro.parse_schema(writer), fastavro.parse_schema(reader)
    convert = to_spark_converter(expand_schema(reader))
    expected = []
    for blob in framed:
        value = fastavro.schemaless_reader(io.BytesIO(blob[5:]), parsed_writer, parsed_reader)
        expected.append(convert(value) if convert else value)
    assert decoded.array.to_pylist() == pa.array(expected, arrow_type).to_pylist()


def test_a_bytes_default_is_its_code_points_as_the_avro_spec_and_java_read_it() -> None:
    # fastavro encodes such a default as UTF-8 ("\u00ff" -> c3 bf); Spark's Avro (Java) and the
    # spec take each code point 0-255 as one byte.
    assert encode_default("bytes", "\u00ff\u0001") == b"\x04\xff\x01"
    assert encode_default({"type": "fixed", "name": "F", "size": 2}, "\u00ff\u0001") == b"\xff\x01"


def test_what_the_compiler_does_not_cover_is_left_to_fastavro_row_by_row() -> None:
    reader = _record({"name": "u", "type": ["null", "long"]})
    wide = _record({"name": "u", "type": ["null", "int", "string"]})
    plain = _record({"name": "u", "type": "int"})
    _, arrow_type = spark_type_of(json.dumps(reader), "jsonFormatSchema")
    native = NativeReader(reader, arrow_type)
    assert native.program(1, wide) is None  # a string branch a long cannot read
    assert native.program(2, plain) is not None
    values = pa.array(
        [header(2) + _encode(plain, [{"u": 3}])[0], header(1) + _encode(wide, [{"u": 4}])[0]]
    )
    decoded = avro_native.decode(
        values,
        native.builders,
        [(2, native.program(2, plain))],
        framed=True,
        stop_at_error=True,
    )
    assert decoded.fallback == [1] and decoded.errors == []
    assert decoded.array.to_pylist() == [{"u": 3}, None]
    filled = avro_native.merge(decoded.array, [1], pa.array([{"u": 4}], arrow_type))
    assert filled.to_pylist() == [{"u": 3}, {"u": 4}]


# -- bad input ---------------------------------------------------------------------------------

BAD_SCHEMA = _top(
    {
        "type": "record",
        "name": "B",
        "fields": [
            {"name": "s", "type": "string"},
            {"name": "a", "type": {"type": "array", "items": ["null", "long"]}},
            {"name": "m", "type": {"type": "map", "values": "double"}},
            {
                "name": "d",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 1},
            },
            {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
            {"name": "n", "type": ["null", {"type": "fixed", "name": "F", "size": 3}]},
        ],
    }
)
GOOD = {
    "value": {
        "s": "héllo",
        "a": [1, None, -2],
        "m": {"k": 0.5},
        "d": decimal.Decimal("12.3"),
        "e": "B",
        "n": b"xyz",
    }
}
GOOD_ROW = {"value": {**GOOD["value"], "m": [("k", 0.5)]}}  # an Arrow map is a list of pairs


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        (b"", "the record ends before its last field"),
        (b"\x04h\xff", "a string that is not valid UTF-8"),
        (b"\x03", "a negative length"),
        (b"\x00\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", "longer than 10 bytes"),
        (b"\x00\x02\x04", "a union branch index outside the union"),
        (b"\x00\x00\x00\x04\x27\x10\x00", "more digits than its precision"),
        (b"\x00\x00\x00\x02\x01\x04\x00", "an enum index outside"),
        (b"\x00\xfe\xff\xff\xff\x0f", "more items than bytes left"),
    ],
)
def test_each_malformed_record_is_named_in_failfast_and_null_in_permissive(
    record: bytes, reason: str
) -> None:
    good = _encode(BAD_SCHEMA, [GOOD])[0]
    values = pa.array([good, record], pa.binary())
    with pytest.raises(
        WireFormatError, match=f"Row 1 of this batch does not decode with.*{reason}"
    ):
        _decoder(BAD_SCHEMA, "FAILFAST").decode(values)
    assert _decoder(BAD_SCHEMA).decode(values).to_pylist() == [GOOD_ROW, None]


def test_left_over_bytes_are_an_error_as_in_the_fastavro_path() -> None:
    good = _encode(BAD_SCHEMA, [GOOD])[0]
    values = pa.array([good + b"\x00"], pa.binary())
    with pytest.raises(WireFormatError, match=r"Row 0 of this batch has 1 byte\(s\) left over"):
        _decoder(BAD_SCHEMA, "FAILFAST").decode(values)


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_truncated_mutated_and_random_records_never_crash(data: st.DataObject) -> None:
    good = _encode(BAD_SCHEMA, [GOOD])[0]
    cut = data.draw(st.integers(0, len(good) - 1))
    at = data.draw(st.integers(0, len(good) - 1))
    mutated = good[:at] + bytes([data.draw(st.integers(0, 255))]) + good[at + 1 :]
    noise = data.draw(st.binary(max_size=64))
    values = pa.array([good[:cut], mutated, noise, good], pa.binary())
    decoded = _decoder(BAD_SCHEMA).decode(values).to_pylist()
    assert decoded[0] is None  # every strict prefix of this record is incomplete
    assert decoded[3] == GOOD_ROW and len(decoded) == 4
    for row in (1, 2):  # whatever did decode is what fastavro decodes too
        if decoded[row] is not None:
            one = values[row : row + 1]
            assert [decoded[row]] == _decoder(BAD_SCHEMA)._decode_python(one).to_pylist()


def test_framed_records_without_the_magic_byte_are_named() -> None:
    reader = _record({"name": "id", "type": "long"})
    _, arrow_type = spark_type_of(json.dumps(reader), "jsonFormatSchema")
    native = NativeReader(reader, arrow_type)
    values = pa.array([header(1) + b"\x02", b'{"id": 1}', b"\x00\x00"], pa.binary())
    decoded = avro_native.decode(
        values,
        native.builders,
        [(1, native.program(1, reader))],
        framed=True,
        stop_at_error=False,
    )
    assert decoded.array.to_pylist() == [{"id": 1}, None, None]
    assert [(row, code) for row, code, _, _ in decoded.errors] == [
        (1, avro_native.NOT_FRAMED),
        (2, avro_native.NOT_FRAMED),
    ]
