"""A topic that Apache Kafka's log cleaner really compacts, read across its gaps by a batch
read, by a stream and by a DStream (createDirectStream). On the session's Kafka broker (its
cleaner backs off 1 s).

Each round of writes goes into a segment of its own, without waiting: ``segment.ms=100`` and
each round's CreateTimes are a second after the previous round's, and Kafka rolls a segment when
a batch's timestamp is more than ``segment.ms`` past the segment's first. The cleaner compacts
every segment but the active one (``min.cleanable.dirty.ratio=0.01``,
``min.compaction.lag.ms=0``), so what a reader must return is known from the writes alone:
below the active segment, the latest record of each key (a tombstone included: it stays for
``delete.retention.ms``, a day by default); in the active segment, every record.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kafka_direct.dstream.kafka_utils import KafkaUtils
from kafka_direct.dstream.strategies import ConsumerStrategies, LocationStrategies
from kafka_direct.offsets import OffsetRange
from kafka_direct.testing.broker import create_topic
from tests.integration.kafka_helpers import new_topic_name
from tests.integration.streams import Collector, start

TS_MS = 1_700_000_000_000
WAIT_S = 90.0

Row = tuple[int, bytes | None, bytes | None]  # offset, key, value

# Rounds of (key, value); None is a tombstone. The last round stays in the active segment.
ROUNDS: list[list[tuple[str, str | None]]] = [
    [(f"k{k}", f"r0-k{k}") for k in range(6)],  # offsets 0..5
    [("k0", "r1-k0"), ("k1", "r1-k1"), ("k2", "r1-k2")],  # 6..8
    [("k3", "r2-k3"), ("k0", "r2-k0"), ("k4", None), ("k2", "r2-k2")],  # 9..12
    [("k1", "r3-k1"), ("k5", "r3-k5"), ("k0", "r3-k0")],  # 13..15: the active segment
]


def _written() -> list[Row]:
    rows: list[Row] = []
    for round_ in ROUNDS:
        for key, value in round_:
            rows.append((len(rows), key.encode(), None if value is None else value.encode()))
    return rows


def compacted(written: list[Row], active_base: int) -> list[Row]:
    """What the cleaner leaves: below ``active_base`` the latest record per key, then all."""
    latest = {key: offset for offset, key, _ in written if offset < active_base}
    return [r for r in written if r[0] >= active_base or latest[r[1]] == r[0]]


WRITTEN = _written()
LOG_END = len(WRITTEN)
ACTIVE_BASE = LOG_END - len(ROUNDS[-1])
EXPECTED = compacted(WRITTEN, ACTIVE_BASE)


def test_the_expected_log_has_gaps_at_the_start_and_in_the_middle() -> None:
    # The shape the reads below are about (a check of this module's arithmetic, no broker).
    assert [r[0] for r in EXPECTED] == [5, 7, 9, 10, 11, 12, 13, 14, 15]
    assert (11, b"k4", None) in EXPECTED


def _consumed(bootstrap: str, topic: str) -> list[Row]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": new_topic_name("g"),
            "enable.auto.commit": "false",
            "enable.partition.eof": "true",
        }
    )
    rows: list[Row] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for msg in consumer.consume(100, 1.0):
                if msg.error() is not None:
                    return rows  # _PARTITION_EOF: the end of the log
                rows.append((msg.offset(), msg.key(), msg.value()))
        raise AssertionError(f"no end of {topic} within 30 s")
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def compacted_topic(kafka_bootstrap: str) -> str:
    topic = new_topic_name("compacted")
    create_topic(
        kafka_bootstrap,
        topic,
        partitions=1,
        config={
            "cleanup.policy": "compact",
            "segment.ms": "100",
            "min.cleanable.dirty.ratio": "0.01",
            "min.compaction.lag.ms": "0",
        },
    )
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": "5"})
    offsets: list[int] = []
    for r, round_ in enumerate(ROUNDS):
        for j, (key, value) in enumerate(round_):
            producer.produce(
                topic,
                key=key.encode(),
                value=None if value is None else value.encode(),
                partition=0,
                timestamp=TS_MS + 1000 * r + j,
                on_delivery=lambda err, msg: offsets.append(-1 if err else msg.offset()),
            )
        assert producer.flush(30) == 0  # one round never shares a batch with the next
    assert sorted(offsets) == list(range(LOG_END))
    # Poll until the cleaner has done its work (deadline, no fixed sleep).
    deadline = time.monotonic() + WAIT_S
    seen = _consumed(kafka_bootstrap, topic)
    while seen != EXPECTED:
        assert time.monotonic() < deadline, f"{topic} not compacted as expected: {seen}"
        time.sleep(0.5)
        seen = _consumed(kafka_bootstrap, topic)
    return topic


def _rows(df: Any) -> list[Row]:
    return sorted(
        (r["offset"], r["key"], r["value"]) for r in df.select("offset", "key", "value").collect()
    )


def test_a_batch_read_returns_the_latest_value_per_key_and_the_tail(
    reader: Any, compacted_topic: str
) -> None:
    assert _rows(reader(subscribe=compacted_topic).load()) == EXPECTED


@pytest.mark.parametrize(
    ("start", "end"),
    [
        (0, 5),  # only compacted-away offsets
        (0, 6),  # starts in a gap, ends on a record
        (1, 8),  # starts in a gap, ends in one
        (6, 9),  # both ends in gaps, one record between
        (8, 14),  # from a gap into the tail
        (12, 16),  # across the active segment's base to the log end
    ],
)
def test_ranges_that_start_or_end_in_compacted_gaps(
    reader: Any, compacted_topic: str, start: int, end: int
) -> None:
    df = reader(
        subscribe=compacted_topic,
        startingOffsets=json.dumps({compacted_topic: {"0": start}}),
        endingOffsets=json.dumps({compacted_topic: {"0": end}}),
        # A range that waited for an offset the cleaner removed would fail on this timeout.
        **{"kafkaConsumer.pollTimeoutMs": "15000"},
    ).load()
    assert _rows(df) == [r for r in EXPECTED if start <= r[0] < end]


def test_a_stream_reads_the_compacted_topic_in_offset_ranges(
    reader: Any, compacted_topic: str, tmp_path: Any
) -> None:
    sink = Collector()
    df = reader(
        stream=True,
        subscribe=compacted_topic,
        startingOffsets="earliest",
        maxOffsetsPerTrigger="4",
    ).load()
    query = start(df, sink, str(tmp_path / "ck"), availableNow=True)
    try:
        assert query.awaitTermination(120)
    finally:
        query.stop()
    assert query.exception() is None
    got = sorted((r.offset, r.key, r.value) for r in sink.rows)
    assert got == EXPECTED
    # maxOffsetsPerTrigger counts offsets, gaps included: [0,4) [4,8) [8,12) [12,16).
    assert sink.sizes == [0, 2, 3, 4]


def test_a_direct_stream_reads_the_compacted_topic_in_offset_ranges(
    spark: Any, kafka_bootstrap: str, compacted_topic: str
) -> None:
    batches: list[tuple[list[OffsetRange], list[Row]]] = []

    def keep(df: Any, ranges: list[OffsetRange]) -> None:
        batches.append((ranges, _rows(df)))

    params = {
        "bootstrap.servers": kafka_bootstrap,
        "group.id": new_topic_name("g"),
        "auto.offset.reset": "earliest",
    }
    stream = KafkaUtils.createDirectStream(
        spark,
        LocationStrategies.PreferConsistent(),
        ConsumerStrategies.Subscribe([compacted_topic], params),
        batchInterval=0.5,
        maxRatePerPartition=8,  # 4 offsets per half-second batch, gaps included
    )
    stream.foreachBatch(keep)
    stream.start()
    try:
        deadline = time.monotonic() + WAIT_S
        while not any(row[0] == LOG_END - 1 for _, rows in batches for row in rows):
            assert stream.exception() is None, stream.exception()
            assert time.monotonic() < deadline, f"timed out; batches so far: {batches}"
            time.sleep(0.2)
    finally:
        stream.stop(graceful=True)
    assert sorted(row for _, rows in batches for row in rows) == EXPECTED
    spans = [(r.from_offset, r.until_offset) for ranges, _ in batches for r in ranges if r.count()]
    assert spans == [(0, 4), (4, 8), (8, 12), (12, 16)]
