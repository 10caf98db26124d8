"""Unit tests for kafka_direct.producer.digest: the rows' fingerprint in an exactly-once marker.
No broker, no Spark."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import pyarrow as pa
import pytest
import xxhash

from kafka_direct.producer.columns import HEADERS_TYPE, plan_columns
from kafka_direct.producer.digest import (
    BLAKE2B_SCHEME,
    DIGEST_SCHEME,
    XXH3_SCHEME,
    RowDigest,
    computable,
    native_available,
    scheme_of,
    sum_rows,
    sum_rows_python,
)

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
FIELDS = [
    ("key", "binary"),
    ("value", "binary"),
    ("headers", HEADERS_TYPE),
    ("topic", "string"),
    ("partition", "int"),
]
ALL = plan_columns(FIELDS, None)
N = 60


def _batch(change: Callable[[dict[str, list[object]]], None] | None = None) -> pa.RecordBatch:
    rows: dict[str, list[object]] = {
        "key": [None if i % 7 == 0 else f"k{i % 5}".encode() for i in range(N)],
        "value": [None if i == 3 else f"v{i}".encode() for i in range(N)],
        "headers": [[{"key": "h", "value": b"x"}] if i % 3 else [] for i in range(N)],
        "topic": [f"t{i % 2}" for i in range(N)],
        "partition": [None if i % 4 == 0 else i % 2 for i in range(N)],
    }
    if change is not None:
        change(rows)
    types = [pa.binary(), pa.binary(), HEADERS, pa.string(), pa.int32()]
    arrays = [pa.array(rows[name], t) for (name, _), t in zip(FIELDS, types, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, names=[name for name, _ in FIELDS])


SCHEMES = [BLAKE2B_SCHEME, XXH3_SCHEME]


@pytest.fixture(params=SCHEMES)
def scheme(request: pytest.FixtureRequest) -> str:
    """Every test of the digest's properties runs on both schemes."""
    return str(request.param)


def _digest(*batches: pa.RecordBatch, columns: object = ALL, scheme: str | None = None) -> str:
    d = RowDigest(columns, scheme)  # type: ignore[arg-type]
    for batch in batches:
        d.update(batch)
    return d.hexdigest()


def test_the_digest_does_not_depend_on_how_the_rows_are_cut_into_batches(scheme: str) -> None:
    whole = _batch()
    cuts = [whole.slice(0, 7), whole.slice(7, 0), whole.slice(7, 40), whole.slice(47)]
    assert _digest(*cuts, scheme=scheme) == _digest(whole, scheme=scheme)
    large = pa.RecordBatch.from_arrays(
        [
            whole.column(0).cast(pa.large_binary()),
            whole.column(1).cast(pa.large_binary()),
            whole.column(2),
            whole.column(3).cast(pa.large_string()),
            whole.column(4),
        ],
        names=whole.schema.names,
    )  # Spark sends large types when spark.sql.execution.arrow.useLargeVarTypes is on
    assert _digest(large.slice(0, 30), large.slice(30), scheme=scheme) == _digest(
        whole, scheme=scheme
    )


def _set(column: str, row: int, value: object) -> Callable[[dict[str, list[object]]], None]:
    def change(rows: dict[str, list[object]]) -> None:
        rows[column][row] = value

    return change


def _swap(rows: dict[str, list[object]]) -> None:
    for column in rows.values():
        column[1], column[2] = column[2], column[1]


def _repeat(rows: dict[str, list[object]]) -> None:
    """Row 2 written twice and row 1 not: the same count, the same bytes in a column's total."""
    for column in rows.values():
        column[1] = column[2]


def _cross(rows: dict[str, list[object]]) -> None:
    """Two rows exchange their values but keep their keys."""
    rows["value"][1], rows["value"][2] = rows["value"][2], rows["value"][1]


