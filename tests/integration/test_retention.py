"""Retention deleting segments under a running stream, on the session's Apache Kafka broker.

The topic holds 1 MiB segments (Kafka 4's smallest ``segment.bytes``) of 100 kB records. The
first 30 records carry CreateTimes in 2023, the last 5 the current time, so that a retention
time of an hour covers exactly the old segments; the roll at the first current record (its
timestamp is years after its segment's first) ends the last old segment there. The stream
reads a first batch of 5 records and is then held inside its batch function, between two
batches, while ``retention.ms`` is lowered on the live topic, as an operator would, and the
broker's retention check (every second in the test cluster) deletes the old segments: the
records the stream has not read yet are gone when it plans its next batch.

``failOnDataLoss=true`` fails the query (or the DStream) naming the partition and the offsets;
``false`` goes on from the new log start and delivers exactly the records still in the log.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from kafka_direct.dstream.kafka_utils import KafkaUtils
from kafka_direct.dstream.strategies import ConsumerStrategies, LocationStrategies
from kafka_direct.offsets import OffsetRange
from tests.integration.kafka_helpers import Record, new_topic_name
from tests.integration.streams import Collector, expected_keys, start, wait_for

OLD_TS_MS = 1_700_000_000_000
VALUE_BYTES = 100_000
READ_FIRST = 5  # records in the first batch, read before retention runs
OLD = 30  # records stamped in 2023: the first READ_FIRST of them, and 25 the stream has not read
NEW = 5  # records stamped now: retention keeps them
WAIT_S = 90.0


def _value(topic: str, i: int) -> bytes:
    head = f"{topic}|{i}|".encode()
    return head + bytes([i % 251]) * (VALUE_BYTES - len(head))


def _produce(bootstrap: str, topic: str) -> list[Record]:
    """OLD records stamped in 2023, then NEW stamped now, in order on partition 0."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": "5", "enable.idempotence": "true"}
    )
    delivered: list[Record] = []
    errors: list[str] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            delivered.append(
                Record(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(), 0)
            )

    now_ms = int(time.time() * 1000)
    for i in range(OLD + NEW):
        if i == OLD:
            # The old records' last batch ends here, so no segment holds both kinds.
            assert producer.flush(30) == 0
        ts = OLD_TS_MS + i if i < OLD else now_ms + i
        producer.produce(
            topic,
            _value(topic, i),
            key=f"k{i}".encode(),
            partition=0,
            timestamp=ts,
            on_delivery=report,
        )
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors, errors
    records = sorted(delivered, key=lambda r: r.offset)
    assert [r.offset for r in records] == list(range(OLD + NEW))
    return records


@pytest.fixture()
def retention_topic(
    kafka_bootstrap: str, make_topic: Callable[..., str]
) -> tuple[str, list[Record]]:
    topic = make_topic(
        prefix="retention",
        config={
            "cleanup.policy": "delete",
            "segment.bytes": "1048576",
            "retention.ms": "-1",  # no time retention until the stream has read its first batch
        },
    )
    return topic, _produce(kafka_bootstrap, topic)


