"""from_avro / to_avro against a real Schema Registry and a real local Spark, checked against
confluent-kafka's own AvroSerializer / AvroDeserializer: exact values, exact bytes, evolution,
and the message of each bad input."""

from __future__ import annotations

import datetime
import decimal
import io
import json
import socket
import uuid
from collections.abc import Callable
from typing import Any

import fastavro
import pytest
from pyspark.errors import PythonException
from pyspark.sql.functions import col

from kafka_direct.functions import from_avro, to_avro
from kafka_direct.schema_registry.errors import SchemaNotFoundError, SchemaRegistryError
from kafka_direct.schema_registry.wire import header

UTC = datetime.timezone.utc

ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "paid", "type": "boolean"},
        {"name": "weight", "type": "float"},
        {"name": "ratio", "type": "double"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "counts", "type": {"type": "map", "values": ["null", "long"]}},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["NEW", "OLD"]}},
        {
            "name": "price",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
        },
        {"name": "at_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "at_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "blob", "type": "bytes"},
        {"name": "code", "type": {"type": "fixed", "name": "Code", "size": 2}},
        {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "either", "type": ["null", "int", "string"], "default": None},
        {
            "name": "address",
            "type": {
                "type": "record",
                "name": "Address",
                "fields": [
                    {"name": "city", "type": "string"},
                    {"name": "zip", "type": ["null", "int"], "default": None},
                ],
            },
        },
        {"name": "lines", "type": {"type": "array", "items": "Address"}},
    ],
}


def _order(i: int) -> dict[str, Any]:
    return {
        "id": 10_000_000_000 + i,
        "paid": i % 2 == 0,
        "weight": 0.5 * i,
        "ratio": 1.0 / (i + 1),
        "tags": [f"t{j}" for j in range(i)],
        "counts": {"a": i, "b": None},
        "note": None if i % 2 else f"note {i}",
        "kind": "NEW" if i % 2 else "OLD",
        "price": decimal.Decimal("12.34") * i,
        "at_ms": datetime.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=UTC),
        "at_us": datetime.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC),
        "local": datetime.datetime(2023, 1, 2, 3, 4, 5, 6),
        "day": datetime.date(2020, 2, 29),
        "blob": bytes([i, 255, 0]),
        "code": bytes([65 + i, 66]),
        "ref": uuid.UUID(int=i),
        "either": [None, i, f"s{i}"][i % 3],
        "address": {"city": f"city {i}", "zip": None if i % 2 else 1000 + i},
        "lines": [{"city": "x", "zip": j} for j in range(i % 3)],
    }


def _as_spark(record: dict[str, Any]) -> dict[str, Any]:
    """What Spark gives back for one record: timestamps naive in the session's UTC, the uuid a
    string, the multi-branch union a struct of members (spark-avro's mapping)."""
    either = record["either"]
    return {
        **record,
        "weight": pytest.approx(record["weight"]),
        "at_ms": record["at_ms"].replace(tzinfo=None),
        "at_us": record["at_us"].replace(tzinfo=None),
        "ref": str(record["ref"]),
        "either": None
        if either is None
        else {
            "member0": either if isinstance(either, int) else None,
            "member1": either if isinstance(either, str) else None,
        },
    }


def _frame(spark: Any, blobs: list[bytes | None]) -> Any:
    return spark.createDataFrame([(i, b) for i, b in enumerate(blobs)], "n int, value binary")


def _dead_address() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_records_from_confluents_serializer_decode_to_exact_spark_values(
    spark: Any, registry_url: str, topic_name: str, serialize: Callable[..., list[bytes]]
) -> None:
    records = [_order(i) for i in range(6)]
    blobs = serialize(topic_name, ORDER, records)
    decoded = _frame(spark, [*blobs, None]).select(
        "n",
        from_avro("value", subject=f"{topic_name}-value", schemaRegistryAddress=registry_url).alias(
            "order"
        ),
    )
    order_type = dict(decoded.dtypes)["order"]
    assert order_type.startswith("struct<id:bigint,paid:boolean,weight:float,ratio:double,")
    assert "price:decimal(10,2),at_ms:timestamp,at_us:timestamp,local:timestamp_ntz," in order_type
    assert "either:struct<member0:int,member1:string>" in order_type
    rows = sorted(decoded.collect(), key=lambda r: r.n)
    assert len(rows) == 7
    assert [r.order.asDict(recursive=True) for r in rows[:6]] == [_as_spark(r) for r in records]
    assert rows[6].order is None


