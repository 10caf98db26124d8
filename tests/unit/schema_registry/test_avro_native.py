"""Differential unit tests of the C Avro decoder (kafka_direct.schema_registry._avro_arrow):
on random schemas and random records it gives exactly what the fastavro path gives; across
schema evolution it applies Avro's resolution rules as fastavro does; and on malformed,
truncated or random input it never reads out of bounds (a crash here kills the test run) and
gives null (PERMISSIVE) or an error naming the row (FAILFAST)."""

from __future__ import annotations

import datetime
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

from kafka_direct.schema_registry import avro_native, avro_program
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


# -- what one record may ask for -------------------------------------------------------------


def _zigzag(value: int) -> bytes:
    return encode_default("long", value)


_EMPTY = {"type": "record", "name": "E", "fields": []}
_NOTHING = {"type": "fixed", "name": "Z", "size": 0}
_BLOCK = _zigzag(1 << 20)  # one block of 2^20 items: the most one block of zero-byte items has


@pytest.mark.parametrize(
    ("items", "record", "decodes"),
    [
        pytest.param(_EMPTY, _BLOCK + b"\x00", True, id="one-full-block-of-empty-records"),
        pytest.param(_NOTHING, _zigzag(-(1 << 20)) + b"\x00" * 2, True, id="one-sized-block"),
        pytest.param(_EMPTY, _BLOCK * 3 + b"\x00", False, id="blocks-of-empty-records"),
        pytest.param(_NOTHING, _BLOCK * 3 + b"\x00", False, id="blocks-of-fixed-0"),
        pytest.param(
            {"type": "array", "items": _EMPTY},
            _zigzag(3) + (_BLOCK + b"\x00") * 3 + b"\x00",
            False,
            id="arrays-of-full-arrays",
        ),
        pytest.param(
            {"type": "array", "items": _EMPTY},
            _zigzag(60_000) + (_zigzag(20) + b"\x00") * 60_000 + b"\x00",
            True,
            id="many-small-arrays-past-2^20-items",
        ),
    ],
)
def test_zero_byte_items_have_a_budget_per_record(items: Any, record: bytes, decodes: bool) -> None:
    # Found in review: a block of zero-byte items was capped, the blocks of a record were not;
    # 8 KB of such blocks asked for 2^31 items (16 s, 385 MB), then failed the whole batch, or,
    # in a field the reader drops, burnt the CPU for nothing. Over the budget, the record is a
    # bad record; the rest of the batch decodes.
    schema = _top({"type": "array", "items": items})
    good = _encode(schema, [{"value": []}])[0]
    values = pa.array([good, record, good], pa.binary())
    decoded = _decoder(schema).decode(values)
    assert decoded.is_null().to_pylist() == [False, not decodes, False]
    if not decodes:
        with pytest.raises(WireFormatError, match=r"Row 1 .*more array or map items in all"):
            _decoder(schema, "FAILFAST").decode(values)
    # In a field the reader drops: read and dropped, within the same budget.
    writer = _record(
        {"name": "id", "type": "int"}, {"name": "a", "type": schema["fields"][0]["type"]}
    )
    reader = _record({"name": "id", "type": "int"})
    _, arrow_type = spark_type_of(json.dumps(reader), "jsonFormatSchema")
    native = NativeReader(reader, arrow_type)
    dropped = avro_native.decode(
        pa.array([header(1) + b"\x02" + record]),
        native.builders,
        [(1, native.program(1, writer))],
        framed=True,
        stop_at_error=False,
    )
    assert [code for _, code, _, _ in dropped.errors] == ([] if decodes else [avro_native.ITEMS])


