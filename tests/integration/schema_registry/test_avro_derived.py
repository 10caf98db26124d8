"""to_avro without jsonFormatSchema into a subject that has no schema yet: the schema is derived
from the column's Spark type as spark-avro derives it, registered, and what is written reads back
with confluent-kafka's own AvroDeserializer. Real registry, real local Spark."""

from __future__ import annotations

import datetime
import decimal
import json
from collections.abc import Callable
from typing import Any

from pyspark.sql.functions import col, struct

from kafka_direct.functions import from_avro, to_avro

UTC = datetime.timezone.utc


def test_to_avro_derives_registers_and_confluent_reads_it_back(
    spark: Any,
    registry_url: str,
    topic_name: str,
    confluent: Any,
    deserialize: Callable[..., list[Any]],
) -> None:
    rows = [
        (
            1,
            "a",
            None,
            decimal.Decimal("12.34"),
            datetime.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC),
            datetime.date(2020, 2, 29),
            [1, None],
            {"k": 0.5},
            (True, b"\x00\xff"),
        ),
        (2, "b", 7, decimal.Decimal("-0.01"), None, None, [], {}, None),
    ]
    frame = spark.createDataFrame(
        rows,
        "n long, s string, i int, d decimal(10,2), at timestamp, day date, xs array<int>, "
        "m map<string,double>, inner struct<flag:boolean, blob:binary>",
    )
    subject = f"{topic_name}-value"
    written = frame.select(
        "n",
        to_avro(
            struct(*[col(c) for c in frame.columns]),
            subject=subject,
            schemaRegistryAddress=registry_url,
        ).alias("v"),
    )
    blobs = [bytes(r.v) for r in sorted(written.collect(), key=lambda r: r.n)]

    registered = confluent.get_latest_version(subject)
    schema = json.loads(registered.schema.schema_str)
    assert schema["name"] == "topLevelRecord"
    assert [f["name"] for f in schema["fields"]] == frame.columns
    assert schema["fields"][0]["type"] == ["long", "null"]  # createDataFrame: all nullable
    assert {int.from_bytes(b[1:5], "big") for b in blobs} == {registered.schema_id}
    assert deserialize(topic_name, blobs) == [
        {
            "n": 1,
            "s": "a",
            "i": None,
            "d": decimal.Decimal("12.34"),
            "at": datetime.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC),
            "day": datetime.date(2020, 2, 29),
            "xs": [1, None],
            "m": {"k": 0.5},
            "inner": {"flag": True, "blob": b"\x00\xff"},
        },
        {
            "n": 2,
            "s": "b",
            "i": 7,
            "d": decimal.Decimal("-0.01"),
            "at": None,
            "day": None,
            "xs": [],
            "m": {},
            "inner": None,
        },
    ]
    # ... and kafka_direct's from_avro reads it back to the same rows.
    back = (
        spark.createDataFrame([(i, b) for i, b in enumerate(blobs)], "k int, value binary")
        .select(
            "k", from_avro("value", subject=subject, schemaRegistryAddress=registry_url).alias("o")
        )
        .orderBy("k")
        .select("o.*")
    )
    assert [tuple(r) for r in back.collect()] == [
        tuple(r)[0:] for r in frame.orderBy("n").collect()
    ]