def test_to_avro_writes_the_bytes_confluents_serializer_writes(
    spark: Any,
    registry_url: str,
    topic_name: str,
    serialize: Callable[..., list[bytes]],
    deserialize: Callable[..., list[Any]],
) -> None:
    records = [_order(i) for i in range(6)]
    blobs = serialize(topic_name, ORDER, records)
    subject = f"{topic_name}-value"
    round_trip = (
        _frame(spark, blobs)
        .select(
            "n", from_avro("value", subject=subject, schemaRegistryAddress=registry_url).alias("o")
        )
        .select(
            "n", to_avro(col("o"), subject=subject, schemaRegistryAddress=registry_url).alias("v")
        )
    )
    rows = sorted(round_trip.collect(), key=lambda r: r.n)
    written = [bytes(r.v) for r in rows]
    assert written == blobs
    assert deserialize(topic_name, written) == records


def test_a_v1_and_v2_topic_reads_with_v2_and_old_records_get_the_added_defaults(
    spark: Any, registry_url: str, topic_name: str, serialize: Callable[..., list[bytes]]
) -> None:
    v1 = {
        "type": "record",
        "name": "User",
        "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}],
    }
    v2 = {
        **v1,
        "fields": [
            *v1["fields"],
            {"name": "email", "type": ["null", "string"], "default": None},
            {"name": "score", "type": "int", "default": 7},
        ],
    }
    blobs = serialize(topic_name, v1, [{"id": 1, "name": "ann"}, {"id": 2, "name": "bob"}])
    blobs += serialize(
        topic_name,
        v2,
        [
            {"id": 3, "name": "cy", "email": "c@x", "score": 1},
            {"id": 4, "name": "di", "email": None, "score": 2},
        ],
    )
    assert blobs[0][1:5] != blobs[2][1:5]  # two writer schema ids in one topic
    subject = f"{topic_name}-value"
    frame = _frame(spark, blobs)

    latest = frame.select(
        "n", from_avro("value", subject=subject, schemaRegistryAddress=registry_url).alias("u")
    )
    assert [r.u.asDict() for r in sorted(latest.collect(), key=lambda r: r.n)] == [
        {"id": 1, "name": "ann", "email": None, "score": 7},
        {"id": 2, "name": "bob", "email": None, "score": 7},
        {"id": 3, "name": "cy", "email": "c@x", "score": 1},
        {"id": 4, "name": "di", "email": None, "score": 2},
    ]
    first = frame.select(
        "n",
        from_avro(
            "value",
            options={"schemaVersion": "1"},
            subject=subject,
            schemaRegistryAddress=registry_url,
        ).alias("u"),
    )
    assert [r.u.asDict() for r in sorted(first.collect(), key=lambda r: r.n)] == [
        {"id": 1, "name": "ann"},
        {"id": 2, "name": "bob"},
        {"id": 3, "name": "cy"},
        {"id": 4, "name": "di"},
    ]
    # The reader schema may also be given as jsonFormatSchema (v2 here).
    given = frame.select(
        "n",
        from_avro("value", json.dumps(v2), schemaRegistryAddress=registry_url).alias("u"),
    )
    assert [r.u.score for r in sorted(given.collect(), key=lambda r: r.n)] == [7, 7, 1, 2]


SIMPLE = {"type": "record", "name": "S", "fields": [{"name": "x", "type": "int"}]}


def _simple_frame(spark: Any, topic: str, serialize: Callable[..., list[bytes]], bad: bytes) -> Any:
    good = serialize(topic, SIMPLE, [{"x": 1}, {"x": 3}])
    return _frame(spark, [good[0], bad, good[1]])


@pytest.mark.parametrize(
    ("bad", "phrases"),
    [
        (
            b'{"x": 2}',
            [
                "of this batch in Spark partition",
                "is not in the Confluent wire format",
                "starts with byte 0x7b",
                "first bytes: 7b 22 78 22 3a 20 32 7d",
            ],
        ),
        (b"\x00\x00", ["is 2 byte(s) long"]),
        (header(987654) + b"\x04", ["has no schema with id 987654", "/schemas/ids/987654"]),
    ],
    ids=["no-magic-byte", "too-short", "unknown-id"],
)
def test_a_bad_record_fails_the_query_in_failfast_and_is_null_in_permissive(
    spark: Any,
    registry_url: str,
    topic_name: str,
    serialize: Callable[..., list[bytes]],
    bad: bytes,
    phrases: list[str],
) -> None:
    frame = _simple_frame(spark, topic_name, serialize, bad)
    subject = f"{topic_name}-value"
    failing = frame.select(from_avro("value", subject=subject, schemaRegistryAddress=registry_url))
    with pytest.raises(PythonException) as info:
        failing.collect()
    for phrase in phrases:
        assert phrase in str(info.value)
    permissive = frame.select(
        "n",
        from_avro(
            "value",
            options={"mode": "PERMISSIVE"},
            subject=subject,
            schemaRegistryAddress=registry_url,
        ).alias("s"),
    )
    rows = sorted(permissive.collect(), key=lambda r: r.n)
    assert [None if r.s is None else r.s.x for r in rows] == [1, None, 3]


