"""An idle pooled consumer stops fetching, on the real broker.

Between micro-batches a pooled executor consumer keeps its partitions assigned. With librdkafka's
default ``queued.min.messages`` (100,000) it fetched every record as the producer wrote it: one
fetch per producer request per idle consumer, which took the broker CPU the stream's own
micro-batches needed (docs/performance.md, "Idle pooled consumers"). The executors' config now
stops after a few queued records, and a backlog is still read whole.

The two consumers below idle side by side through the same trickle of producer requests, one
with the executors' config and one with only ``queued.min.messages`` put back to librdkafka's
default, so the control shows that the trickle did reach the broker as separate fetchable
requests: the test cannot pass because the broker batched them or the producer stalled.
"""

from __future__ import annotations

import json
import time
from typing import Any

from confluent_kafka import Consumer, Producer

from kafka_direct.consumer.fetch import PartitionConsumer
from kafka_direct.kafka.events import ClientEvents
from kafka_direct.offsets import OffsetRange
from tests.integration.kafka_helpers import produce_known
from tests.integration.test_native_read import config, read

#: Producer requests sent one by one while the consumers idle.
TRICKLE = 200


class Fetches:
    """librdkafka's statistics of one consumer: (time, Fetch requests sent so far, records
    queued for the partition), one sample per statistics interval."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.samples: list[tuple[float, int, int]] = []

    def __call__(self, raw: str) -> None:
        stats = json.loads(raw)
        sent = sum(b["req"].get("Fetch", 0) for b in stats["brokers"].values())
        part = stats["topics"].get(self.topic, {}).get("partitions", {}).get("0", {})
        # "ts": when librdkafka took the sample, in microseconds of CLOCK_MONOTONIC, the clock
        # of time.monotonic() (the callback runs later, when the queue is served).
        self.samples.append((stats["ts"] / 1e6, sent, int(part.get("fetchq_cnt", 0))))

    def between(self, start: float, end: float) -> tuple[int, int]:
        """Fetch requests sent from ``start`` to ``end``, and the most queued then (librdkafka's
        ``fetchq_cnt``: records and events)."""
        inside = [s for s in self.samples if start <= s[0] <= end]
        before = [s for s in self.samples if s[0] < start]
        assert inside and before, f"no statistics around the idle window: {self.samples}"
        return inside[-1][1] - before[-1][1], max(s[2] for s in inside)


def open_consumer(bootstrap: str, topic: str, **override: str) -> tuple[PartitionConsumer, Fetches]:
    conf = {**config(bootstrap), **override}
    fetches = Fetches(topic)
    events = ClientEvents("test consumer (idle)")
    client = Consumer(
        {**conf, "statistics.interval.ms": "50", "stats_cb": fetches, "error_cb": events}
    )
    return PartitionConsumer(client, events), fetches


def serve_statistics(pc: PartitionConsumer) -> None:
    """Serve the consumer's queued statistics callbacks. It holds at most the trickle's records
    (fewer than asked for here), so every queued event before them is served."""
    pc.python_client.consume(num_messages=TRICKLE * 10, timeout=1.0)


def test_an_idle_pooled_consumer_stops_fetching_and_a_backlog_is_still_read_whole(
    make_topic: Any, kafka_bootstrap: str
) -> None:
    topic = make_topic(prefix="idle-prefetch")
    produced = produce_known(kafka_bootstrap, topic, per_partition=5_000)
    pooled, eager = (
        open_consumer(kafka_bootstrap, topic),
        open_consumer(kafka_bootstrap, topic, **{"queued.min.messages": "100000"}),
    )
    try:
        # Each reads the whole backlog, as a task would, and is left assigned at the log end.
        for pc, _ in (pooled, eager):
            got, error = read(pc, OffsetRange(topic, 0, 0, 5_000))
            assert error is None, error
            assert got.column("value").to_pylist() == [r.value for r in produced]
        time.sleep(1.0)  # both settle at the log end, their queues' EOF taken or queued

        producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": "0"})
        start = time.monotonic()
        for i in range(TRICKLE):
            producer.produce(topic, value=b"trickle-%d" % i, partition=0)
            producer.flush(10)  # one request per record: what a busy topic looks like idle
            time.sleep(0.005)
        end = time.monotonic()
        time.sleep(0.3)
        for pc, _ in (pooled, eager):
            serve_statistics(pc)
        sent_pooled, queued_pooled = pooled[1].between(start, end)
        sent_eager, queued_eager = eager[1].between(start, end)

        # The control: the default fetched nearly every request as it came.
        assert sent_eager >= TRICKLE // 2, (sent_eager, queued_eager)
        # The executors' consumer fetched a few times, then idled with a few records queued.
        assert sent_pooled <= TRICKLE // 10, (sent_pooled, sent_eager)
        assert queued_pooled < queued_eager, (queued_pooled, queued_eager)
    finally:
        for pc, _ in (pooled, eager):
            pc.close()

    # Every trickled record is there for the next task, exactly (the pooled consumer's own
    # reads on from a shallow queue: test_native_read.py and the streaming tests, all of which
    # run with the executors' config).
    again, _ = open_consumer(kafka_bootstrap, topic)
    try:
        got, error = read(again, OffsetRange(topic, 0, 5_000, 5_000 + TRICKLE))
        assert error is None, error
        assert got.column("value").to_pylist() == [b"trickle-%d" % i for i in range(TRICKLE)]
    finally:
        again.close()
