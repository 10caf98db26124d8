"""Unit tests for kafka_direct.producer.digest: the rows' fingerprint in an exactly-once marker.
No broker, no Spark."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pytest

from kafka_direct.producer.columns import HEADERS_TYPE, plan_columns
from kafka_direct.producer.digest import RowDigest

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
    ("two rows swapped", _swap),
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
    assert d.rows == 2 and len(d.hexdigest()) == 32