def test_a_payload_that_does_not_match_its_schema_names_the_schema_id(
    spark: Any, registry_url: str, topic_name: str, serialize: Callable[..., list[bytes]]
) -> None:
    good = serialize(topic_name, SIMPLE, [{"x": 1}])[0]
    schema_id = int.from_bytes(good[1:5], "big")
    frame = _frame(spark, [good + b"\x02\x02"])
    failing = frame.select(
        from_avro("value", subject=f"{topic_name}-value", schemaRegistryAddress=registry_url)
    )
    with pytest.raises(PythonException) as info:
        failing.collect()
    assert f"has 2 byte(s) left over after its Avro record (schema id {schema_id})" in str(
        info.value
    )


def test_an_unreachable_registry_fails_at_planning_with_the_address_and_subject() -> None:
    address = _dead_address()
    with pytest.raises(SchemaRegistryError) as info:
        from_avro(
            "value",
            subject="orders-value",
            schemaRegistryAddress=address.replace("http://", "http://alice:hunter2@"),
            options={"confluent.schema.registry.timeout.ms": "2000"},
        )
    message = str(info.value)
    assert f"Could not reach the Schema Registry at {address}" in message
    assert "version latest of subject 'orders-value'" in message
    assert "hunter2" not in message and "alice" not in message


def test_an_unreachable_registry_in_a_task_names_the_schema_id(spark: Any) -> None:
    frame = _frame(spark, [header(4242) + b"\x02"])
    failing = frame.select(
        from_avro(
            "value",
            json.dumps(SIMPLE),
            {"confluent.schema.registry.bearer.auth.token": "tok-secret"},
            schemaRegistryAddress=_dead_address(),
        )
    )
    with pytest.raises(PythonException) as info:
        failing.collect()
    message = str(info.value)
    assert "Could not reach the Schema Registry" in message
    assert "GET /schemas/ids/4242, schema with id 4242" in message
    assert "tok-secret" not in message


def test_a_missing_subject_is_refused_at_planning(registry_url: str) -> None:
    with pytest.raises(SchemaNotFoundError, match="no version latest of subject 'no-such-subject'"):
        from_avro("value", subject="no-such-subject", schemaRegistryAddress=registry_url)


@pytest.mark.parametrize(
    ("strategy", "subject_of"),
    [
        ("topic", lambda topic: f"{topic}-value"),
        ("record", lambda topic: "shop.Order"),
        ("topic-record", lambda topic: f"{topic}-shop.Order"),
    ],
)
def test_to_avro_registers_under_the_subject_name_strategys_subject(
    spark: Any,
    registry_url: str,
    topic_name: str,
    confluent: Any,
    deserialize: Callable[..., list[Any]],
    strategy: str,
    subject_of: Callable[[str], str],
) -> None:
    records = [_order(i) for i in range(3)]
    blobs_schema = json.dumps(ORDER)
    source = spark.createDataFrame([(i,) for i in range(3)], "n int")
    # Build the structs through from_avro of bare Avro, so every Spark type is exercised.
    bare = []
    for record in records:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, fastavro.parse_schema(ORDER), record)
        bare.append(out.getvalue())
    structs = _frame(spark, bare).select("n", from_avro("value", blobs_schema).alias("o"))
    written = structs.select(
        "n",
        to_avro(
            "o",
            blobs_schema,
            schemaRegistryAddress=registry_url,
            options={"subjectNameStrategy": strategy, "topic": topic_name},
        ).alias("v"),
    )
    blobs = [bytes(r.v) for r in sorted(written.collect(), key=lambda r: r.n)]
    assert source.count() == 3
    latest = confluent.get_latest_version(subject_of(topic_name))
    assert {int.from_bytes(b[1:5], "big") for b in blobs} == {latest.schema_id}
    assert deserialize(topic_name, blobs) == records


def test_bare_avro_without_a_registry_round_trips_with_fastavro(spark: Any) -> None:
    records = [_order(i) for i in range(4)]
    parsed = fastavro.parse_schema(ORDER)
    bare = []
    for record in records:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, record)
        bare.append(out.getvalue())
    frame = _frame(spark, bare).select("n", from_avro("value", json.dumps(ORDER)).alias("o"))
    again = frame.select("n", to_avro("o", json.dumps(ORDER)).alias("v"))
    assert [bytes(r.v) for r in sorted(again.collect(), key=lambda r: r.n)] == bare
