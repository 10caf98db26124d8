"""The row schema and Arrow record batches built from Kafka messages. Runs in Spark executors
(Python workers); the schema DDL is also used on the driver.

The schema is Spark's Kafka source schema. Spark only checks a yielded batch's schema against
``to_arrow_schema(schema)`` on the first batch, so :data:`ARROW_SCHEMA` must equal it exactly (a
unit test pins that), and every batch uses it.

Speed matters here (``benchmarks/run.py`` measures it against a raw consumer). confluent-kafka
hands out one Python object per message, so one call per message and field is unavoidable;
everything else is columnar and done once per batch:

- each field is read with ``map`` over the message type's own method (no per-row Python frame);
- offsets are not read at all when they are contiguous (the common case): they only grow within
  a partition, so ``n`` messages spanning ``n`` offsets are exactly ``first .. first + n - 1``;
- timestamps go int64 ms → ``timestamp[us, UTC]`` without Python ``datetime``; the timestamp
  type, nearly always one per batch, becomes a repeated scalar;
- topic and partition are repeated scalars, not per-row values.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter
from typing import Any

import pyarrow as pa

from kafka_direct.errors import KafkaClientError

__all__ = [
    "ARROW_SCHEMA",
    "ARROW_SCHEMA_WITH_HEADERS",
    "HEADER_TYPE",
    "TIMESTAMP_US",
    "schema_ddl",
    "to_record_batch",
]

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

TIMESTAMP_US = pa.timestamp("us", tz="UTC")
_TYPE_OF = itemgetter(0)
_MILLIS_OF = itemgetter(1)
# No pyarrow scalars or arrays at import time, and pyarrow.compute only on first use: building
# either imports pandas, and this module is imported by every Spark process that loads the
# source (a streaming query starts a fresh one on the driver), where it would slow the start.


def schema_ddl(include_headers: bool) -> str:
    """Spark DDL of the source's rows (Spark's Kafka source schema)."""
    if include_headers:
        return _DDL + ", headers array<struct<key: string, value: binary>>"
    return _DDL


def to_record_batch(
    topic: str, partition: int, messages: Sequence[Any], include_headers: bool
) -> pa.RecordBatch:
    """One Arrow batch from confluent-kafka messages, all of ``topic``-``partition``.

    ``messages`` must hold data messages only (no error/EOF events), all of one type (as one
    consumer returns them), in the order the partition's consumer returned them, so that their
    offsets strictly increase.
    """
    n = len(messages)
    if n == 0:
        return pa.RecordBatch.from_pylist(
            [], schema=ARROW_SCHEMA_WITH_HEADERS if include_headers else ARROW_SCHEMA
        )
    import pyarrow.compute as pc

    # The unbound methods of the message type: map() calls them without a Python frame per row.
    cls = type(messages[0])
    stamps = list(map(cls.timestamp, messages))
    columns = [
        pa.array(list(map(cls.key, messages)), pa.binary()),
        pa.array(list(map(cls.value, messages)), pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        _offsets(messages, cls, n),
        pc.multiply(pa.array(list(map(_MILLIS_OF, stamps)), pa.int64()), 1000).cast(TIMESTAMP_US),
        _timestamp_types(stamps, n),
    ]
    if not include_headers:
        return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)
    headers = []
    for message in messages:
        try:
            row_headers = message.headers()
        except (SystemError, UnicodeDecodeError):
            # confluent-kafka builds a header key with PyUnicode_FromString and raises
            # SystemError on one that is not UTF-8 (Kafka does not check them); its raw bytes
            # are lost then, and asking the same message again can crash the process.
            raise _undecodable_header(topic, partition, message.offset()) from None
        headers.append(_headers(row_headers))
    columns.append(pa.array(headers, HEADER_TYPE))
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA_WITH_HEADERS)


def _undecodable_header(topic: str, partition: int, offset: int) -> KafkaClientError:
    """A record whose headers confluent-kafka could not read, and the way round it."""
    return KafkaClientError(
        f"Reading {topic}-{partition} failed: the record at offset {offset} has a header key "
        "that is not UTF-8, which confluent-kafka's messages cannot carry (a header key is a "
        "string in Spark's rows). Read it through the C fast path (option fastPath.enabled="
        "true, the default, with the extension built: it replaces such bytes with U+FFFD), or "
        "leave includeHeaders off.",
        code="_BAD_MSG",
    )


def _offsets(messages: Sequence[Any], cls: Any, n: int) -> pa.Array:
    import pyarrow.compute as pc

    first: int = messages[0].offset()
    if messages[-1].offset() - first == n - 1:
        # Strictly increasing and n offsets wide: exactly first .. first + n - 1, no gaps.
        ones = pa.repeat(pa.scalar(1, pa.int64()), n)
        return pc.add(pc.cumulative_sum(ones), pa.scalar(first - 1, pa.int64()))
    return pa.array(list(map(cls.offset, messages)), pa.int64())


def _timestamp_types(stamps: list[tuple[int, int]], n: int) -> pa.Array:
    # librdkafka's timestamp types are NOT_AVAILABLE=0, CREATE_TIME=1, LOG_APPEND_TIME=2; Spark's
    # codes are -1, 0 and 1, i.e. exactly one less.
    import pyarrow.compute as pc

    types = list(map(_TYPE_OF, stamps))
    first = types[0]
    if types.count(first) == n:
        return pa.repeat(pa.scalar(first - 1, pa.int32()), n)
    return pc.subtract(pa.array(types, pa.int32()), pa.scalar(1, pa.int32()))


def _headers(raw: list[tuple[str, bytes | None]] | None) -> list[dict[str, Any]] | None:
    # Spark's KafkaRecordToRowConverter gives null, not an empty array, to a record without
    # headers.
    if not raw:
        return None
    return [{"key": k, "value": v} for k, v in raw]
