"""Differential unit tests of the C Avro encoder (kafka_direct.schema_registry._avro_encode): on
random schemas and random Arrow columns of their Spark types it writes exactly fastavro's bytes
(today's ``to_avro`` path, which confluent's AvroSerializer matches); on edge values too; and
where it stops (a null the schema does not allow, an unknown enum symbol) the batch goes through
fastavro, so the bytes or the error are fastavro's."""

from __future__ import annotations

import datetime
import decimal
import json
import sys
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_direct.schema_registry import avro_encode_native
from kafka_direct.schema_registry.avro_encoder import AvroEncoder
from kafka_direct.schema_registry.avro_read import spark_type_of

_DAYS = (-719_162, 2_932_896)
_MICROS = (-62_135_596_800_000_000, 253_402_300_799_999_999)

_LEAVES: list[Any] = [
    "boolean",
    "int",
    "long",
    "float",
    "double",
    "bytes",
    "string",
    {"type": "int", "logicalType": "date"},
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
    {
        "type": "fixed",
        "name": "W",
        "size": 20,
        "logicalType": "decimal",
        "precision": 38,
        "scale": 4,
    },
    {"type": "enum", "name": "E", "symbols": ["A", "B", "C_"]},
]
# Union members, in this order, whose Python values no earlier member takes (what the compiler
# covers: an int after a double would go to the double on fastavro's path).
_MEMBERS: list[Any] = ["boolean", "int", "string", "double", "bytes"]


