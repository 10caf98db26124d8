"""Unit tests for kafka_direct.rows: the row schema and Arrow batches, no broker, no SparkSession.

Spark checks a yielded batch against ``to_arrow_schema(schema)`` (names only, first batch only), so
the Arrow schema is pinned to exactly what PySpark derives from Spark's Kafka source schema.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from kafka_direct.consumer.rows import (
    ARROW_SCHEMA,
    ARROW_SCHEMA_WITH_HEADERS,
    schema_ddl,
    to_record_batch,
)
from kafka_direct.errors import KafkaClientError

# Spark's KafkaRecordToRowConverter.kafkaSchema, field by field (all nullable, as in Spark).
SPARK_SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
)
SPARK_SCHEMA_WITH_HEADERS = StructType(
    [
        *SPARK_SCHEMA.fields,
        StructField(
            "headers",
            ArrayType(
                StructType([StructField("key", StringType()), StructField("value", BinaryType())])
            ),
        ),
    ]
)

# librdkafka's timestamp types.
NOT_AVAILABLE, CREATE_TIME, LOG_APPEND_TIME = 0, 1, 2
UTC = timezone.utc


@dataclass
class FakeMessage:
    """The part of confluent_kafka.Message that to_record_batch reads."""

    _offset: int
    _key: bytes | None = b"k"
    _value: bytes | None = b"v"
    _timestamp: tuple[int, int] = (CREATE_TIME, 1_700_000_000_000)
    _headers: list[tuple[str, bytes | None]] | None = None
    headers_calls: list[int] = field(default_factory=list)

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def offset(self) -> int:
        return self._offset

    def timestamp(self) -> tuple[int, int]:
        return self._timestamp

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        self.headers_calls.append(1)
        return self._headers


# --- schema ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arrow", "spark"),
    [
        pytest.param(ARROW_SCHEMA, SPARK_SCHEMA, id="without headers"),
        pytest.param(ARROW_SCHEMA_WITH_HEADERS, SPARK_SCHEMA_WITH_HEADERS, id="with headers"),
    ],
)
def test_arrow_schema_equals_pyspark_conversion(arrow: pa.Schema, spark: StructType) -> None:
    expected = to_arrow_schema(spark, timezone="UTC")
    assert arrow.equals(expected), f"\n{arrow}\n!=\n{expected}"
    assert arrow.equals(expected, check_metadata=True)


def test_headers_list_item_field_is_pysparks() -> None:
    # Schema.equals ignores a list's item field name (pyarrow's default is "item", PySpark builds
    # "element"), so the item field is compared on its own: name, nullability and type.
    ours = ARROW_SCHEMA_WITH_HEADERS.field("headers").type.value_field
    pysparks = to_arrow_schema(SPARK_SCHEMA_WITH_HEADERS, timezone="UTC").field("headers")
    expected = pysparks.type.value_field
    assert (ours.name, ours.nullable, ours.type) == (
        expected.name,
        expected.nullable,
        expected.type,
    )
    assert (ours.name, ours.nullable) == ("element", True)
    assert [(f.name, f.nullable) for f in ours.type] == [("key", True), ("value", True)]


def _ddl_fields(ddl: str) -> list[tuple[str, str]]:
    """Split a flat DDL at top-level commas into (name, Spark simpleString) pairs."""
    parts, depth, current = [], 0, ""
    for char in ddl:
        depth += {"<": 1, ">": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    fields = []
    for part in parts:
        name, type_text = part.strip().split(" ", 1)
        type_text = re.sub(r"\s+", "", type_text)
        fields.append((name, re.sub(r"\blong\b", "bigint", type_text)))
    return fields


@pytest.mark.parametrize(
    ("include_headers", "spark", "arrow"),
    [
        pytest.param(False, SPARK_SCHEMA, ARROW_SCHEMA, id="without headers"),
        pytest.param(True, SPARK_SCHEMA_WITH_HEADERS, ARROW_SCHEMA_WITH_HEADERS, id="headers"),
    ],
)
def test_schema_ddl_matches_the_spark_schema(
    include_headers: bool, spark: StructType, arrow: pa.Schema
) -> None:
    fields = _ddl_fields(schema_ddl(include_headers))
    assert fields == [(f.name, f.dataType.simpleString()) for f in spark.fields]
    assert [name for name, _ in fields] == arrow.names


def test_schema_ddl_literal() -> None:
    # Spark's Kafka source schema as a user would write it, so format("kafka") users recognise it.
    assert schema_ddl(False) == (
        "key binary, value binary, topic string, partition int, offset long, "
        "timestamp timestamp, timestampType int"
    )
    assert schema_ddl(True) == (
        schema_ddl(False) + ", headers array<struct<key: string, value: binary>>"
    )


# --- to_record_batch ------------------------------------------------------------------------------


def test_batch_exact_values() -> None:
    messages = [
        FakeMessage(7, b"k1", b"v1", (CREATE_TIME, 1_700_000_000_123)),
        FakeMessage(9, b"k2", b"", (LOG_APPEND_TIME, 1_700_000_000_456)),
    ]
    batch = to_record_batch("orders", 3, messages, include_headers=False)
    assert batch.schema.equals(ARROW_SCHEMA, check_metadata=True)
    assert batch.to_pydict() == {
        "key": [b"k1", b"k2"],
        "value": [b"v1", b""],
        "topic": ["orders", "orders"],
        "partition": [3, 3],
        "offset": [7, 9],
        "timestamp": [
            datetime(2023, 11, 14, 22, 13, 20, 123_000, tzinfo=UTC),
            datetime(2023, 11, 14, 22, 13, 20, 456_000, tzinfo=UTC),
        ],
        "timestampType": [0, 1],
    }


@pytest.mark.parametrize(
    ("librdkafka_type", "spark_type"),
    [
        pytest.param(NOT_AVAILABLE, -1, id="NOT_AVAILABLE -> -1"),
        pytest.param(CREATE_TIME, 0, id="CREATE_TIME -> 0"),
        pytest.param(LOG_APPEND_TIME, 1, id="LOG_APPEND_TIME -> 1"),
    ],
)
def test_timestamp_type_mapping(librdkafka_type: int, spark_type: int) -> None:
    batch = to_record_batch("t", 0, [FakeMessage(0, _timestamp=(librdkafka_type, 5))], False)
    assert batch.column("timestampType").type == pa.int32()
    assert batch.column("timestampType").to_pylist() == [spark_type]


def test_timestamp_types_mixed_in_one_batch() -> None:
    kinds = [LOG_APPEND_TIME, NOT_AVAILABLE, CREATE_TIME, LOG_APPEND_TIME]
    messages = [FakeMessage(i, _timestamp=(k, 1)) for i, k in enumerate(kinds)]
    batch = to_record_batch("t", 0, messages, False)
    assert batch.column("timestampType").to_pylist() == [1, -1, 0, 1]


@pytest.mark.parametrize(
    "millis",
    [
        pytest.param(0, id="epoch"),
        pytest.param(1, id="1 ms"),
        pytest.param(1_700_000_000_123, id="2023 with ms"),
        pytest.param(-1, id="librdkafka's -1 when NOT_AVAILABLE"),
        pytest.param(253_402_300_799_999, id="9999-12-31T23:59:59.999"),
    ],
)
def test_timestamp_millis_become_exact_utc_micros(millis: int) -> None:
    batch = to_record_batch("t", 0, [FakeMessage(0, _timestamp=(CREATE_TIME, millis))], False)
    column = batch.column("timestamp")
    assert column.type == pa.timestamp("us", tz="UTC")
    assert column.cast(pa.int64()).to_pylist() == [millis * 1000]
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    assert column.to_pylist() == [epoch + timedelta(milliseconds=millis)]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        pytest.param(None, b"v", id="null key"),
        pytest.param(b"k", None, id="null value (tombstone)"),
        pytest.param(None, None, id="both null"),
        pytest.param(b"", b"", id="empty bytes are not null"),
        pytest.param(b"\x00\xff", bytes(range(256)), id="arbitrary bytes"),
    ],
)
def test_keys_and_values(key: bytes | None, value: bytes | None) -> None:
    batch = to_record_batch("t", 0, [FakeMessage(0, key, value)], False)
    assert batch.column("key").to_pylist() == [key]
    assert batch.column("value").to_pylist() == [value]
    assert batch.column("key").null_count == (key is None)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(None, None, id="None -> null"),
        pytest.param([], None, id="[] -> null, as Spark"),
        pytest.param([("h", b"1")], [{"key": "h", "value": b"1"}], id="one header"),
        pytest.param(
            [("a", b"1"), ("b", None), ("a", b"")],
            [
                {"key": "a", "value": b"1"},
                {"key": "b", "value": None},
                {"key": "a", "value": b""},
            ],
            id="several, a None value, repeated key, order kept",
        ),
    ],
)
def test_headers(
    raw: list[tuple[str, bytes | None]] | None, expected: list[dict[str, object]] | None
) -> None:
    batch = to_record_batch("t", 0, [FakeMessage(0, _headers=raw)], include_headers=True)
    assert batch.schema.equals(ARROW_SCHEMA_WITH_HEADERS, check_metadata=True)
    assert batch.column("headers").to_pylist() == [expected]
    assert batch.column("headers").null_count == (expected is None)


def test_headers_per_row() -> None:
    messages = [
        FakeMessage(0, _headers=[("x", b"1")]),
        FakeMessage(1, _headers=None),
        FakeMessage(2, _headers=[]),
        FakeMessage(3, _headers=[("y", None), ("z", b"2")]),
    ]
    batch = to_record_batch("t", 0, messages, include_headers=True)
    assert batch.column("headers").to_pylist() == [
        [{"key": "x", "value": b"1"}],
        None,
        None,
        [{"key": "y", "value": None}, {"key": "z", "value": b"2"}],
    ]


@dataclass
class UndecodableHeaders(FakeMessage):
    """confluent-kafka's Message.headers() on a header key that is not UTF-8: SystemError."""

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        self.headers_calls.append(1)
        raise SystemError("<built-in method headers> returned a result with an exception set")