# what changes; each must change the digest
CHANGES = [
    ("a value", _set("value", 5, b"v6")),
    ("a value that moves a byte to its neighbour", _set("value", 10, b"v1")),
    ("a null value made empty", _set("value", 3, b"")),
    ("a key", _set("key", 1, b"k9")),
    ("a null key made empty", _set("key", 0, b"")),
    ("a header value", _set("headers", 1, [{"key": "h", "value": b"y"}])),
    ("a header added", _set("headers", 0, [{"key": "h", "value": b"x"}])),
    ("a topic", _set("topic", 4, "t1")),
    ("a partition", _set("partition", 1, 0)),
    ("a null partition made 0", _set("partition", 0, 0)),
    ("one row written twice in place of another", _repeat),
    ("two rows' values exchanged", _cross),
]


@pytest.mark.parametrize(("what", "change"), CHANGES, ids=[c[0] for c in CHANGES])
def test_other_rows_give_another_digest(
    what: str, change: Callable[[dict[str, list[object]]], None], scheme: str
) -> None:
    assert _digest(_batch(change), scheme=scheme) != _digest(_batch(), scheme=scheme), what


def test_the_topic_option_counts_and_ignored_columns_do_not() -> None:
    values = pa.array([b"a", b"b"], pa.binary())
    batch = pa.RecordBatch.from_arrays([values, pa.array([1, 2])], names=["value", "other"])
    other = pa.RecordBatch.from_arrays([values, pa.array([3, 4])], names=["value", "other"])
    to_a = plan_columns([("value", "binary"), ("other", "bigint")], "a")
    to_b = plan_columns([("value", "binary"), ("other", "bigint")], "b")
    assert _digest(batch, columns=to_a) == _digest(other, columns=to_a)
    assert _digest(batch, columns=to_a) != _digest(batch, columns=to_b)
    d = RowDigest(to_a)
    d.update(batch)
    written, _, hexdigest = d.hexdigest().partition(":")
    assert d.rows == 2 and written == DIGEST_SCHEME and len(hexdigest) == 32


def test_the_digest_does_not_depend_on_the_order_of_the_rows(scheme: str) -> None:
    """A packed task reads its partitions as their fetches arrive, and a task after a shuffle
    reads map outputs as they come: a replay holds the same rows, maybe in another order."""
    whole = _batch()
    expected = _digest(whole, scheme=scheme)
    assert _digest(_batch(_swap), scheme=scheme) == expected
    backwards = whole.take(pa.array(list(range(N - 1, -1, -1))))
    assert _digest(backwards.slice(0, 25), backwards.slice(25), scheme=scheme) == expected
    assert _digest(whole.slice(30), whole.slice(0, 30), scheme=scheme) == expected


def test_the_schemes_name_themselves_and_differ() -> None:
    """A marker says which hash wrote it, so a replay checks it with that one; the C build
    writes the cheaper XXH3 scheme."""
    assert native_available(), "the C extension _row_digest is not built"
    assert DIGEST_SCHEME == XXH3_SCHEME
    blake, xxh3 = _digest(_batch(), scheme=BLAKE2B_SCHEME), _digest(_batch(), scheme=XXH3_SCHEME)
    assert scheme_of(blake) == BLAKE2B_SCHEME and scheme_of(xxh3) == XXH3_SCHEME
    assert blake.partition(":")[2] != xxh3.partition(":")[2]
    assert _digest(_batch()) == xxh3
    assert scheme_of(None) is None and scheme_of("0123abcd") is None
    assert computable(BLAKE2B_SCHEME) and computable(XXH3_SCHEME)
    assert not computable("rowsum9") and not computable(None)
    with pytest.raises(ValueError, match="rowsum9"):
        RowDigest(ALL, "rowsum9")


SUM_CASES = [
    ("binary", [pa.array([b"a", None, b"", b"x" * 300], pa.binary())]),
    (
        "large binary, sliced",
        [pa.array([b"q", b"r" * 129, None, b"s"], pa.large_binary()).slice(1)],
    ),
    ("a block's worth exactly", [pa.array([b"z" * 119, b"z" * 247], pa.binary())]),
    ("int64 with nulls", [pa.array([1, None, -7, 2**62], pa.int64())]),
    (
        "several columns, sliced",
        [
            pa.array([b"k1", None, b"k3"], pa.binary()).slice(1),
            pa.array([5, 6, None], pa.int64()).slice(1),
        ],
    ),
    ("no data buffer", [pa.array([b"", b""], pa.binary())]),
]


