"""The source's value decode (kafka_direct.source.value_decode) on Arrow batches shaped as the
consumer fills them: bare Avro (no registry), no broker, no Spark session. The Spark schema,
the corrupt-record column and the message naming a bad record's offset."""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import pyarrow as pa
import pytest

from kafka_direct.config.value_format import ValueFormat
from kafka_direct.consumer.rows import ARROW_SCHEMA
from kafka_direct.errors import ConfigurationError
from kafka_direct.schema_registry.errors import WireFormatError
from kafka_direct.source.value_decode import row_schema, value_decode

SCHEMA = {
    "type": "record",
    "name": "Reading",
    "fields": [
        {"name": "sensor", "type": "string"},
        {"name": "celsius", "type": "double"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
    ],
}


def _avro(record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(SCHEMA), record)
    return out.getvalue()


def _batch(values: list[bytes | None], first_offset: int = 40) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_arrays(
        [
            pa.nulls(n, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array(["sensors"] * n),
            pa.array([3] * n, pa.int32()),
            pa.array(range(first_offset, first_offset + n), pa.int64()),
            pa.array([0] * n, pa.timestamp("us", tz="UTC")),
            pa.array([0] * n, pa.int32()),
        ],
        schema=ARROW_SCHEMA,
    )


def _decode(mode: str, corrupt: str | None = None) -> Any:
    return value_decode(
        ValueFormat(
            "avro", json_format_schema=json.dumps(SCHEMA), options={"mode": mode},
            corrupt_column=corrupt,
        )
    )  # fmt: skip


def test_binary_needs_no_decode_and_keeps_sparks_kafka_schema() -> None:
    assert value_decode(ValueFormat("binary")) is None
    schema = row_schema(include_headers=True, decode=None)
    assert schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>>"
    )


def test_the_value_column_becomes_the_reader_schemas_struct() -> None:
    decode = _decode("FAILFAST")
    schema = row_schema(include_headers=False, decode=decode)
    assert schema["value"].dataType.simpleString() == (
        "struct<sensor:string,celsius:double,tags:array<string>>"
    )
    good = [{"sensor": "a", "celsius": 21.5, "tags": ["x"]}, {"sensor": "b", "celsius": -3.0,
            "tags": []}]  # fmt: skip
    batch = decode.apply(_batch([_avro(good[0]), None, _avro(good[1])]))
    assert batch.schema.names == ARROW_SCHEMA.names
    assert batch.column(1).to_pylist() == [good[0], None, good[1]]
    assert batch.column(4).to_pylist() == [40, 41, 42]  # the other columns are untouched


def test_permissive_keeps_the_bytes_of_bad_values_aside() -> None:
    decode = _decode("PERMISSIVE", corrupt="_corrupt_record")
    assert row_schema(False, decode).fieldNames()[-1] == "_corrupt_record"
    good = _avro({"sensor": "a", "celsius": 1.0, "tags": []})
    truncated, left_over = good[:3], good + b"\x00"
    batch = decode.apply(_batch([good, truncated, None, left_over]))
    assert batch.schema.names[-1] == "_corrupt_record"
    assert batch.column(1).to_pylist() == [
        {"sensor": "a", "celsius": 1.0, "tags": []}, None, None, None,
    ]  # fmt: skip
    assert batch.column(7).to_pylist() == [None, truncated, None, left_over]
    clean = decode.apply(_batch([good]))
    assert clean.column(7).to_pylist() == [None]


def test_failfast_names_the_topic_partition_and_offset_of_the_bad_record() -> None:
    good = _avro({"sensor": "a", "celsius": 1.0, "tags": []})
    with pytest.raises(WireFormatError) as info:
        _decode("FAILFAST").apply(_batch([good, good, good[:3]], first_offset=100))
    message = str(info.value)
    assert message.startswith(
        "The record at offset 102 in partition 3 of topic 'sensors' does not decode with "
        "jsonFormatSchema"
    )
    assert "Use mode 'PERMISSIVE'" in message


def test_an_unknown_decode_option_is_named_with_the_sources_option_list() -> None:
    # Issue: the message read "one of the the source's valueFormat 'avro' options".
    with pytest.raises(ConfigurationError) as info:
        value_decode(
            ValueFormat("avro", json_format_schema=json.dumps(SCHEMA), options={"modee": "x"})
        )
    message = str(info.value)
    assert "the the" not in message
    assert "expected one of the source's valueFormat 'avro' options: " in message