def test_a_header_key_confluent_kafka_cannot_decode_fails_naming_the_record_and_the_way_round() -> (
    None
):
    bad = UndecodableHeaders(11)
    with pytest.raises(KafkaClientError) as info:
        to_record_batch("t", 3, [FakeMessage(10, _headers=[]), bad], include_headers=True)
    message = str(info.value)
    assert "t-3" in message and "offset 11" in message and "fastPath.enabled" in message
    assert bad.headers_calls == [1]  # asked once: asking such a message again can crash


def test_headers_are_not_read_when_not_included() -> None:
    messages = [FakeMessage(0, _headers=[("h", b"1")])]
    batch = to_record_batch("t", 0, messages, include_headers=False)
    assert "headers" not in batch.schema.names
    assert messages[0].headers_calls == []


def test_topic_and_partition_repeat_for_every_row() -> None:
    messages = [FakeMessage(offset) for offset in range(100, 1100)]
    batch = to_record_batch("clicks", 2**31 - 1, messages, False)
    assert batch.num_rows == 1000
    assert batch.column("topic").to_pylist() == ["clicks"] * 1000
    assert batch.column("partition").to_pylist() == [2**31 - 1] * 1000
    assert batch.column("offset").to_pylist() == list(range(100, 1100))
    assert (batch.column("topic").null_count, batch.column("partition").null_count) == (0, 0)


