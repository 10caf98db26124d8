"""The DStream API (``KafkaUtils.createDirectStream``) under faults on librdkafka's mock cluster:
a leader down and back, and records deleted before they were read (``BatchInfo.lost``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from kafka_direct import (
    ConsumerStrategies,
    DirectKafkaStream,
    KafkaGroupStore,
    KafkaUtils,
    LocationStrategies,
    OffsetRange,
    TopicPartition,
)
from tests.integration.faults.support import SHORT_LIVED_POOL, Feeder, KnownProducer
from tests.integration.kafka_helpers import Record, new_topic_name

WAIT_S = 90.0


class Sink:
    """A batch function that keeps each batch's ranges and rows and commits them after."""

    def __init__(self, after: Callable[[int], None] | None = None) -> None:
        self.stream: DirectKafkaStream | None = None
        self.batches: list[tuple[list[OffsetRange], list[tuple[str, int, int, bytes]]]] = []
        self.after = after
        self.lock = threading.Lock()

    def __call__(self, df: Any, ranges: list[OffsetRange]) -> None:
        rows = [
            (r["topic"], r["partition"], r["offset"], r["value"])
            for r in df.select("topic", "partition", "offset", "value").collect()
        ]
        with self.lock:
            self.batches.append((ranges, rows))
            n = len(self.batches) - 1
        assert self.stream is not None
        self.stream.commitAsync(ranges)
        if self.after is not None:
            self.after(n)

    @property
    def rows(self) -> list[tuple[str, int, int, bytes]]:
        with self.lock:
            return sorted(row for _, rows in self.batches for row in rows)


def _expected(records: list[Record]) -> list[tuple[str, int, int, bytes]]:
    return sorted((r.topic, r.partition, r.offset, r.value) for r in records)


def _start(spark: Any, bootstrap: str, topic: str, group: str, sink: Sink, **kw: Any) -> Any:
    params = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"}
    stream = KafkaUtils.createDirectStream(
        spark,
        LocationStrategies.PreferConsistent(),
        ConsumerStrategies.Subscribe([topic], params),
        **{"batchInterval": 0.5, "sourceOptions": SHORT_LIVED_POOL, **kw},
    )
    sink.stream = stream
    stream.foreachBatch(sink)
    stream.start()
    return stream


def _wait(stream: Any, condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        error = stream.exception()
        assert error is None, f"the stream failed while waiting for {what}: {error!r}"
        assert time.monotonic() < deadline, f"timed out after {WAIT_S:g} s waiting for {what}"
        time.sleep(0.1)


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    store = KafkaGroupStore({"bootstrap.servers": bootstrap})
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        return {tp.partition: off for tp, off in store.load(group, tps).items()}
    finally:
        store.close()


def test_direct_stream_rides_out_a_leader_down_and_back(spark, mock_cluster, mock_topics):
    topic = mock_topics.create(partitions=3)
    down = mock_topics.leader(0)
    group = new_topic_name("g")
    bootstrap = mock_cluster.bootstrap_servers
    producer = KnownProducer(bootstrap, topic)
    producer.send_all(range(3), 20)
    producer.flush()
    sink = Sink()
    stream = _start(spark, bootstrap, topic, group, sink)
    try:
        _wait(stream, lambda: len(sink.rows) >= 60, "the first 60 records")
        with Feeder(producer, range(3)) as feeder:
            time.sleep(0.5)
            mock_cluster.broker_down(down)
            time.sleep(5)
            mock_cluster.broker_up(down)
            time.sleep(0.5)
        feeder.stop()
        produced = producer.flush()
        _wait(stream, lambda: len(sink.rows) >= len(produced), "every record")
        time.sleep(1)  # a duplicate would land now
        assert stream.isActive and stream.exception() is None
    finally:
        stream.stop(graceful=True, timeout=60)
    assert stream.exception() is None
    assert sink.rows == _expected(produced)
    # Each batch read exactly its ranges, and the group holds where the stream ended.
    for ranges, rows in sink.batches:
        for r in ranges:
            got = sorted(o for _, p, o, _ in rows if p == r.partition)
            assert got == list(range(r.from_offset, r.until_offset))
    assert _committed(bootstrap, group, topic, 3) == producer.counts()


def test_direct_stream_reports_deleted_records_in_batch_info_lost(spark, mock_cluster, mock_topics):
    topic = mock_topics.create(partitions=2)
    group = new_topic_name("g")
    bootstrap = mock_cluster.bootstrap_servers
    producer = KnownProducer(bootstrap, topic)
    producer.send_all(range(2), 200)
    produced = producer.flush()
    fault_batch, deleted_before = 2, 150

    def delete(batch: int) -> None:
        # After the batch's rows are read and before the next batch is planned.
        if batch == fault_batch:
            mock_cluster.delete_records(topic, 0, deleted_before)

    sink = Sink(after=delete)
    # 20 records/s per partition x 0.5 s: 10 offsets per partition per batch.
    stream = _start(
        spark, bootstrap, topic, group, sink, maxRatePerPartition=20, failOnDataLoss=False
    )
    try:
        _wait(
            stream,
            lambda: all((topic, p, 199) in {row[:3] for row in sink.rows} for p in (0, 1)),
            "both partitions read to their end",
        )
        assert stream.isActive and stream.exception() is None
    finally:
        stream.stop(graceful=True, timeout=60)

    batches = stream.batches
    position = next(r.until_offset for r in batches[fault_batch].offset_ranges if r.partition == 0)
    assert 0 < position < deleted_before
    assert sink.rows == _expected(
        [r for r in produced if not (r.partition == 0 and position <= r.offset < deleted_before)]
    )
    # One batch reports the loss: the next one, which reads from the new log start.
    lost = [(i, dict(b.lost)) for i, b in enumerate(batches) if b.lost]
    assert lost == [(fault_batch + 1, {TopicPartition(topic, 0): deleted_before - position})]
    after = batches[fault_batch + 1].offset_ranges
    assert next(r.from_offset for r in after if r.partition == 0) == deleted_before
    assert _committed(bootstrap, group, topic, 2) == {0: 200, 1: 200}