def _xxh3_reference(arrays: list[pa.Array]) -> int:
    """The XXH3 scheme with xxHash's own Python binding, row by row: the rows' encoding as in
    sum_rows_python, each hashed with XXH3-128 (seed 0), summed modulo 2^128."""
    total = 0
    for row in zip(*(a.to_pylist() for a in arrays), strict=True):
        encoded = b""
        for value in row:
            if value is None:
                encoded += b"\x00"
            elif isinstance(value, int):
                encoded += b"\x02" + value.to_bytes(8, "little", signed=True)
            else:
                encoded += b"\x01" + len(value).to_bytes(8, "little") + bytes(value)
        total += xxhash.xxh3_128_intdigest(encoded)
    return total % (1 << 128)


@pytest.mark.parametrize(("what", "arrays"), SUM_CASES, ids=[c[0] for c in SUM_CASES])
def test_the_c_sums_are_the_python_ones(what: str, arrays: list[pa.Array]) -> None:
    assert native_available(), "the C extension _row_digest is not built"
    assert sum_rows(arrays, BLAKE2B_SCHEME) == sum_rows_python(arrays), what
    assert sum_rows(arrays, XXH3_SCHEME) == _xxh3_reference(arrays), what


def test_the_xxh3_scheme_gathers_rows_longer_than_its_first_buffer() -> None:
    """The C code gathers a row's encoding in a buffer of 4 KiB that grows: rows of 1 MiB, and
    a short row after them, hash as xxHash hashes them."""
    arrays = [
        pa.array([b"k" * 5000, None, b"a"], pa.binary()),
        pa.array([b"v" * (1 << 20), b"w" * 4087, b""], pa.large_binary()),
    ]
    assert sum_rows(arrays, XXH3_SCHEME) == _xxh3_reference(arrays)


def test_sum_rows_python_is_blake2b_of_the_encoding() -> None:
    """The reference itself, by hand, for one row (so the C and Python cannot agree on a
    different function by accident)."""
    expected = hashlib.blake2b(
        b"\x01"
        + (2).to_bytes(8, "little")
        + b"ab"
        + b"\x00"
        + b"\x02"
        + (-1).to_bytes(8, "little", signed=True),
        digest_size=16,
    ).digest()
    arrays = [pa.array([b"ab"]), pa.array([None], pa.binary()), pa.array([-1], pa.int64())]
    assert sum_rows_python(arrays) == int.from_bytes(expected, "little")
    assert sum_rows(arrays, BLAKE2B_SCHEME) == int.from_bytes(expected, "little")
    encoded = b"\x01" + (2).to_bytes(8, "little") + b"ab" + b"\x00"
    encoded += b"\x02" + (-1).to_bytes(8, "little", signed=True)
    assert sum_rows(arrays, XXH3_SCHEME) == xxhash.xxh3_128_intdigest(encoded)


def test_headers_named_in_another_case_count_by_position_as_the_sink_writes_them(
    scheme: str,
) -> None:
    # array<struct<Key,VALUE>> is written by position; its digest must see the contents too,
    # or a replay with other headers would be skipped as if it were the same.
    upper = pa.list_(pa.struct([("Key", pa.string()), ("VALUE", pa.binary())]))
    columns = plan_columns(
        [("value", "binary"), ("headers", "array<struct<Key:string,VALUE:binary>>")], "t"
    )

    def batch(header_value: bytes) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays(
            [pa.array([b"v"]), pa.array([[("h", header_value)]], upper)],
            names=["value", "headers"],
        )

    same = _digest(batch(b"x"), columns=columns, scheme=scheme)
    assert same == _digest(batch(b"x"), columns=columns, scheme=scheme)
    assert same != _digest(batch(b"y"), columns=columns, scheme=scheme)