def _log_start(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": new_topic_name("wm")})
    try:
        low, _high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return int(low)
    finally:
        consumer.close()


def _age_out_the_old_segments(bootstrap: str, topic: str) -> int:
    """Lower retention.ms to an hour on the live topic; wait until the broker's retention check
    has moved the log start; return it."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        start_offset = _log_start(bootstrap, topic)
        if start_offset > READ_FIRST:
            # Whole segments go, those of old records only, all in one retention check: the
            # first record stamped now began a segment (see the module docstring).
            assert start_offset == OLD, start_offset
            return start_offset
        time.sleep(0.2)
    raise AssertionError(f"retention did not delete the old segments of {topic} in {WAIT_S} s")


class _HeldCollector(Collector):
    """A Collector whose first batch, once its rows are kept, waits for ``release``: the query
    is running, between its first and second batch."""

    def __init__(self) -> None:
        super().__init__()
        self.held = threading.Event()
        self.release = threading.Event()

    def __call__(self, df: Any, batch_id: int) -> None:
        super().__call__(df, batch_id)
        if batch_id == 0:
            self.held.set()
            assert self.release.wait(WAIT_S), "the test never released the first batch"


def _hold(query_or_stream: Any, held: threading.Event) -> None:
    wait_for(held.is_set, query_or_stream, timeout_s=WAIT_S, what="the first batch")


@pytest.mark.parametrize("fail_on_data_loss", [True, False], ids=["fail", "skip"])
def test_retention_under_a_running_stream_follows_fail_on_data_loss(
    reader: Any,
    kafka_bootstrap: str,
    retention_topic: tuple[str, list[Record]],
    tmp_path: Any,
    fail_on_data_loss: bool,
) -> None:
    topic, records = retention_topic
    sink = _HeldCollector()
    df = reader(
        stream=True,
        subscribe=topic,
        startingOffsets="earliest",
        maxOffsetsPerTrigger=str(READ_FIRST),
        failOnDataLoss=str(fail_on_data_loss).lower(),
    ).load()
    query = start(df, sink, str(tmp_path / "ck"))
    try:
        _hold(query, sink.held)
        assert sink.keys() == expected_keys(records[:READ_FIRST])
        log_start = _age_out_the_old_segments(kafka_bootstrap, topic)
        sink.release.set()
        if fail_on_data_loss:
            deadline = time.monotonic() + WAIT_S
            while query.isActive and time.monotonic() < deadline:
                time.sleep(0.2)
            error = query.exception()
            assert error is not None, "the query should have failed on data loss"
            message = str(error)
            assert (
                f"Data loss on {topic}-0: offset {READ_FIRST} was expected but the earliest "
                f"available is {log_start} ({log_start - READ_FIRST} offsets are no longer in "
                "Kafka)"
            ) in message
            assert "failOnDataLoss" in message
            assert sink.keys() == expected_keys(records[:READ_FIRST])  # nothing after the loss
        else:
            last = records[-1].offset
            wait_for(
                lambda: any(r.offset == last for r in sink.rows), query, WAIT_S, "the last record"
            )
            query.stop()
            kept = records[:READ_FIRST] + [r for r in records if r.offset >= log_start]
            assert sink.keys() == expected_keys(kept)
            assert sink.mismatches == []
    finally:
        sink.release.set()
        query.stop()


@pytest.mark.parametrize("fail_on_data_loss", [True, False], ids=["fail", "skip"])
def test_retention_under_a_running_direct_stream_follows_fail_on_data_loss(
    spark: Any,
    kafka_bootstrap: str,
    retention_topic: tuple[str, list[Record]],
    fail_on_data_loss: bool,
) -> None:
    topic, records = retention_topic
    held, release = threading.Event(), threading.Event()
    batches: list[tuple[list[OffsetRange], list[tuple[int, bytes | None, bytes]]]] = []

    def keep(df: Any, ranges: list[OffsetRange]) -> None:
        rows = [
            (r["offset"], r["key"], r["value"])
            for r in df.select("offset", "key", "value").collect()
        ]
        batches.append((ranges, rows))
        if len(batches) == 1:
            held.set()
            assert release.wait(WAIT_S), "the test never released the first batch"

    params = {
        "bootstrap.servers": kafka_bootstrap,
        "group.id": new_topic_name("g"),
        "auto.offset.reset": "earliest",
    }
    stream = KafkaUtils.createDirectStream(
        spark,
        LocationStrategies.PreferConsistent(),
        ConsumerStrategies.Subscribe([topic], params),
        batchInterval=0.5,
        maxRatePerPartition=2 * READ_FIRST,  # READ_FIRST records per half-second batch
        failOnDataLoss=fail_on_data_loss,
    )
    stream.foreachBatch(keep)
    stream.start()
    try:
        _hold(stream, held)
        log_start = _age_out_the_old_segments(kafka_bootstrap, topic)
        release.set()
        if fail_on_data_loss:
            deadline = time.monotonic() + WAIT_S
            while stream.exception() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            error = stream.exception()
            assert error is not None, "the stream should have failed on data loss"
            assert (
                f"Data loss on {topic}-0: offset {READ_FIRST} was expected but the earliest "
                f"available is {log_start}"
            ) in str(error)
            assert len(batches) == 1
        else:
            last = records[-1].offset
            deadline = time.monotonic() + WAIT_S
            while not any(o == last for _, rows in batches for o, _k, _v in rows):
                assert stream.exception() is None, stream.exception()
                assert time.monotonic() < deadline, "timed out waiting for the last record"
                time.sleep(0.2)
            stream.stop(graceful=True)
            kept = records[:READ_FIRST] + [r for r in records if r.offset >= log_start]
            got = sorted(row for _, rows in batches for row in rows)
            assert got == [(r.offset, r.key, r.value) for r in kept]
            # The batch after the loss starts at the new log start: no range covers the gap.
            starts = [r.from_offset for ranges, _ in batches[1:] for r in ranges if r.count()]
            assert starts and starts[0] == log_start
    finally:
        release.set()
        stream.stop(graceful=False)
