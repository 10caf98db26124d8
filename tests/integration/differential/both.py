"""Helpers of the differential suite: produce known data, read it through both formats, and
compare whole rows (key, value, topic, partition, offset, timestamp, timestampType, headers)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Producer

JVM = "kafka"
OURS = "kafka_direct"
#: An hour ago, to the second: records older than the broker's retention would be deleted.
BASE_TS_MS = (int(time.time()) - 3600) * 1000

Header = tuple[str, bytes | None]
Row = tuple[Any, ...]


@dataclass(frozen=True)
class Sent:
    """One record to produce, to an explicit partition."""

    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    timestamp_ms: int | None = None


def new_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def produce(bootstrap: str, topic: str, records: Iterable[Sent], **config: str) -> None:
    """Produce in order (idempotent, acks=all: offsets follow the order within a partition)."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": "true", "linger.ms": "5", **config}
    )
    errors: list[str] = []
    for r in records:
        producer.produce(
            topic,
            key=r.key,
            value=r.value,
            partition=r.partition,
            headers=list(r.headers) or None,
            timestamp=r.timestamp_ms or 0,
            on_delivery=lambda err, _msg: errors.append(str(err)) if err else None,
        )
        producer.poll(0)
    remaining = producer.flush(60)
    assert remaining == 0 and not errors, (remaining, errors[:3])


def varied(partition: int, count: int, tag: str) -> list[Sent]:
    """``count`` records for one partition with every shape the schema allows: null and empty
    keys and values, no headers, repeated header keys, null and empty header values."""
    out = []
    for i in range(count):
        key = None if i % 5 == 1 else (b"" if i % 5 == 2 else f"k{i}".encode())
        value = None if i % 4 == 3 else (b"" if i % 4 == 2 else f"{tag}|{partition}|{i}".encode())
        headers: tuple[Header, ...] = (
            ()
            if i % 3 == 0
            else (("h", b"x"), ("h", None))
            if i % 3 == 1
            else (("e", b""), ("h", f"{i}".encode()))
        )
        ts = BASE_TS_MS + partition * 1000 + i * 10
        out.append(Sent(partition, key, value, headers, ts))
    return out


def reader(
    spark: Any, fmt: str, bootstrap: str, options: Mapping[str, str], *, stream: bool = False
) -> Any:
    r = (spark.readStream if stream else spark.read).format(fmt)
    r = r.option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r


def to_rows(df: Any) -> list[Row]:
    """Whole rows as plain, sortable tuples (headers as tuples of (key, value))."""
    out = []
    has_headers = "headers" in df.columns
    for row in df.collect():
        values = [
            None if row.key is None else bytes(row.key),
            None if row.value is None else bytes(row.value),
            row.topic,
            row.partition,
            row.offset,
            row.timestamp,
            row.timestampType,
        ]
        if has_headers:
            headers = row.headers
            values.append(
                None
                if headers is None
                else tuple((h.key, None if h.value is None else bytes(h.value)) for h in headers)
            )
        out.append(tuple(values))
    return sorted(out, key=lambda r: (r[2], r[3], r[4]))


@dataclass
class Both:
    """What each format made of the same options."""

    jvm: list[Row]
    ours: list[Row]
    jvm_schema: str
    ours_schema: str
    jvm_partitions: int
    ours_partitions: int


def read_both(spark: Any, bootstrap: str, options: Mapping[str, str]) -> Both:
    jvm_df = reader(spark, JVM, bootstrap, options).load()
    ours_df = reader(spark, OURS, bootstrap, options).load()
    return Both(
        to_rows(jvm_df),
        to_rows(ours_df),
        jvm_df.schema.simpleString(),
        ours_df.schema.simpleString(),
        jvm_df.rdd.getNumPartitions(),
        ours_df.rdd.getNumPartitions(),
    )


def assert_same_rows(both: Both) -> None:
    assert both.ours_schema == both.jvm_schema
    if both.ours != both.jvm:
        only_jvm = [r for r in both.jvm if r not in both.ours][:5]
        only_ours = [r for r in both.ours if r not in both.jvm][:5]
        raise AssertionError(
            f"{len(both.jvm)} rows from format('kafka'), {len(both.ours)} from "
            f"format('kafka_direct'); only in kafka: {only_jvm}; only in kafka_direct: {only_ours}"
        )


def offsets_json(spec: Mapping[str, Mapping[int, int]]) -> str:
    return json.dumps({t: {str(p): o for p, o in parts.items()} for t, parts in spec.items()})


def assign_json(spec: Mapping[str, Sequence[int]]) -> str:
    return json.dumps({t: list(ps) for t, ps in spec.items()})


def error_of(action: Any) -> str | None:
    """None if ``action()`` succeeds, else the first line of its error."""
    try:
        action()
    except Exception as exc:  # noqa: BLE001 - any refusal counts; the message is reported
        lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
        # A Python source's error arrives as a traceback: its last "...Error: ..." line says it.
        said = [line for line in lines if "Error: " in line.split(" ", 1)[0] + " "]
        return (said[-1] if said else lines[0] if lines else exc.__class__.__name__)[:300]
    return None
