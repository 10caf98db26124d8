"""Unit tests for kafka_direct.producer.digest: the rows' fingerprint in an exactly-once marker.
No broker, no Spark."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import pyarrow as pa
import pytest

from kafka_direct.producer.columns import HEADERS_TYPE, plan_columns
from kafka_direct.producer.digest import (
    DIGEST_SCHEME,
    RowDigest,
    native_available,
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


def _digest(*batches: pa.RecordBatch, columns: object = ALL) -> str:
    d = RowDigest(columns)  # type: ignore[arg-type]
    for batch in batches:
        d.update(batch)
    return d.hexdigest()


def test_the_digest_does_not_depend_on_how_the_rows_are_cut_into_batches() -> None:
    whole = _batch()
    cuts = [whole.slice(0, 7), whole.slice(7, 0), whole.slice(7, 40), whole.slice(47)]
    assert _digest(*cuts) == _digest(whole)
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
    assert _digest(large.slice(0, 30), large.slice(30)) == _digest(whole)


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
    what: str, change: Callable[[dict[str, list[object]]], None]
) -> None:
    assert _digest(_batch(change)) != _digest(_batch()), what


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
    scheme, _, hexdigest = d.hexdigest().partition(":")
    assert d.rows == 2 and scheme == DIGEST_SCHEME and len(hexdigest) == 32


def test_the_digest_does_not_depend_on_the_order_of_the_rows() -> None:
    """A packed task reads its partitions as their fetches arrive, and a task after a shuffle
    reads map outputs as they come: a replay holds the same rows, maybe in another order."""
    whole = _batch()
    assert _digest(_batch(_swap)) == _digest(whole)
    backwards = whole.take(pa.array(list(range(N - 1, -1, -1))))
    assert _digest(backwards.slice(0, 25), backwards.slice(25)) == _digest(whole)
    assert _digest(whole.slice(30), whole.slice(0, 30)) == _digest(whole)


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


@pytest.mark.parametrize(("what", "arrays"), SUM_CASES, ids=[c[0] for c in SUM_CASES])
def test_the_c_sums_are_the_python_ones(what: str, arrays: list[pa.Array]) -> None:
    assert native_available(), "the C extension _row_digest is not built"
    assert sum_rows(arrays) == sum_rows_python(arrays), what


def test_sum_rows_python_is_blake2b_of_the_encoding() -> None:
    """The reference itself, by hand, for one row (so the C and Python cannot agree on a
    different function by accident)."""
    expected = hashlib.blake2b(
        b"\x01" + (2).to_bytes(8, "little") + b"ab"
        + b"\x00"
        + b"\x02" + (-1).to_bytes(8, "little", signed=True),
        digest_size=16,
    ).digest()
    arrays = [pa.array([b"ab"]), pa.array([None], pa.binary()), pa.array([-1], pa.int64())]
    assert sum_rows_python(arrays) == int.from_bytes(expected, "little")
    assert sum_rows(arrays) == int.from_bytes(expected, "little")
