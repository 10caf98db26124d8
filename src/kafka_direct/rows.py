"""The row schema and Arrow record batches built from Kafka messages. Runs in Spark executors
(Python workers); the schema DDL is also used on the driver.

The schema is Spark's Kafka source schema. Spark only checks a yielded batch's schema against
``to_arrow_schema(schema)`` on the first batch, so :data:`ARROW_SCHEMA` must equal it exactly (a
unit test pins that), and every batch uses it.

Speed matters here: one Python call per message field is unavoidable with confluent-kafka, so
everything else is columnar. Timestamps go int64 ms → ``timestamp[us, UTC]`` without Python
``datetime``; topic and partition are repeated scalars, not per-row values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["ARROW_SCHEMA", "ARROW_SCHEMA_WITH_HEADERS", "schema_ddl", "to_record_batch"]

_BASE_FIELDS = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestampType", pa.int32()),
]
HEADER_TYPE = pa.list_(
    pa.field("element", pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
)
ARROW_SCHEMA = pa.schema(_BASE_FIELDS)
ARROW_SCHEMA_WITH_HEADERS = pa.schema([*_BASE_FIELDS, pa.field("headers", HEADER_TYPE)])

_DDL = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)


def schema_ddl(include_headers: bool) -> str:
    """Spark DDL of the source's rows (Spark's Kafka source schema)."""
    if include_headers:
        return _DDL + ", headers array<struct<key: string, value: binary>>"
    return _DDL


def to_record_batch(
    topic: str, partition: int, messages: Sequence[Any], include_headers: bool
) -> pa.RecordBatch:
    """One Arrow batch from confluent-kafka messages, all of ``topic``-``partition``.

    ``messages`` must hold data messages only (no error/EOF events).
    """
    n = len(messages)
    stamps = [m.timestamp() for m in messages]
    # librdkafka's timestamp types are NOT_AVAILABLE=0, CREATE_TIME=1, LOG_APPEND_TIME=2; Spark's
    # codes are -1, 0 and 1, i.e. exactly one less.
    ts_type = pc.subtract(pa.array([s[0] for s in stamps], pa.int32()), pa.scalar(1, pa.int32()))
    ts_us = pc.multiply(pa.array([s[1] for s in stamps], pa.int64()), pa.scalar(1000, pa.int64()))
    columns = [
        pa.array([m.key() for m in messages], pa.binary()),
        pa.array([m.value() for m in messages], pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array([m.offset() for m in messages], pa.int64()),
        ts_us.cast(pa.timestamp("us", tz="UTC")),
        ts_type,
    ]
    if not include_headers:
        return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)
    headers = [_headers(m.headers()) for m in messages]
    columns.append(pa.array(headers, HEADER_TYPE))
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA_WITH_HEADERS)


def _headers(raw: list[tuple[str, bytes | None]] | None) -> list[dict[str, Any]] | None:
    # Spark's KafkaRecordToRowConverter gives null, not an empty array, to a record without
    # headers.
    if not raw:
        return None
    return [{"key": k, "value": v} for k, v in raw]