def test_large_offsets_are_int64() -> None:
    batch = to_record_batch("t", 0, [FakeMessage(2**62)], False)
    assert batch.column("offset").type == pa.int64()
    assert batch.column("offset").to_pylist() == [2**62]


@pytest.mark.parametrize(
    ("include_headers", "schema"),
    [
        pytest.param(False, ARROW_SCHEMA, id="without headers"),
        pytest.param(True, ARROW_SCHEMA_WITH_HEADERS, id="with headers"),
    ],
)
def test_empty_batch_keeps_the_exact_schema(include_headers: bool, schema: pa.Schema) -> None:
    batch = to_record_batch("t", 0, [], include_headers)
    assert batch.num_rows == 0
    assert batch.schema.equals(schema, check_metadata=True)
    for column in batch.columns:
        assert len(column) == 0


@pytest.mark.parametrize("include_headers", [False, True], ids=["without headers", "headers"])
def test_every_column_type_is_the_schemas(include_headers: bool) -> None:
    # Spark checks names only; types must still be exact or Arrow→Spark conversion misreads them.
    schema = ARROW_SCHEMA_WITH_HEADERS if include_headers else ARROW_SCHEMA
    batch = to_record_batch("t", 0, [FakeMessage(0, _headers=[("h", b"")])], include_headers)
    assert [column.type for column in batch.columns] == [f.type for f in schema]