def test_a_defaults_items_are_the_schemas_not_counted_against_the_record() -> None:
    writer = _record({"name": "a", "type": {"type": "array", "items": _EMPTY}})
    default = {"name": "t", "type": {"type": "array", "items": "int"}, "default": [1, 2, 3]}
    reader = _record(
        {"name": "a", "type": {"type": "array", "items": {**_EMPTY, "fields": [default]}}}
    )
    _, arrow_type = spark_type_of(json.dumps(reader), "jsonFormatSchema")
    native = NativeReader(reader, arrow_type)
    decoded = avro_native.decode(
        pa.array([header(1) + _BLOCK + b"\x00"]),  # 2^20 items, each 3 more from the default
        native.builders,
        [(1, native.program(1, writer))],
        framed=True,
        stop_at_error=True,
    )
    assert decoded.errors == []
    items = decoded.array.field("a")[0].values
    assert len(items) == 1 << 20 and items.field("t").values[:4].to_pylist() == [1, 2, 3, 1]


_TEXTS = _top({"type": "array", "items": "string"})


def _texts(*sizes: int) -> bytes:
    return _encode(_TEXTS, [{"value": ["x" * n for n in sizes]}])[0]


@pytest.mark.parametrize(
    ("records", "permissive", "failfast"),
    [
        pytest.param([_texts(30), _texts(150), _texts(30)], [1], "Row 1 .*record alone", id="one"),
        pytest.param([_texts(60, 60)], [0], "Row 0 .*record alone", id="alone-in-two-strings"),
        pytest.param([_texts(*[0] * 120)], [0], "Row 0 .*record alone", id="alone-in-items"),
        pytest.param([_texts(60), _texts(60)], OverflowError, OverflowError, id="the-batch"),
        pytest.param([_texts(30), _texts(40), _texts(30)], [], None, id="at-the-limit"),
    ],
)
def test_a_record_too_large_alone_is_its_own_error_not_the_batchs(
    monkeypatch: pytest.MonkeyPatch, records: list[bytes], permissive: Any, failfast: Any
) -> None:
    # Arrow's arrays have 32-bit offsets: a batch past 2 GiB in one array fails (a smaller batch
    # would do), but a record that alone is past it is a bad record, whatever the batch size.
    # The limit lowered to 100 bytes (and items) here, so that no test needs gigabytes.
    monkeypatch.setattr(avro_native, "OFFSET_LIMIT", 100)
    values = pa.array(records, pa.binary())
    batch_error = "though no record alone does: lower spark.sql.execution.arrow.maxRecordsPerBatch"
    if permissive is OverflowError:
        with pytest.raises(OverflowError, match=batch_error):
            _decoder(_TEXTS).decode(values)
    else:
        failed: list[int] = []
        decoded = _decoder(_TEXTS).decode(values, failed=failed)
        assert sorted(failed) == permissive
        assert decoded.is_null().to_pylist() == [row in permissive for row in range(len(records))]
    if failfast is OverflowError:
        with pytest.raises(OverflowError, match=batch_error):
            _decoder(_TEXTS, "FAILFAST").decode(values)
    elif failfast is not None:
        with pytest.raises(WireFormatError, match=failfast) as error:
            _decoder(_TEXTS, "FAILFAST").decode(values)
        assert "maxRecordsPerBatch" not in str(error.value)


# -- nesting ------------------------------------------------------------------------------------


def _nested(levels: int, leaf: Any = "int") -> Any:
    """``levels`` of ["null", record {x: ...}] around ``leaf``: two program nodes a level."""
    for i in range(levels):
        leaf = [
            "null",
            {"type": "record", "name": f"L{i}", "fields": [{"name": "x", "type": leaf}]},
        ]
    return leaf


_LEAF = {"type": "record", "name": "Leaf", "fields": [{"name": "v", "type": "int"}]}


