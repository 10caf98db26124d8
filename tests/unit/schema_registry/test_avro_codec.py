"""Unit tests for kafka_direct.schema_registry.avro_codec on bare Avro (no registry, no Spark):
Arrow batches in and out, nulls, slices, and bad records in both modes."""

from __future__ import annotations

import io
import json

import fastavro
import pyarrow as pa
import pytest

from kafka_direct.schema_registry.avro_codec import AvroDecoder
from kafka_direct.schema_registry.avro_encoder import AvroEncoder
from kafka_direct.schema_registry.errors import WireFormatError

SCHEMA = {
    "type": "record",
    "name": "R",
    "fields": [
        {"name": "x", "type": "int"},
        {"name": "m", "type": {"type": "map", "values": "string"}},
        {"name": "u", "type": ["null", "int", "string"], "default": None},
    ],
}
ARROW = pa.struct(
    [
        pa.field("x", pa.int32(), nullable=False),
        pa.field("m", pa.map_(pa.string(), pa.string()), nullable=False),
        pa.field("u", pa.struct([("member0", pa.int32()), ("member1", pa.string())])),
    ]
)


def _bare(record: dict[str, object]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(SCHEMA), record)
    return out.getvalue()


RECORDS = [
    {"x": 1, "m": {"a": "b"}, "u": None},
    {"x": 2, "m": {}, "u": 5},
    {"x": 3, "m": {"k": "v", "l": "w"}, "u": "s"},
]


def test_a_batch_decodes_to_one_arrow_array_with_nulls_and_slices_kept() -> None:
    decoder = AvroDecoder(json.dumps(SCHEMA), ARROW, registry=None)
    values = pa.array([b"ignored", *(_bare(r) for r in RECORDS), None], pa.binary())[1:]
    decoded = decoder.decode(values)
    assert decoded.to_pylist() == [
        {"x": 1, "m": [("a", "b")], "u": None},
        {"x": 2, "m": [], "u": {"member0": 5, "member1": None}},
        {"x": 3, "m": [("k", "v"), ("l", "w")], "u": {"member0": None, "member1": "s"}},
        None,
    ]
    assert AvroEncoder(json.dumps(SCHEMA), None).encode(decoded).to_pylist() == [
        *(_bare(r) for r in RECORDS),
        None,
    ]


def test_a_record_that_does_not_decode_fails_in_failfast_and_is_null_in_permissive() -> None:
    values = pa.array([_bare(RECORDS[0]), b"\x02"], pa.binary())
    with pytest.raises(WireFormatError, match="Row 1 of this batch does not decode with"):
        AvroDecoder(json.dumps(SCHEMA), ARROW, registry=None).decode(values)
    permissive = AvroDecoder(json.dumps(SCHEMA), ARROW, registry=None, mode="PERMISSIVE")
    assert [v is None for v in permissive.decode(values).to_pylist()] == [False, True]
