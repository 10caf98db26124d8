"""A packed task's wait without progress, through a real librdkafka consumer (C fast path and
confluent-kafka's messages): one partition's leader is unreachable while another partition of
the task, whose range is already done, keeps receiving records (kafka_direct.consumer.packed).

librdkafka keeps fetching every assigned partition, so the done partition's records keep
coming; they are no progress of the task, which must fail after kafkaConsumer.pollTimeoutMs
naming the unreachable partition. (It used to wait as long as those records came.) The fault
is a broker-level one that librdkafka's mock cluster injects at once (``broker_down``: its
connections are refused) while the other broker stays healthy; no Spark is needed.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from kafka_direct.config.clients import executor_consumer_config
from kafka_direct.consumer.native import NativeConsumer
from kafka_direct.consumer.packed import GroupConsumer, fetch_ranges
from kafka_direct.errors import FetchTimeoutError
from kafka_direct.kafka.events import ClientEvents
from kafka_direct.offsets import OffsetRange
from kafka_direct.testing import MockCluster

POLL_MS = 2_000
#: How many records the busy partition receives at most, one every PRODUCE_EVERY_S: far longer
#: (30 s) than the poll timeout, so a read that ends before they are all written ended on its
#: poll timeout, not because the records stopped.
BUSY_RECORDS = 1_500
PRODUCE_EVERY_S = 0.02


class BusyPartition(threading.Thread):
    """Writes a record to ``partition`` every PRODUCE_EVERY_S until stopped or BUSY_RECORDS."""

    def __init__(self, bootstrap: str, topic: str, partition: int) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        self.topic, self.partition = topic, partition
        self.stop = threading.Event()
        self.written = 0

    def run(self) -> None:
        while self.written < BUSY_RECORDS and not self.stop.wait(PRODUCE_EVERY_S):
            self.producer.produce(self.topic, b"more", partition=self.partition)
            self.producer.poll(0)
            self.written += 1
        self.producer.flush(10)


def open_group(path: str, bootstrap: str) -> GroupConsumer:
    events = ClientEvents(f"test packed consumer ({path})")
    conf = executor_consumer_config(
        {"bootstrap.servers": bootstrap},
        group_id=f"progress-{uuid.uuid4().hex[:8]}",
        isolation_level="read_uncommitted",
    )

    def client() -> Any:
        if path == "native":
            return NativeConsumer(conf, events)
        return Consumer({**conf, "error_cb": events})

    return GroupConsumer(client(), events, renew=client)


@pytest.mark.parametrize("path", ["native", "python"])
def test_a_busy_done_partition_does_not_keep_a_task_waiting_on_an_unreachable_leader(
    path: str,
) -> None:
    with MockCluster(brokers=2) as cluster:
        topic = f"progress-{uuid.uuid4().hex[:8]}"
        cluster.create_topic(topic, partitions=2)
        cluster.set_leader(topic, 0, 1)  # A: its leader goes down
        cluster.set_leader(topic, 1, 2)  # B: its leader stays up
        cluster.produce(topic, [b"a"] * 10, partition=0)
        cluster.produce(topic, [b"b"] * 5, partition=1)
        cluster.broker_down(1)
        busy = BusyPartition(cluster.bootstrap_servers, topic, 1)
        busy.start()
        gc = open_group(path, cluster.bootstrap_servers)
        rows: list[tuple[int, int]] = []
        error: Exception | None = None
        try:
            ranges = [OffsetRange(topic, 0, 0, 10), OffsetRange(topic, 1, 0, 5)]
            for batch in fetch_ranges(
                gc, ranges, poll_timeout_ms=POLL_MS, fail_on_data_loss=True, batch_size=1000,
                include_headers=False,
            ):  # fmt: skip
                columns = batch.column("partition").to_pylist(), batch.column("offset").to_pylist()
                rows += zip(*columns, strict=True)
        except Exception as exc:  # noqa: BLE001 - inspected below
            error = exc
        finally:
            still_writing = busy.is_alive()
            busy.stop.set()
            busy.join(15)
            gc.close()

    assert sorted(rows) == [(1, o) for o in range(5)], path
    assert isinstance(error, FetchTimeoutError), (path, error)
    assert f"offset 0 of {topic}-0" in str(error), path
    # It ended on its poll timeout while B's records were still coming, not when they stopped.
    assert still_writing, (path, busy.written)