@pytest.mark.parametrize(
    ("levels", "leaf", "depth", "in_c"),
    [
        pytest.param(127, "int", 255, True, id="255"),
        pytest.param(127, _LEAF, 256, True, id="256-the-c-decoders-deepest"),
        pytest.param(128, "int", 257, False, id="257"),
        pytest.param(300, "int", None, False, id="past-pythons-recursion"),
    ],
)
def test_programs_deeper_than_the_c_decoder_goes_are_left_to_fastavro(
    levels: int, leaf: Any, depth: int | None, in_c: bool
) -> None:
    # Found in review: the C decoder refuses a program deeper than 256 as malformed, which
    # failed every batch (PERMISSIVE too) where fastavro reads the records; deeper still, the
    # compiler's recursion failed the batch.
    writer = _record({"name": "id", "type": "int"}, {"name": "deep", "type": _nested(levels, leaf)})
    reader = _record({"name": "id", "type": "int"})
    _, arrow_type = spark_type_of(json.dumps(reader), "jsonFormatSchema")
    native = NativeReader(reader, arrow_type)
    if depth is not None:
        code = avro_program._Compiler(native.builders).node(
            avro_program.normalize(writer), native.reader, 0
        )
        assert avro_program.program_depth(code) == depth
    program = native.program(1, writer)
    assert (program is not None) == in_c
    record = header(1) + b"\x02" + b"\x02" * levels + b"\x04"  # id 1, each branch 1, leaf 2
    values = pa.array([header(1) + b"\x02\x00", record], pa.binary())
    if in_c:
        assert program is not None
        decoded = avro_native.decode(
            values, native.builders, [(1, program)], framed=True, stop_at_error=True
        )
        assert decoded.errors == [] and decoded.array.to_pylist() == [{"id": 1}, {"id": 1}]
    else:  # fastavro reads them (the decoder's fallback rows)
        parsed_writer, parsed_reader = fastavro.parse_schema(writer), fastavro.parse_schema(reader)
        read = fastavro.schemaless_reader(io.BytesIO(record[5:]), parsed_writer, parsed_reader)
        assert read == {"id": 1}


def test_a_deep_reader_schema_decodes_with_fastavro_in_permissive_mode() -> None:
    # the review's case: reader and writer 129 levels deep, one record nested all the way
    schema = _record({"name": "id", "type": "int"}, {"name": "deep", "type": _nested(129)})
    decoder = _decoder(schema)
    deep = b"\x02" + b"\x02" * 129 + b"\x04"
    decoded = decoder.decode(pa.array([b"\x02\x00", deep], pa.binary())).to_pylist()
    assert decoded[0] == {"id": 1, "deep": None}
    assert decoded == decoder._decode_python(pa.array([b"\x02\x00", deep], pa.binary())).to_pylist()
    inner = decoded[1]["deep"]
    for _ in range(128):
        inner = inner["x"]
    assert inner == {"x": 2}


_R, _D, _A, _M, _U, _MB = (
    avro_program.OP_RECORD,
    avro_program.OP_DEFAULT,
    avro_program.OP_ARRAY,
    avro_program.OP_MAP,
    avro_program.OP_UNION,
    avro_program.OP_MEMBER,
)
_I = [avro_program.OP_INT, 0, 4, avro_program.CV_I32]  # a leaf with an argument
_E = [avro_program.OP_ENUM, -1, 6, 1, 0, 0]  # a leaf whose arguments look like a child


@pytest.mark.parametrize(
    ("code", "depth"),
    [
        (_I, 0),
        ([_R, 0, 3], 0),
        ([_R, 0, 3 + 4 + 6, *_I, *_E], 1),
        ([_R, 0, 3 + 4 + 3 + 4, *_I, _R, -1, 3 + 4, *_I], 2),
        ([_U, -1, 4 + 4 + 8, 2, *_I, _MB, 0, 4 + 4, 0, *_I], 2),
        ([_A, 0, 4 + 4, 1, *_I], 1),
        ([_M, 0, 6 + 6, 1, 1, 2, *_E], 1),
        ([_D, -1, 5 + 8, 0, 1, _A, 0, 8, 1, *_I], 2),
    ],
)
def test_program_depth_counts_as_the_c_interpreter_does(code: list[int], depth: int) -> None:
    assert avro_program.program_depth(code) == depth


