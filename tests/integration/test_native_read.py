"""The C fast path (``kafka_direct.consumer.native``) against the pure-Python read, on the real
broker.

Every case reads the same offset ranges with ``fetch_range`` over a ``NativeConsumer`` and over
a ``confluent_kafka.Consumer``, both built from the executors' own config
(``settings.executor_consumer_config``). Both reads must give the records produced (keys,
values, offsets, partitions, topic, timestamps, timestampType) in the exact Arrow schema, or
fail the same way. A read that stalls fails with ``FetchTimeoutError`` instead of passing.

The fast path must be available here: without the extension these tests fail rather than
quietly compare the Python path with itself.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, Producer

from kafka_direct.config.clients import executor_consumer_config
from kafka_direct.consumer import native
from kafka_direct.consumer.fetch import PartitionConsumer, fetch_range
from kafka_direct.consumer.native import NativeConsumer
from kafka_direct.consumer.pool import PoolKey
from kafka_direct.consumer.read import _new_consumer
from kafka_direct.consumer.rows import ARROW_SCHEMA, ARROW_SCHEMA_WITH_HEADERS
from kafka_direct.errors import DataLossError, FetchTimeoutError, KafkaClientError
from kafka_direct.kafka.events import ClientEvents
from kafka_direct.offsets import OffsetRange
from tests.integration.kafka_helpers import (
    Record,
    create_topic,
    delete_topic,
    produce_known,
    tansu_log_end_workaround,
)

# Timing-sensitive or CPU-heavy: runs alone, after the parallel part (scripts/test.sh).
pytestmark = pytest.mark.serial

PATHS = ("native", "python")
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
BASE_TS_MS = 1_700_000_000_000
POLL_MS = 5_000  # far above a correct read; a range that waits for data that never comes fails

Row = tuple[int, bytes | None, bytes | None]  # partition, key, value
KEYS = [b"k", None, b"", b"key-with-more-bytes", None, b"", b"x", None, b"", b"y"]
VALUES = [b"v", b"", None, None, b"", b"value\x00with-nul", None, b"z", b"", None]


def _counting(base: type) -> Any:
    """``base`` recording the offsets it is assigned at, in ``assigned``."""

    class Counting(base):  # type: ignore[misc, valid-type]
        def assign(self, partitions: list[Any]) -> None:
            vars(self).setdefault("assigned", []).append(partitions[0].offset)
            super().assign(partitions)

    return Counting


CountingNative, CountingConsumer = _counting(NativeConsumer), _counting(Consumer)


def config(bootstrap: str, isolation: str = "read_uncommitted") -> dict[str, str]:
    group, user = f"native-test-{uuid.uuid4().hex[:8]}", {"bootstrap.servers": bootstrap}
    return executor_consumer_config(user, group_id=group, isolation_level=isolation)


def open_pc(path: str, bootstrap: str, isolation: str = "read_uncommitted") -> PartitionConsumer:
    events = ClientEvents(f"test consumer ({path})")
    conf = config(bootstrap, isolation)
    if path == "native":
        return PartitionConsumer(CountingNative(conf, events), events)
    return PartitionConsumer(CountingConsumer({**conf, "error_cb": events}), events)


def read(
    pc: PartitionConsumer, rng: OffsetRange, batch_size: int = 1000, **kw: Any
) -> tuple[pa.Table, Exception | None]:
    """What the read yielded, as one table, and the error it ended with (or ``None``)."""
    out: list[pa.RecordBatch] = []
    error = None
    kw = {"poll_timeout_ms": POLL_MS, "fail_on_data_loss": True, "include_headers": False, **kw}
    try:
        for batch in fetch_range(pc, rng, batch_size=batch_size, **kw):
            out.append(batch)  # one by one: keep what came before an error
    except Exception as exc:  # noqa: BLE001 - the test compares it between the paths
        error = exc
    for batch in out:
        assert batch.schema == ARROW_SCHEMA  # exactly, every batch: Spark checks the first
        assert batch.num_rows <= batch_size
    return pa.Table.from_batches(out, schema=ARROW_SCHEMA), error


def read_fresh(path: str, bootstrap: str, rng: OffsetRange, **kw: Any) -> tuple[pa.Table, Any]:
    pc = open_pc(path, bootstrap, kw.pop("isolation", "read_uncommitted"))
    try:
        return read(pc, rng, **kw)
    finally:
        pc.close()


def read_both(bootstrap: str, rng: OffsetRange, **kw: Any) -> dict[str, pa.Table]:
    """``rng`` read completely on each path by a fresh consumer; the tables are equal."""
    tables = {}
    for path in PATHS:
        tables[path], error = read_fresh(path, bootstrap, rng, **kw)
        assert error is None, f"{path}: {error!r}"
    assert tables["native"].equals(tables["python"])
    return tables


def rows_of(records: Sequence[Record], rng: OffsetRange | None = None) -> list[dict[str, Any]]:
    """The rows a read of ``rng`` must give (all of ``records`` without one)."""

    def row(r: Record) -> dict[str, Any]:
        ts = EPOCH + timedelta(milliseconds=r.timestamp_ms)
        values = (r.key, r.value, r.topic, r.partition, r.offset, ts, 0)  # 0: CreateTime
        return dict(zip(ARROW_SCHEMA.names, values, strict=True))

    return [
        row(r)
        for r in records
        if rng is None
        or (r.partition == rng.partition and rng.from_offset <= r.offset < rng.until_offset)
    ]


def produce(
    bootstrap: str, topic: str, rows: Sequence[Row], transactions: Sequence[int] = ()
) -> list[Record]:
    """Produce ``rows`` in order with distinct timestamps; return them with their offsets (the
    keys and values sent, not what delivery reports echo).

    Plain: on the embedded Tansu broker each partition's last record is flushed on its own (its
    log end is off by a batch, docs/brokers.md). With ``transactions``: one committed
    transaction per size, on partition 0; each commit appends a control marker, which takes an
    offset.
    """
    tx = {"transactional.id": f"tx-{uuid.uuid4().hex[:8]}"} if transactions else {}
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": "5", **tx})
    out: list[Record] = []

    def send(i: int) -> None:
        p, key, value = rows[i]
        ts = BASE_TS_MS + 1000 * i + 7

        def report(err: Any, msg: Any) -> None:
            assert err is None, err
            out.append(Record(topic, msg.partition(), msg.offset(), key, value, ts))

        producer.produce(topic, value, key, p, on_delivery=report, timestamp=ts)

    if transactions:
        producer.init_transactions(30)
        done = 0
        for size in transactions:
            producer.begin_transaction()
            for i in range(done, done + size):
                send(i)
            producer.commit_transaction(30)
            done += size
    elif not tansu_log_end_workaround():
        for i in range(len(rows)):
            send(i)
    else:
        last = {p: i for i, (p, _, _) in enumerate(rows)}
        for final in (False, True):
            for i in (i for i, (p, _, _) in enumerate(rows) if (last[p] == i) == final):
                send(i)
            producer.flush(30)
    producer.flush(30)
    assert len(out) == len(rows)
    return sorted(out, key=lambda r: (r.partition, r.offset))


def _key(*, fast_path: bool) -> PoolKey:
    """The pool key that chooses the read path (the factory builds what the key says)."""
    return PoolKey("g-executor", "t", 0, "fingerprint", fast_path=fast_path)


def test_the_fast_path_is_available_and_used_by_the_executor(kafka_bootstrap):
    # Fails, never skips: without the extension this suite would compare Python with Python.
    assert native.available(), native.status()
    assert native.status().startswith("fast path (librdkafka ")
    conf = config(kafka_bootstrap)
    fast = _new_consumer(_key(fast_path=True), conf)
    plain = _new_consumer(_key(fast_path=False), conf)
    try:
        assert isinstance(fast.consumer, NativeConsumer)
        assert type(plain.consumer) is Consumer
    finally:
        fast.close()
        plain.close()


#: id -> (records per partition, partition, from, until, arrowBatchSize); 2 partitions.
PLAIN = {
    "whole": (60, 0, 0, 60, 1000),
    "middle": (60, 1, 10, 45, 1000),
    "first-only": (60, 0, 0, 1, 1000),
    "one-in-the-middle": (60, 1, 30, 31, 1000),
    "last-only": (60, 1, 59, 60, 1000),
    "several-batches": (60, 0, 3, 58, 7),
    "one-row-batches": (60, 1, 0, 60, 1),
    "longer-than-the-extension-s-4096-chunks": (10_000, 1, 5, 9_990, 20_000),
    "long-in-several-batches": (10_000, 0, 0, 10_000, 3_000),
}


@pytest.mark.parametrize(
    ("count", "partition", "frm", "until", "batch"), PLAIN.values(), ids=PLAIN.keys()
)
def test_plain_ranges_read_the_same_on_both_paths(
    make_topic, kafka_bootstrap, count, partition, frm, until, batch
):
    # Headers too, which neither read asks for: the fast path must skip them like Python does.
    topic = make_topic(partitions=2, prefix="native-plain")
    produced = produce_known(kafka_bootstrap, topic, count, partitions=2, headers=True)
    rng = OffsetRange(topic, partition, frm, until)

    tables = read_both(kafka_bootstrap, rng, batch_size=batch)

    assert tables["native"].to_pylist() == rows_of(produced, rng)
    assert len(rows_of(produced, rng)) == until - frm
    for t in tables.values():  # several batches when the range is longer than one
        assert t.column(0).num_chunks >= -(-(until - frm) // batch)


def test_large_values_and_every_byte_value(make_topic, kafka_bootstrap):
    topic = make_topic(prefix="native-large")
    sizes = [0, 1, 255, 256, 4096, 65_537, 300_000, 3, 150_000, 0, 77, 299_999]
    blob = bytes(range(256)) * (300_000 // 256 + 1)
    rows = [(0, blob[i : i + i * 7], blob[i : i + size]) for i, size in enumerate(sizes)]
    produced = produce(kafka_bootstrap, topic, rows)
    for batch_size in (1000, 5):
        tables = read_both(
            kafka_bootstrap, OffsetRange(topic, 0, 0, len(rows)), batch_size=batch_size
        )
        assert tables["native"].to_pylist() == rows_of(produced)
        assert [len(v) for v in tables["native"].column("value").to_pylist()] == sizes


@pytest.mark.parametrize(
    ("frm", "until", "batch_size"),
    [(0, 30, 1000), (0, 30, 3), (5, 22, 4), (1, 2, 1000)],
    ids=["whole", "three-row-batches", "bitmaps-across-bytes", "one-row-null-key-and-value"],
)
def test_null_and_empty_keys_and_values_stay_distinct(
    make_topic, kafka_bootstrap, frm, until, batch_size
):
    topic = make_topic(prefix="native-nulls")
    rows = [(0, KEYS[i % 10], VALUES[(i * 3) % 10]) for i in range(30)]
    produced = produce(kafka_bootstrap, topic, rows)
    rng = OffsetRange(topic, 0, frm, until)

    tables = read_both(kafka_bootstrap, rng, batch_size=batch_size)

    expected = rows_of(produced, rng)
    assert tables["native"].to_pylist() == expected
    for column in ("key", "value"):
        if until - frm > 1:  # the premise: the range has null and empty ones
            assert {None, b""} <= {r[column] for r in expected}
        nulls = sum(r[column] is None for r in expected)
        assert nulls > 0
        for t in tables.values():
            assert t.column(column).null_count == nulls


@pytest.fixture()
def tx_topic(make_topic: Callable[..., str], kafka_bootstrap: str) -> tuple[str, list[Record]]:
    """Two committed transactions: data 0..4, marker 5, data 6..8, marker 9 (the log end)."""
    topic = make_topic(prefix="native-tx")
    rows = [(0, None if i % 4 == 1 else b"t%d" % i, b"tx-%d" % i) for i in range(8)]
    records = produce(kafka_bootstrap, topic, rows, transactions=[5, 3])
    assert [r.offset for r in records] == [0, 1, 2, 3, 4, 6, 7, 8]
    return topic, records


#: id -> (from, until) over data 0..4, marker 5, data 6..8, marker 9: SPARK-25005's shapes.
GAPS = {
    "only-marker": (5, 6),
    "first-is-marker": (5, 9),
    "last-is-marker-at-log-end": (6, 10),
    "last-is-marker-before-data": (0, 6),
    "gap-in-the-middle": (0, 10),
    "only-the-final-marker": (9, 10),
    "ends-before-the-final-marker": (0, 9),
}


@pytest.mark.parametrize(("frm", "until"), GAPS.values(), ids=GAPS.keys())
@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_spark_25005_marker_gaps_read_the_same_without_waiting_for_more(
    kafka_bootstrap, tx_topic, frm, until, isolation
):
    topic, records = tx_topic
    rng = OffsetRange(topic, 0, frm, until)
    for path in PATHS:
        # A range ending on a marker that waited for more data would raise FetchTimeoutError.
        got, error = read_fresh(path, kafka_bootstrap, rng, isolation=isolation)
        assert error is None, f"{path}: {error!r}"
        assert got.to_pylist() == rows_of(records, rng), path


def read_in_turn(
    path: str, bootstrap: str, topic: str, spans: list[tuple[int, int]], **kw: Any
) -> tuple[list[Any], list[Any]]:
    """``spans`` of partition 0 read one after the other by one consumer, as a pooled one reads
    them: the rows of each, and the offsets the consumer had been assigned at after each."""
    pc = open_pc(path, bootstrap)
    rows, assigned = [], []
    try:
        for frm, until in spans:
            got, error = read(pc, OffsetRange(topic, 0, frm, until), **kw)
            assert error is None, f"{path} [{frm}, {until}): {error!r}"
            rows.append(got.to_pylist())
            assigned.append(list(pc.consumer.assigned))  # type: ignore[union-attr]
    finally:
        pc.close()
    return rows, assigned


def test_one_pooled_consumer_over_consecutive_marker_ranges(kafka_bootstrap, tx_topic):
    """A pooled consumer remembers the log end it reached: after [0, 9) its queue stands at
    10, so the next range [9, 10) (only the final marker) must not wait for a new EOF."""
    topic, records = tx_topic
    spans = [(0, 3), (3, 6), (6, 9), (9, 10), (0, 10), (5, 6), (2, 9), (9, 10)]
    expected = [rows_of(records, OffsetRange(topic, 0, f, u)) for f, u in spans]
    for path in PATHS:
        assert read_in_turn(path, kafka_bootstrap, topic, spans)[0] == expected, path


def test_queue_reuse_skip_ahead_and_reassign_behind(make_topic, kafka_bootstrap):
    topic = make_topic(prefix="native-reuse")
    produced = produce_known(kafka_bootstrap, topic, per_partition=120)
    spans = [(0, 20), (20, 45), (45, 46), (46, 80), (85, 100), (10, 30), (30, 120)]
    expected = [rows_of(produced, OffsetRange(topic, 0, f, u)) for f, u in spans]
    # One assign while each range starts where the queue stands, or a little ahead (85 after
    # 80: read forward through the queue); another when a range starts behind it (10).
    assigned = [[0]] * 5 + [[0, 10]] * 2
    for path in PATHS:
        got = read_in_turn(path, kafka_bootstrap, topic, spans, batch_size=16)
        assert got == (expected, assigned), path


@pytest.mark.parametrize("fail_on_data_loss", [True, False], ids=["fail", "skip"])
def test_data_loss_after_the_topic_was_recreated(make_topic, kafka_bootstrap, fail_on_data_loss):
    # BROKER.md: DeleteRecords is not implemented, so the log shrinks by recreating the topic.
    topic = make_topic(prefix="native-loss")
    produce_known(kafka_bootstrap, topic, per_partition=10)
    delete_topic(kafka_bootstrap, topic)
    create_topic(kafka_bootstrap, topic, partitions=1)
    new = produce_known(kafka_bootstrap, topic, per_partition=3, start_index=100)
    for frm in (0, 1, 5):
        rng = OffsetRange(topic, 0, frm, 10)
        outcome = {}
        for path in PATHS:
            kw = {"poll_timeout_ms": 3000, "fail_on_data_loss": fail_on_data_loss}
            got, error = read_fresh(path, kafka_bootstrap, rng, **kw)
            outcome[path] = (got.to_pylist(), type(error), str(error))
        assert outcome["native"] == outcome["python"], rng
        if frm < 3:  # the log now ends at 3: the range runs into its end
            rows, error_type, message = outcome["native"]
            assert rows == rows_of(new, rng)
            if fail_on_data_loss:
                assert error_type is DataLossError
                assert f"Data loss on {topic}-0" in message and "failOnDataLoss" in message
            else:
                assert error_type is type(None)
        # From 5, past the new log end, Kafka answers OFFSET_OUT_OF_RANGE (data loss or skip);
        # the embedded broker answers an empty fetch and both paths time out. Either way, alike.


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("case", ["unreachable-broker", "missing-partition"])
def test_timeouts_name_the_cause_the_client_reported(make_topic, kafka_bootstrap, case):
    if case == "unreachable-broker":
        bootstrap, rng = f"127.0.0.1:{_closed_port()}", OffsetRange("nowhere", 0, 0, 10)
        causes = ["Connection refused", "'kafka.bootstrap.servers'", "(_TRANSPORT)"]
    else:
        bootstrap, rng = kafka_bootstrap, OffsetRange(make_topic(prefix="native-np"), 3, 0, 10)
        causes = ["Unknown partition", "(_UNKNOWN_PARTITION)"]
    for path in PATHS:
        got, error = read_fresh(path, bootstrap, rng, poll_timeout_ms=2500)
        assert got.num_rows == 0
        assert isinstance(error, FetchTimeoutError), f"{path}: {error!r}"
        assert error.code == "_TIMED_OUT"
        message = str(error)
        assert f"waiting for offset 0 of {rng.topic}-{rng.partition}" in message
        for cause in ["The consumer reported: ", *causes]:
            assert cause in message, f"{path}: {message}"


def test_an_unknown_librdkafka_property_is_refused_the_same_way(kafka_bootstrap):
    conf = {**config(kafka_bootstrap), "no.such.property": "1"}
    for fast_path in (True, False):
        with pytest.raises(KafkaClientError) as info:
            _new_consumer(_key(fast_path=fast_path), conf)
        assert info.value.code == "_INVALID_ARG"
        assert str(info.value).startswith("Creating a Kafka consumer on the executor: ")
        assert "no.such.property" in str(info.value)


HEADERS: list[list[tuple[str, bytes | None]] | None] = [
    None,  # no headers: a null list, as Spark gives
    [],  # an empty list is sent as none at all
    [("h", b"1")],
    [("a", b""), ("b", None), ("a", b"\x00\xff binary")],  # repeated key, null and empty values
    [("clé-ünïcode", b"v" * 300)],
]


def test_headers_read_the_same_on_both_paths(make_topic, kafka_bootstrap):
    topic = make_topic(prefix="native-headers")
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": "5"})
    count = 23
    for i in range(count):
        if i == count - 1 and tansu_log_end_workaround():
            producer.flush(30)  # the last record alone (Tansu's log end is off by a batch)
        producer.produce(topic, b"v%d" % i, b"k%d" % i, 0, headers=HEADERS[i % len(HEADERS)])
    producer.flush(30)

    tables = {}
    for path in PATHS:
        pc = open_pc(path, kafka_bootstrap)
        try:
            batches = list(
                fetch_range(
                    pc,
                    OffsetRange(topic, 0, 0, count),
                    poll_timeout_ms=POLL_MS,
                    fail_on_data_loss=True,
                    batch_size=4,
                    include_headers=True,
                )
            )
        finally:
            pc.close()
        assert all(b.schema == ARROW_SCHEMA_WITH_HEADERS for b in batches)
        tables[path] = pa.Table.from_batches(batches, schema=ARROW_SCHEMA_WITH_HEADERS)

    assert tables["native"].equals(tables["python"])
    expected = [
        None if not h else [{"key": k, "value": v} for k, v in h]
        for h in (HEADERS[i % len(HEADERS)] for i in range(count))
    ]
    assert tables["native"].column("headers").to_pylist() == expected
    assert tables["native"].column("value").to_pylist() == [b"v%d" % i for i in range(count)]
