"""Unit tests of kafka_direct.schema_registry.avro_derive: the Avro schema spark-avro's
``SchemaConverters.toAvroType`` derives for each Spark type (as its Arrow form)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from kafka_direct.errors import ConfigurationError
from kafka_direct.schema_registry.avro_derive import avro_schema_of, min_bytes_for_precision


@pytest.mark.parametrize(
    ("arrow_type", "nullable", "expected"),
    [
        (pa.bool_(), False, "boolean"),
        (pa.int8(), False, "int"),
        (pa.int16(), False, "int"),
        (pa.int32(), True, ["int", "null"]),
        (pa.int64(), False, "long"),
        (pa.float32(), False, "float"),
        (pa.float64(), False, "double"),
        (pa.string(), True, ["string", "null"]),
        (pa.binary(), False, "bytes"),
        (pa.null(), True, "null"),
        (pa.date32(), False, {"type": "int", "logicalType": "date"}),
        (pa.timestamp("us", tz="UTC"), False, {"type": "long", "logicalType": "timestamp-micros"}),
        (pa.timestamp("us"), False, {"type": "long", "logicalType": "local-timestamp-micros"}),
        (
            pa.list_(pa.field("element", pa.int64(), nullable=True)),
            False,
            {"type": "array", "items": ["long", "null"]},
        ),
        (
            pa.map_(pa.string(), pa.field("value", pa.float64(), nullable=False)),
            False,
            {"type": "map", "values": "double"},
        ),
        (
            pa.decimal128(10, 2),
            False,
            {
                "type": "fixed",
                "name": "topLevelRecord.fixed",
                "size": 5,
                "logicalType": "decimal",
                "precision": 10,
                "scale": 2,
            },
        ),
    ],
)
def test_each_spark_type_derives_as_spark_avro_derives_it(
    arrow_type: pa.DataType, nullable: bool, expected: Any
) -> None:
    assert avro_schema_of(arrow_type, nullable) == expected


def test_a_struct_is_topLevelRecord_and_nested_records_are_named_after_their_fields() -> None:
    arrow_type = pa.struct(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("price", pa.decimal128(38, 0), nullable=True),
            pa.field(
                "address",
                pa.struct([pa.field("city", pa.string()), pa.field("n", pa.decimal128(5, 1))]),
                nullable=True,
            ),
        ]
    )
    assert avro_schema_of(arrow_type) == {
        "type": "record",
        "name": "topLevelRecord",
        "fields": [
            {"name": "id", "type": "long"},
            {
                "name": "price",
                "type": [
                    {
                        "type": "fixed",
                        "name": "topLevelRecord.price.fixed",
                        "size": 16,
                        "logicalType": "decimal",
                        "precision": 38,
                        "scale": 0,
                    },
                    "null",
                ],
            },
            {
                "name": "address",
                "type": [
                    {
                        "type": "record",
                        "name": "address",
                        "namespace": "topLevelRecord",
                        "fields": [
                            {"name": "city", "type": ["string", "null"]},
                            {
                                "name": "n",
                                "type": [
                                    {
                                        "type": "fixed",
                                        "name": "topLevelRecord.address.n.fixed",
                                        "size": 3,
                                        "logicalType": "decimal",
                                        "precision": 5,
                                        "scale": 1,
                                    },
                                    "null",
                                ],
                            },
                        ],
                    },
                    "null",
                ],
            },
        ],
    }


@pytest.mark.parametrize(("precision", "size"), [(1, 1), (2, 1), (3, 2), (9, 4), (18, 8), (38, 16)])
def test_a_decimal_takes_the_fewest_bytes_that_hold_its_digits(precision: int, size: int) -> None:
    assert min_bytes_for_precision(precision) == size


def test_a_map_with_keys_that_are_not_strings_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="a map with string keys"):
        avro_schema_of(pa.map_(pa.int32(), pa.int32()))