def _schemas() -> st.SearchStrategy[Any]:
    def extend(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.one_of(
            st.builds(lambda t: {"type": "array", "items": t}, inner),
            st.builds(lambda t: {"type": "map", "values": t}, inner),
            st.builds(
                lambda t, first: ["null", t] if first else [t, "null"],
                inner.filter(lambda t: not isinstance(t, list)),
                st.booleans(),
            ),
            st.builds(
                lambda leaves, extra, null: (["null"] if null else []) + leaves + extra,
                st.lists(st.sampled_from(range(len(_MEMBERS))), min_size=1, max_size=3, unique=True)
                .map(sorted)
                .map(lambda at: [_MEMBERS[i] for i in at]),
                st.lists(
                    inner.filter(
                        lambda t: isinstance(t, dict) and t["type"] in ("record", "array")
                    ),
                    max_size=1,
                ),
                st.booleans(),
            ).filter(lambda u: len([b for b in u if b != "null"]) >= 2),
            st.sampled_from([["int", "long"], ["null", "long", "int"], ["float", "double"]]),
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
        for key in ("items", "values"):
            if key in out:
                out[key] = walk(out[key])
        return out

    return walk(schema)


def _is_null(schema: Any) -> bool:
    return schema == "null"


def _values(schema: Any, sloppy: bool = False) -> st.SearchStrategy[Any]:
    """Values as pyarrow's ``to_pylist`` gives them for the schema's Spark type; ``sloppy``:
    also nulls at every level, unknown enum symbols, dates Python cannot hold, duplicate map
    keys (what a Spark column could hold and the schema does not allow)."""
    exact = _exact(schema, sloppy)
    if not sloppy:
        return exact
    if isinstance(schema, dict) and schema.get("type") == "enum":
        exact = st.one_of(exact, st.just("Z"))
    if isinstance(schema, dict) and schema.get("logicalType") == "date":
        exact = st.one_of(exact, st.sampled_from([_DAYS[0] - 1, _DAYS[1] + 1]))
    if isinstance(schema, dict) and schema.get("type") == "map":
        exact = st.one_of(
            exact,
            st.tuples(_values(schema["values"], sloppy)).map(lambda v: [("k", v[0]), ("k", v[0])]),
        )
    return st.one_of(st.none(), exact)


def _exact(schema: Any, sloppy: bool) -> st.SearchStrategy[Any]:
    if isinstance(schema, list):
        rest = [b for b in schema if not _is_null(b)]
        none = [st.none()] if len(rest) < len(schema) else []
        if len(rest) == 1:
            return st.one_of(*none, _values(rest[0], sloppy))
        if sorted(map(str, rest)) in (["int", "long"], ["double", "float"]):
            if "int" in rest:
                return st.one_of(*none, st.integers(-(2**63), 2**63 - 1), st.integers(-5, 5))
            return st.one_of(*none, st.floats(allow_nan=False))
        names = [f"member{i}" for i in range(len(rest))]

        def members(chosen: int, value: Any, also: Any) -> dict[str, Any]:
            out: dict[str, Any] = dict.fromkeys(names)
            out[names[chosen]] = value
            if also is not None and chosen + 1 < len(names):  # two set: the first one counts
                out[names[chosen + 1]] = also[chosen + 1]
            return out

        one = st.integers(0, len(rest) - 1).flatmap(
            lambda i: st.builds(
                members,
                st.just(i),
                _values(rest[i], sloppy),
                st.one_of(st.none(), st.tuples(*(_values(b, sloppy) for b in rest))),
            )
        )
        return st.one_of(*none, one)
    if isinstance(schema, str):
        schema = {"type": schema}
    kind, logical = schema["type"], schema.get("logicalType")
    if logical == "decimal":
        digits, scale = schema["precision"], schema["scale"]
        return st.one_of(
            st.integers(-(10**digits) + 1, 10**digits - 1),
            st.sampled_from([0, -1, 1, -128, 128, -(2**39), 2**39, -(10**digits) + 1]).filter(
                lambda n: abs(n) < 10**digits
            ),
        ).map(lambda n: decimal.Decimal(n).scaleb(-scale, decimal.Context(prec=60)))
    if logical == "date":
        return st.integers(*_DAYS)
    if logical in ("timestamp-millis", "timestamp-micros", "local-timestamp-millis"):
        return st.one_of(st.integers(*_MICROS), st.integers(-2001, 2001))
    if logical == "local-timestamp-micros":
        return st.integers(*_MICROS)
    if logical == "uuid":
        return st.uuids().map(str)
    simple: dict[str, st.SearchStrategy[Any]] = {
        "boolean": st.booleans(),
        "int": st.integers(-(2**31), 2**31 - 1),
        "long": st.integers(-(2**63), 2**63 - 1),
        "float": st.floats(width=32),
        "double": st.floats(),
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
        return st.lists(_values(schema["items"], sloppy), max_size=4)
    if kind == "map":
        return st.dictionaries(
            st.text(max_size=5), _values(schema["values"], sloppy), max_size=3
        ).map(lambda d: list(d.items()))
    return st.fixed_dictionaries({f["name"]: _values(f["type"], sloppy) for f in schema["fields"]})


def _arrow_type(schema: Any, timezone: str = "UTC") -> pa.DataType:
    from pyspark.sql.pandas.types import to_arrow_type

    spark_type, _ = spark_type_of(json.dumps(schema), "jsonFormatSchema")
    return to_arrow_type(spark_type, timezone=timezone)


def _both(schema: Any, values: pa.Array, schema_id: int | None = 7) -> tuple[bytes, list[Any]]:
    """The C encoder's column (it must not stop) and fastavro's, as Python lists."""
    encoder = AvroEncoder(json.dumps(schema), schema_id)
    compiled = avro_encode_native.program(schema, values.type)
    assert compiled is not None, (schema, values.type)
    prefix = b"" if schema_id is None else b"\x00" + schema_id.to_bytes(4, "big")
    encoded = avro_encode_native.encode(values, compiled, prefix)
    assert encoded.array is not None, avro_encode_native.REASONS.get(encoded.code)
    encoded.array.validate(full=True)
    assert encoder.encode(values).equals(encoded.array)
    return encoded.array.to_pylist(), encoder._encode_python(values, prefix).to_pylist()


def test_the_c_encoder_is_built_and_on() -> None:
    assert avro_encode_native.available(), avro_encode_native.status()


@st.composite
def _schema_and_column(draw: st.DrawFn) -> tuple[Any, pa.Array]:
    schema = _unique_names(draw(SCHEMAS))
    rows = draw(st.lists(st.one_of(st.none(), _values(schema)), min_size=0, max_size=8))
    values = pa.array(rows, _arrow_type(schema))
    start = draw(st.integers(0, len(values)))
    return schema, values.slice(start, draw(st.integers(0, len(values) - start)))


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(_schema_and_column(), st.sampled_from([None, 7, 2**31 + 5]))
def test_random_columns_encode_in_c_to_fastavros_bytes(
    case: tuple[Any, pa.Array], schema_id: int | None
) -> None:
    schema, values = case
    native, python = _both(schema, values, schema_id)
    assert native == python


@st.composite
def _schema_and_sloppy_column(draw: st.DrawFn) -> tuple[Any, pa.Array]:
    schema = _unique_names(draw(SCHEMAS))
    rows = draw(st.lists(_values(schema, sloppy=True), min_size=1, max_size=6))
    return schema, pa.array(rows, _arrow_type(schema)).slice(draw(st.integers(0, 1)))


def _outcome(encode: Any, values: pa.Array) -> Any:
    try:
        return encode(values).to_pylist()
    except Exception as exc:  # noqa: BLE001 - fastavro's error, compared by type and message
        return (type(exc), str(exc))


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(_schema_and_sloppy_column())
def test_columns_the_schema_does_not_allow_give_fastavros_bytes_or_error(
    case: tuple[Any, pa.Array],
) -> None:
    schema, values = case
    encoder = AvroEncoder(json.dumps(schema), 5)
    prefix = b"\x00\x00\x00\x00\x05"
    assert _outcome(encoder.encode, values) == _outcome(
        lambda v: encoder._encode_python(v, prefix), values
    )


def _record(*fields: tuple[str, Any], name: str = "R") -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": [{"name": n, "type": t} for n, t in fields]}


_WIDE = decimal.Context(prec=60)


EDGES: list[tuple[Any, list[Any]]] = [
    ({"type": "array", "items": "long"}, [[], [2**63 - 1, -(2**63)], None, [0]]),
    ({"type": "map", "values": ["null", "string"]}, [[], [("ß", None), ("a", "√")], None]),
    ("float", [float("nan"), float("inf"), float("-inf"), -0.0, 3.4e38, 1e-45]),
    ("double", [float("nan"), float("inf"), float("-inf"), -0.0, 5e-324]),
    (
        {"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 2},
        [decimal.Decimal(s) for s in ("-1.28", "1.28", "-0.01", "0.00", "-1.27", "-327.68")]
        + [decimal.Decimal(n).scaleb(-2, _WIDE) for n in (-(10**38) + 1, 10**38 - 1, -(2**64))],
    ),
    (
        {
            "type": "fixed",
            "name": "D",
            "size": 3,
            "logicalType": "decimal",
            "precision": 6,
            "scale": 0,
        },
        [decimal.Decimal(n) for n in (-999_999, 999_999, -1, 0, -128, 128, -129, -32768, 32768)],
    ),
    ({"type": "long", "logicalType": "timestamp-millis"}, [-1, -999, -1000, -1001, 1, 999]),
    ({"type": "int", "logicalType": "date"}, [_DAYS[0], _DAYS[1], -1, 0]),
    (["null", "string"], ["", None, "日本語", "\U0001f600"]),
    (
        _record(("a", ["null", _record(("b", ["string", "null"]), name="S")])),
        [{"a": None}, {"a": {"b": None}}, {"a": {"b": "x"}}],
    ),
]


@pytest.mark.parametrize(("schema", "rows"), EDGES)
def test_edge_values_encode_in_c_to_fastavros_bytes(schema: Any, rows: list[Any]) -> None:
    values = pa.array(rows, _arrow_type(schema))
    native, python = _both(schema, values)
    assert native == python
    native, python = _both(schema, values.slice(1), None)  # a nonzero offset
    assert native == python


def test_timestamps_in_another_time_zone_are_the_same_instants() -> None:
    schema = {"type": "long", "logicalType": "timestamp-micros"}
    values = pa.array([0, -1, 1_700_000_000_123_456], pa.timestamp("us", tz="America/New_York"))
    native, python = _both(schema, values)
    assert (
        native
        == python
        == [b"\x00\x00\x00\x00\x07" + v for v in (b"\x00", b"\x01", _zigzag(1_700_000_000_123_456))]
    )


def _zigzag(n: int) -> bytes:
    z, out = (n << 1) ^ (n >> 63), bytearray()
    while z >= 0x80:
        out.append(z & 0x7F | 0x80)
        z >>= 7
    return bytes(out + bytes([z]))


def test_a_sliced_struct_and_list_encode_from_their_offsets() -> None:
    schema = _record(("xs", {"type": "array", "items": "int"}), ("s", "string"))
    rows = [{"xs": [i] * i, "s": str(i)} for i in range(6)]
    values = pa.array(rows, _arrow_type(schema)).slice(2, 3)
    native, python = _both(schema, values, None)
    assert native == python == [b"\x04" + b"\x04" * 2 + b"\x00\x022", *native[1:]]
    assert len(native) == 3


def _notes(error: BaseException) -> list[str]:
    return list(getattr(error, "__notes__", []))


def _noted(note: str) -> list[str]:
    """The note naming the row: Python 3.11 has exception notes; 3.10 raises the bare error."""
    return [note] if sys.version_info >= (3, 11) else []


def test_a_null_the_schema_does_not_allow_raises_fastavros_error_naming_the_row() -> None:
    schema = _record(("a", "string"))
    values = pa.array([{"a": "x"}, {"a": None}], _arrow_type(schema))
    encoder = AvroEncoder(json.dumps(schema), None)
    with pytest.raises(Exception) as c_error:
        encoder.encode(values)
    with pytest.raises(Exception) as python_error:
        encoder._encode_python(values, b"")
    assert type(c_error.value) is type(python_error.value)
    assert str(c_error.value) == str(python_error.value)
    assert _notes(c_error.value) == _noted(
        "to_avro: row 1 of this batch has a null where the schema has no null."
    )


def test_an_unknown_enum_symbol_raises_fastavros_error_naming_the_row() -> None:
    schema = {"type": "enum", "name": "E", "symbols": ["A", "B"]}
    values = pa.array(["A", "B", "C"])
    with pytest.raises(ValueError, match="'C' is not in list") as error:
        AvroEncoder(json.dumps(schema), 3).encode(values)
    assert _notes(error.value) == _noted(
        "to_avro: row 2 of this batch has a string that is not one of the enum's symbols."
    )


def test_what_the_c_encoder_stops_on_but_fastavro_writes_is_fastavros_bytes() -> None:
    # a duplicate map key: fastavro's path makes a dict of the pairs; the C code leaves it
    schema = {"type": "map", "values": "int"}
    values = pa.array([[("a", 1), ("a", 2)], [("b", 3)]], pa.map_(pa.string(), pa.int32()))
    compiled = avro_encode_native.program(schema, values.type)
    assert compiled is not None
    assert avro_encode_native.encode(values, compiled, b"").code == 6
    encoded = AvroEncoder(json.dumps(schema), None).encode(values)
    assert encoded.to_pylist() == [b"\x02\x02a\x04\x00", b"\x02\x02b\x06\x00"]


@pytest.mark.parametrize(
    ("schema", "arrow_type"),
    [
        ({"type": "int", "logicalType": "time-millis"}, pa.int32()),  # no Spark type
        (
            ["int", "string", "long"],
            pa.struct([("member0", pa.int32()), ("member1", pa.string()), ("member2", pa.int64())]),
        ),  # long after int
        ("int", pa.int64()),  # not spark-avro's column type
        ({"type": "long", "logicalType": "timestamp-micros"}, pa.timestamp("us")),  # local time
        (_record(("a", "int"), ("b", "int")), pa.struct([("a", pa.int32())])),  # a default
    ],
)
def test_what_the_compiler_does_not_cover_is_left_to_fastavro(
    schema: Any, arrow_type: pa.DataType
) -> None:
    assert avro_encode_native.program(schema, arrow_type) is None


def test_the_environment_variable_turns_the_c_encoder_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_DIRECT_NATIVE_AVRO", "0")
    assert avro_encode_native.program("long", pa.int64()) is None
    assert avro_encode_native.status() == "fastavro: KAFKA_DIRECT_NATIVE_AVRO=0"
    values = pa.array([1, None, -1], pa.int64())
    assert AvroEncoder('"long"', None).encode(values).to_pylist() == [b"\x02", None, b"\x01"]


def test_a_date_python_cannot_hold_raises_as_today() -> None:
    values = pa.array([0, _DAYS[1] + 1], pa.date32())
    with pytest.raises(OverflowError, match="date value out of range") as error:
        AvroEncoder(json.dumps({"type": "int", "logicalType": "date"}), None).encode(values)
    assert _notes(error.value) == _noted(
        "to_avro: row 1 of this batch has a date or timestamp outside years 1 to 9999."
    )


def test_dates_become_python_dates_on_the_fastavro_path() -> None:
    # documents why the C code's dates are days since the epoch: fastavro's toordinal()
    values = pa.array([datetime.date(1969, 12, 31)], pa.date32())
    assert AvroEncoder('{"type":"int","logicalType":"date"}', None).encode(values).to_pylist() == [
        b"\x01"
    ]


def _not_utf8(rows: list[bytes]) -> pa.Array:
    """A Spark string column may hold any bytes (a binary cast to string)."""
    binary = pa.array(rows, pa.binary())
    return pa.Array.from_buffers(pa.string(), len(binary), binary.buffers())


@pytest.mark.parametrize(
    ("schema", "make"),
    [
        ("string", lambda rows: _not_utf8(rows)),
        (
            {"type": "map", "values": "int"},
            lambda rows: pa.MapArray.from_arrays(
                pa.array(range(0, len(rows) + 1), pa.int32()),
                _not_utf8(rows),
                pa.array(range(len(rows)), pa.int32()),
            ),
        ),
    ],
)
def test_strings_that_are_not_utf8_fail_as_on_the_fastavro_path(schema: Any, make: Any) -> None:
    for bad in (b"\xff", b"\xed\xa0\x80", b"\xc0\xaf", b"abcdefgh\xe2\x82"):
        values = make([b"ok", "√".encode(), bad])
        encoder = AvroEncoder(json.dumps(schema), None)
        assert _outcome(encoder.encode, values) == _outcome(
            lambda v, e=encoder: e._encode_python(v, b""), values
        )
        with pytest.raises(UnicodeDecodeError) as error:
            encoder.encode(values)
        assert _notes(error.value) == _noted(
            "to_avro: row 2 of this batch has a string that is not UTF-8."
        )
    good = make([b"ok", "√".encode(), "12345678\U0001f600".encode()])
    native, python = _both(schema, good, None)
    assert native == python


def test_a_large_map_is_checked_for_duplicate_keys_too() -> None:
    schema = {"type": "map", "values": "long"}
    pairs = [(f"k{i}", i) for i in range(100)]
    values = pa.array([pairs, [*pairs, ("k7", -1)]], pa.map_(pa.string(), pa.int64()))
    compiled = avro_encode_native.program(schema, values.type)
    assert compiled is not None
    assert avro_encode_native.encode(values.slice(0, 1), compiled, b"").array is not None
    assert avro_encode_native.encode(values, compiled, b"").code == 6
    encoder = AvroEncoder(json.dumps(schema), None)
    assert encoder.encode(values).equals(encoder._encode_python(values, b""))


@pytest.mark.parametrize(
    ("schema", "values"),
    [
        ("int", pa.array([-128, 127, None, 0], pa.int8())),  # Spark's byte
        ("long", pa.array([-32768, 32767, 5], pa.int16())),  # Spark's short
        (["null", "long"], pa.array([None, -(2**31), 2**31 - 1], pa.int32())),
        ({"type": "string", "logicalType": "uuid"}, pa.array(["not-a-uuid", ""])),  # as written
        (["null", {"type": "string", "logicalType": "uuid"}], pa.array(["x", None])),
        ("bytes", pa.array([b"", b"\x00" * 300], pa.large_binary())),
        ("string", pa.array(["", "ü" * 100], pa.large_string())),
    ],
)
def test_narrower_and_large_column_types_encode_to_fastavros_bytes(
    schema: Any, values: pa.Array
) -> None:
    native, python = _both(schema, values)
    assert native == python


@settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.sampled_from(["string", {"type": "array", "items": "int"}, _record(("a", "long"))]),
    st.lists(st.integers(-(2**31), 2**31 - 1), min_size=0, max_size=6),
    st.binary(max_size=24),
    st.binary(max_size=2),
    st.integers(0, 6),
    st.integers(0, 6),
)
def test_malformed_arrow_buffers_never_make_the_c_code_read_outside_them(
    schema: Any, offsets: list[int], data: bytes, validity: bytes, length: int, offset: int
) -> None:
    """Buffers as the C function gets them, but wrong: offsets pointing anywhere, buffers
    shorter than the lengths say. The C code must stop or refuse (a crash here kills the test
    run), never read outside the buffers."""
    from kafka_direct.schema_registry import _avro_encode  # type: ignore[attr-defined]

    arrow_type = {"string": pa.string()}.get(schema) if isinstance(schema, str) else None
    if arrow_type is None:
        arrow_type = (
            pa.list_(pa.int32()) if schema["type"] == "array" else pa.struct([("a", pa.int64())])
        )
    compiled = avro_encode_native.program(schema, arrow_type)
    assert compiled is not None
    packed = b"".join(o.to_bytes(4, "little", signed=True) for o in offsets)
    bitmap = validity or None
    columns = [
        (bitmap, packed, data, offset, length) if i == 0 else (None, data, None, 0, len(data) // 4)
        for i in range(len(compiled.paths))
    ]
    if schema != "string" and schema["type"] == "record":
        columns = [(bitmap, None, None, offset, length), (None, data, None, offset, length)]
    try:
        result = _avro_encode.encode(
            compiled.nodes, compiled.kids, compiled.consts, columns, b"", length
        )
    except ValueError as exc:  # refused before reading: a bitmap shorter than its array
        assert "validity bitmap" in str(exc)
        return
    assert result[3] in (0, 7, 11), result
