"""The embedded broker (Tansu) frozen or crashed under a running stream: the stream waits it out
and reads every record exactly once.

A private broker per test, never the session's: a frozen or crashed broker would fail every
other test that uses it meanwhile. Tansu's log end is the start of the last record batch
(shared/BROKER.md item 1), so each partition's data ends with a record of its own
(:meth:`KnownProducer.finish`); on durable storage, in a later second than the batch before it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from kafka_direct.testing import DurableBroker
from kafka_direct.testing.broker import EmbeddedBroker, create_topic
from kafka_direct.testing.durable_broker import WATERMARK_SETTLE_S
from tests.integration.faults.support import (
    SHORT_LIVED_POOL,
    Feeder,
    KnownProducer,
    OffsetLogWatcher,
)
from tests.integration.kafka_helpers import new_topic_name
from tests.integration.streams import Collector, expected_keys, start, wait_for

PARTITIONS = 2
PAUSE_S = 5.0


@pytest.fixture()
def private_broker() -> Iterator[EmbeddedBroker]:
    broker = EmbeddedBroker().start()
    try:
        yield broker
    finally:
        if broker.is_running():
            broker.resume()  # a frozen process does not die of SIGTERM
        broker.stop(timeout_s=2)


@pytest.fixture()
def durable_broker() -> Iterator[DurableBroker]:
    broker = DurableBroker().start()
    try:
        yield broker
    finally:
        broker.stop()


def _stream(spark: Any, bootstrap: str, topic: str, **options: str) -> Any:
    reader = (
        spark.readStream.format("kafka_direct")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    for key, value in {**SHORT_LIVED_POOL, **options}.items():
        reader = reader.option(key, value)
    return reader.load()


def test_a_frozen_broker_is_waited_out_and_every_record_read_once(
    spark, private_broker, queries, tmp_path
):
    bootstrap = private_broker.bootstrap_servers
    topic = new_topic_name("pause")
    create_topic(bootstrap, topic, partitions=PARTITIONS)
    producer = KnownProducer(bootstrap, topic)
    producer.send_all(range(PARTITIONS), 50)
    first = producer.finish(range(PARTITIONS))
    checkpoint = tmp_path / "ck"
    sink = Collector()
    with OffsetLogWatcher(checkpoint) as watcher:
        query = queries(start(_stream(spark, bootstrap, topic), sink, str(checkpoint)))
        wait_for(lambda: len(sink.rows) >= len(first), query, 90, "the records before the pause")
        with Feeder(producer, range(PARTITIONS)) as feeder:
            time.sleep(0.5)
            private_broker.pause()  # SIGSTOP: connections stay open, nothing answers
            time.sleep(PAUSE_S)
            private_broker.resume()
            time.sleep(1)
        feeder.stop()
        produced = producer.finish(range(PARTITIONS))
        wait_for(lambda: len(sink.rows) >= len(produced), query, 120, "every record")
        time.sleep(1)  # a duplicate would land now
        assert query.isActive and query.exception() is None
        query.stop()
    assert len(produced) > len(first)
    assert sink.keys() == expected_keys(produced)
    assert sink.mismatches == []
    assert watcher.negative() == []


def test_a_crashed_and_restarted_broker_loses_and_repeats_nothing(
    spark, durable_broker, queries, tmp_path
):
    bootstrap = durable_broker.bootstrap_servers
    topic = new_topic_name("crash")
    create_topic(bootstrap, topic, partitions=PARTITIONS)
    producer = KnownProducer(bootstrap, topic)
    producer.send_all(range(PARTITIONS), 300)
    before = producer.finish(range(PARTITIONS), settle_s=WATERMARK_SETTLE_S)
    checkpoint = tmp_path / "ck"
    sink = Collector()
    with OffsetLogWatcher(checkpoint) as watcher:
        # 40 offsets per batch: the stream is in the middle of the data when the broker dies.
        df = _stream(spark, bootstrap, topic, maxOffsetsPerTrigger="40")
        query = queries(start(df, sink, str(checkpoint)))
        wait_for(lambda: len(sink.rows) >= 80, query, 90, "the first batches")
        durable_broker.crash()  # SIGKILL
        time.sleep(2)
        durable_broker.restart()
        assert len(sink.rows) < len(before), "the crash should land mid-stream"
        # Records after the restart, from a new producer (the old one's idempotence state
        # belongs to the broker process that died), numbered on from the first one's.
        after = KnownProducer(bootstrap, topic, numbering=producer.numbering())
        after.send_all(range(PARTITIONS), 100)
        produced = before + after.finish(range(PARTITIONS), settle_s=WATERMARK_SETTLE_S)
        wait_for(lambda: len(sink.rows) >= len(produced), query, 120, "every record")
        time.sleep(1)  # a duplicate would land now
        assert query.isActive and query.exception() is None
        query.stop()
    assert sink.keys() == expected_keys(produced)
    assert sink.mismatches == []
    assert watcher.negative() == []


def test_regression_soak_reads_stalled_on_a_broker_reading_from_slow_storage(durable_broker):
    """Found by the soak: Tansu on S3 reads a fetch's data from its object store, and answers
    empty when that takes longer than the fetch's max wait. With the executors' old
    ``fetch.wait.max.ms=100`` a consumer fetched again and again and got no record for minutes
    once a partition held a few hundred objects. The executors' read must get every record.

    Each fetch from that storage takes a good part of a second, so the test reads the last 20
    objects' records, not all 600: the stall came from how many objects the partition holds, not
    from where a range starts (with ``kafka.fetch.wait.max.ms=100`` this range times out with no
    record read; the whole partition took minutes to read on a loaded machine)."""
    from confluent_kafka import Producer

    from kafka_direct.config.source import parse_source_options
    from kafka_direct.consumer.read import read_range
    from kafka_direct.offsets import OffsetRange

    bootstrap = durable_broker.bootstrap_servers
    topic = new_topic_name("slow-storage")
    create_topic(bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "log_level": 0})
    objects, per_object = 600, 5  # one flush, one record batch, one S3 object
    for i in range(objects):
        for j in range(per_object):
            producer.produce(topic, value=f"{i}-{j}".encode(), partition=0)
        producer.flush()
    producer.produce(topic, value=b"last", partition=0)  # Tansu's log end: a batch of its own
    producer.flush()
    total = objects * per_object
    time.sleep(WATERMARK_SETTLE_S)

    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "kafkaConsumer.pollTimeoutMs": "60000",
    }
    settings = parse_source_options(options, streaming=True).executor_settings()
    tail = 20  # objects
    start = total - tail * per_object
    values = [
        v.decode()
        for batch in read_range(settings, OffsetRange(topic, 0, start, total))
        for v in batch.column("value").to_pylist()
    ]
    assert values == [f"{i}-{j}" for i in range(objects - tail, objects) for j in range(per_object)]