# -- values the two paths must agree on ---------------------------------------------------------


def test_a_decimal_of_no_bytes_is_a_bad_record_on_both_paths() -> None:
    # Java's Avro (a BigInteger of no bytes) and the C path refuse it; fastavro read it as 0.
    decimal_type = {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 1}
    schema = _top(decimal_type)
    values = pa.array([b"\x02\x05", b"\x00", b"\x02\x00"], pa.binary())
    expected = [{"value": decimal.Decimal("0.5")}, None, {"value": decimal.Decimal("0.0")}]
    decoder = _decoder(schema)
    assert decoder.decode(values).to_pylist() == expected
    failed: list[int] = []
    assert decoder._decode_python(values, failed=failed).to_pylist() == expected
    assert failed == [1]
    for path in ("decode", "_decode_python"):
        with pytest.raises(WireFormatError, match=r"Row 1 of this batch does not decode.*no bytes"):
            getattr(_decoder(schema, "FAILFAST"), path)(values)


_UTC = datetime.timezone.utc


@pytest.mark.parametrize(
    ("union", "value", "number"),
    [
        (["null", {"type": "int"}, "long"], 5, 5),
        ([{"type": "int"}, {"type": "long"}], -(2**40), -(2**40)),
        (
            ["null", "int", {"type": "long", "logicalType": "timestamp-millis"}],
            datetime.datetime(1969, 12, 31, 23, 59, 59, 999_000, tzinfo=_UTC),
            -1,
        ),
        (
            ["int", {"type": "long", "logicalType": "timestamp-micros"}],
            datetime.datetime(2001, 2, 3, 4, 5, 6, 7, tzinfo=_UTC),
            981_173_106_000_007,
        ),
        (
            ["int", {"type": "long", "logicalType": "local-timestamp-millis"}],
            datetime.datetime(1970, 1, 1, 0, 0, 1, 500_000),
            1500,
        ),
        (["null", {"type": "int", "logicalType": "date"}, "long"], datetime.date(1969, 12, 25), -7),
        (
            [{"type": "int", "logicalType": "time-millis"}, "long"],
            datetime.time(0, 0, 2, 5000),
            2005,
        ),
        (["int", {"type": "long", "logicalType": "time-micros"}], datetime.time(0, 0, 0, 9), 9),
    ],
)
def test_an_int_and_long_union_is_the_number_written_as_spark_avro_reads_it(
    union: list[Any], value: Any, number: int | None
) -> None:
    # Found in review: {"type": "int"} was not taken for "int", so such a union became a struct
    # the values did not fit, failing every batch. spark-avro takes an int and a long branch as
    # long, comparing Avro's types (logical types aside), with the number as written.
    schema = _top(union)
    assert (
        spark_type_of(json.dumps(schema), "jsonFormatSchema")[1].field("value").type == pa.int64()
    )
    values = pa.array([None, *_encode(schema, [{"value": value}])], pa.binary())
    decoder = _decoder(schema)
    assert decoder._decode_python(values).to_pylist() == [None, {"value": number}]
    assert decoder.decode(values).to_pylist() == [None, {"value": number}]


def test_a_time_of_a_time_millis_and_time_micros_union_is_refused_by_fastavros_path() -> None:
    # fastavro gives a time for either branch, which was written in milliseconds or in
    # microseconds: the fastavro path refuses the record rather than guess; the C path reads the
    # number written, as spark-avro does.
    millis = {"type": "int", "logicalType": "time-millis"}
    schema = _top([millis, {"type": "long", "logicalType": "time-micros"}])
    values = pa.array(_encode(schema, [{"value": datetime.time(0, 0, 1)}]), pa.binary())
    assert _decoder(schema)._decode_python(values).to_pylist() == [None]
    assert _decoder(schema).decode(values).to_pylist() == [{"value": 1000}]
