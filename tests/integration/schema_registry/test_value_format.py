"""The source's own decode (``valueFormat=avro`` and ``protobuf``) on the test broker, the real
registry and a real local Spark: the same values as ``from_avro`` / ``from_protobuf`` on the same
records, schema evolution, bad records (PERMISSIVE's corrupt-record column, FAILFAST's message
naming the offset), a stream restarted from its checkpoint, and no secret in errors."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from confluent_kafka import Producer
from pyspark.errors import PySparkException

from kafka_direct.functions import from_avro, from_protobuf
from kafka_direct.schema_registry.wire import header

from .test_avro import ORDER, _as_spark, _dead_address, _order
from .test_protobuf import _orders, _spark_value

V1 = {
    "type": "record",
    "name": "Click",
    "namespace": "web",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "page", "type": "string"},
        {"name": "gone", "type": "int"},
    ],
}
# v2 drops 'gone', widens nothing and adds two fields with defaults (BACKWARD compatible).
V2 = {
    "type": "record",
    "name": "Click",
    "namespace": "web",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "page", "type": "string"},
        {"name": "referrer", "type": ["null", "string"], "default": None},
        {"name": "weight", "type": "double", "default": 1.5},
    ],
}


def _produce(bootstrap: str, topic: str, values: list[bytes | None], partition: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in values:
        producer.produce(topic, value=value, partition=partition)
    assert producer.flush(30) == 0


def _avro(
    reader: Callable[..., Any], topic: str, registry_url: str, stream: bool = False, **options: str
) -> Any:
    return reader(
        stream,
        subscribe=topic,
        startingOffsets="earliest",
        valueFormat="avro",
        schemaRegistryAddress=registry_url,
        **options,
    ).load()


def test_the_source_decodes_exactly_what_from_avro_decodes(
    reader: Callable[..., Any],
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    registry_url: str,
    serialize: Callable[..., list[bytes]],
) -> None:
    topic = make_topic(partitions=2)
    records = [_order(i) for i in range(8)]
    blobs = serialize(topic, ORDER, records)
    _produce(kafka_bootstrap, topic, [*blobs[:4], None], partition=0)
    _produce(kafka_bootstrap, topic, blobs[4:], partition=1)

    decoded = _avro(reader, topic, registry_url)  # subject: '<topic>-value', by default
    assert decoded.columns == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType",
    ]  # fmt: skip
    rows = sorted(decoded.collect(), key=lambda r: (r.partition, r.offset))
    assert [(r.partition, r.offset) for r in rows] == [(0, o) for o in range(5)] + [
        (1, o) for o in range(4)
    ]
    by_record = [r.value for r in rows if r.value is not None]
    assert [v.asDict(recursive=True) for v in by_record] == [_as_spark(r) for r in records]
    assert rows[4].value is None  # a null value (a tombstone) is null, not a bad record

    # The column function on the same records gives the same rows and the same type.
    binary = reader(subscribe=topic, startingOffsets="earliest").load()
    by_function = binary.select(
        from_avro("value", subject=f"{topic}-value", schemaRegistryAddress=registry_url).alias(
            "value"
        ),
        "partition",
        "offset",
    )
    assert dict(by_function.dtypes)["value"] == dict(decoded.dtypes)["value"]
    assert sorted(by_function.collect(), key=lambda r: (r.partition, r.offset)) == [
        (r.value, r.partition, r.offset) for r in rows
    ]


def test_v1_and_v2_records_read_as_one_table_with_the_latest_schema(
    reader: Callable[..., Any],
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    registry_url: str,
    serialize: Callable[..., list[bytes]],
) -> None:
    topic = make_topic()
    old = serialize(topic, V1, [{"id": i, "page": f"/p{i}", "gone": 7} for i in range(3)])
    new = serialize(
        topic,
        V2,
        [
            {"id": 3, "page": "/p3", "referrer": "search", "weight": 2.0},
            {"id": 4, "page": "/p4", "referrer": None, "weight": 0.5},
        ],
    )
    _produce(kafka_bootstrap, topic, old + new)

    decoded = _avro(reader, topic, registry_url).select("value.*")
    assert decoded.columns == ["id", "page", "referrer", "weight"]
    assert sorted(tuple(r) for r in decoded.collect()) == [
        (0, "/p0", None, 1.5),
        (1, "/p1", None, 1.5),
        (2, "/p2", None, 1.5),
        (3, "/p3", "search", 2.0),
        (4, "/p4", None, 0.5),
    ]
    # Pinned to version 1 (v2 records resolve to it too: 'gone' has no default in v2, so they
    # cannot, and PERMISSIVE keeps them aside).
    pinned = _avro(reader, topic, registry_url, schemaVersion="1", mode="PERMISSIVE")
    rows = sorted(pinned.collect(), key=lambda r: r.offset)
    assert [None if r.value is None else tuple(r.value) for r in rows] == [
        (0, "/p0", 7),
        (1, "/p1", 7),
        (2, "/p2", 7),
        None,
        None,
    ]
    assert [r._corrupt_record for r in rows] == [None, None, None, new[0], new[1]]


def test_bad_records_are_kept_aside_or_named_by_topic_partition_and_offset(
    reader: Callable[..., Any],
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    registry_url: str,
    serialize: Callable[..., list[bytes]],
) -> None:
    topic = make_topic()
    good = serialize(topic, V1, [{"id": i, "page": "/", "gone": 0} for i in range(2)])
    not_framed = b'{"id": 1}'
    unknown_id = header(987_654) + good[0][5:]
    truncated = good[1][:7]
    _produce(kafka_bootstrap, topic, [good[0], not_framed, unknown_id, good[1], truncated])

    permissive = _avro(
        reader, topic, registry_url, mode="PERMISSIVE", columnNameOfCorruptRecord="bad"
    )
    assert permissive.columns[-1] == "bad"
    rows = sorted(permissive.collect(), key=lambda r: r.offset)
    assert [None if r.value is None else r.value.id for r in rows] == [0, None, None, 1, None]
    assert [r.bad for r in rows] == [None, not_framed, unknown_id, None, truncated]

    failfast = _avro(reader, topic, registry_url)
    with pytest.raises(PySparkException) as error:
        failfast.collect()
    message = str(error.value)
    assert f"the record at offset 1 in partition 0 of topic '{topic}'" in message
    assert "is not in the Confluent wire format: it starts with byte 0x7b" in message

    only_unknown = reader(
        subscribe=topic,
        startingOffsets=json.dumps({topic: {"0": 2}}),
        endingOffsets=json.dumps({topic: {"0": 3}}),
        valueFormat="avro",
        schemaRegistryAddress=registry_url,
    ).load()
    with pytest.raises(PySparkException, match="no schema with id 987654"):
        only_unknown.collect()

    # The reader schema given, the registry unreachable: load() needs no registry, the task
    # does, and fails naming the first record that needs the writer schema, in both modes.
    unreachable = reader(
        subscribe=topic,
        startingOffsets="earliest",
        valueFormat="avro",
        schemaRegistryAddress=_dead_address(),
        jsonFormatSchema=json.dumps(V1),
        mode="PERMISSIVE",
        **{"confluent.schema.registry.timeout.ms": "2000"},
    ).load()
    with pytest.raises(PySparkException) as down:
        unreachable.collect()
    schema_id = int.from_bytes(good[0][1:5], "big")
    message = str(down.value)
    assert "Could not reach the Schema Registry" in message
    assert f"schema with id {schema_id})" in message
    assert message.rstrip().endswith(
        f"It is the writer schema of the record at offset 0 in partition 0 of topic '{topic}'."
    )


def test_a_stream_restarted_from_its_checkpoint_decodes_every_record_once(
    spark: Any,
    reader: Callable[..., Any],
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    registry_url: str,
    serialize: Callable[..., list[bytes]],
    tmp_path: Path,
) -> None:
    topic = make_topic(partitions=2)
    clicks = [{"id": i, "page": f"/p{i}", "referrer": None, "weight": float(i)} for i in range(20)]
    blobs = serialize(topic, V2, clicks)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def run() -> None:
        stream = _avro(reader, topic, registry_url, stream=True)
        query = (
            stream.select("value.id", "value.page", "value.weight", "partition", "offset")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None

    for partition in (0, 1):
        _produce(kafka_bootstrap, topic, blobs[partition * 5 : partition * 5 + 5], partition)
    run()
    for partition in (0, 1):
        start = 10 + partition * 5
        _produce(kafka_bootstrap, topic, blobs[start : start + 5], partition)
    run()

    rows = spark.read.parquet(str(out)).collect()
    assert sorted((r.id, r.page, r.weight) for r in rows) == [
        (c["id"], c["page"], c["weight"]) for c in clicks
    ]
    assert sorted((r.partition, r.offset) for r in rows) == [
        (p, o) for p in (0, 1) for o in range(10)
    ]


def test_a_missing_subject_and_wrong_options_fail_at_load_without_secrets(
    reader: Callable[..., Any], make_topic: Callable[..., str], registry_url: str
) -> None:
    topic = make_topic()
    with pytest.raises(PySparkException, match=f"subject '{topic}-value'") as missing:
        _avro(
            reader,
            topic,
            registry_url,
            **{"confluent.schema.registry.basic.auth.user.info": "alice:S3CRET-pw"},
        )
    assert "S3CRET-pw" not in str(missing.value)
    assert "The option 'subject' defaults to '<topic>-value'" in str(missing.value)
    with pytest.raises(PySparkException, match="Invalid option 'subject': got 'x-value'"):
        reader(subscribe=topic, subject="x-value").load()
    with pytest.raises(
        PySparkException,
        match="Invalid option 'valueFormat': got 'avor', expected 'binary', 'avro' or 'protobuf'",
    ):
        reader(subscribe=topic, valueFormat="avor").load()


def test_protobuf_values_decode_as_from_protobuf_does_and_bad_ones_are_kept_aside(
    reader: Callable[..., Any],
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    registry_url: str,
    confluent: Any,
    order_pb2: ModuleType,
) -> None:
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic = make_topic()
    serializer = ProtobufSerializer(order_pb2.Order, confluent, {"use.deprecated.format": False})
    context = SerializationContext(topic, MessageField.VALUE)
    blobs = [serializer(order, context) for order in _orders(order_pb2)]
    garbage = blobs[0][:6] + b"\xff\xff\xff"
    _produce(kafka_bootstrap, topic, [*blobs[:2], garbage, *blobs[2:]])

    decoded = reader(
        subscribe=topic,
        startingOffsets="earliest",
        valueFormat="protobuf",
        schemaRegistryAddress=registry_url,
        messageName="Order",
        mode="PERMISSIVE",
    ).load()
    rows = sorted(decoded.collect(), key=lambda r: r.offset)
    assert [None if r.value is None else r.value.asDict(recursive=True) for r in rows] == [
        _spark_value(1), _spark_value(2), None, _spark_value(3), _spark_value(4),
    ]  # fmt: skip
    assert [r._corrupt_record for r in rows] == [None, None, garbage, None, None]

    options = {"schema.registry.subject": f"{topic}-value", "schema.registry.address": registry_url}
    by_function = (
        reader(subscribe=topic, startingOffsets="earliest")
        .load()
        .select(
            from_protobuf("value", "Order", options={**options, "mode": "PERMISSIVE"}).alias("v"),
            "offset",
        )
    )
    assert dict(by_function.dtypes)["v"] == dict(decoded.dtypes)["value"]
    assert sorted(by_function.collect(), key=lambda r: r.offset) == [
        (r.value, r.offset) for r in rows
    ]

    failfast = reader(
        subscribe=topic,
        startingOffsets="earliest",
        valueFormat="protobuf",
        schemaRegistryAddress=registry_url,
    ).load()
    with pytest.raises(PySparkException) as error:
        failfast.collect()
    assert f"The record at offset 2 in partition 0 of topic '{topic}' does not decode" in str(
        error.value
    )
