"""A broker that stops answering in the middle of a write: the task fails within
``kafka.delivery.timeout.ms``, with a message that names the broker and the setting, and nothing
hangs; once the broker is back, the next write succeeds with a new producer (the failed one was
closed, never pooled: SPARK-27042).

The broker is an embedded one of this test's own (paused with SIGSTOP, as
``EmbeddedBroker.pause`` does), so the shared broker of the other tests is never frozen.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from kafka_direct.testing.broker import EmbeddedBroker, create_topic
from tests.integration.test_sink_batch import read_topic

DELIVERY_TIMEOUT_MS = 3000


@pytest.fixture()
def own_broker() -> Iterator[EmbeddedBroker]:
    broker = EmbeddedBroker().start()
    try:
        yield broker
    finally:
        if broker.is_running():
            broker.resume()
        broker.stop(timeout_s=2)


def pausing_source(spark, broker_pid: int, rows: int):  # type: ignore[no-untyped-def]
    """Rows whose task freezes the broker (SIGSTOP) before it hands over the first batch: the
    write has started (the writer's checks passed) when the broker stops answering."""

    def pause_then_pass(batches):  # type: ignore[no-untyped-def]
        os.killpg(broker_pid, signal.SIGSTOP)
        yield from batches

    df = spark.range(0, rows, numPartitions=1).selectExpr(
        "cast(id as string) as key", "repeat('x', 100) as value"
    )
    return df.mapInArrow(pause_then_pass, df.schema)


def test_a_broker_that_stops_answering_fails_the_write_within_the_delivery_timeout(
    spark, own_broker
):
    bootstrap = own_broker.bootstrap_servers
    topic = "paused-write"
    create_topic(bootstrap, topic, partitions=1)
    df = pausing_source(spark, own_broker.pid, rows=5_000)
    writer = (
        df.write.format("kafka_direct")
        .mode("append")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("kafka.delivery.timeout.ms", str(DELIVERY_TIMEOUT_MS))
    )
    started = time.monotonic()
    with pytest.raises(Exception) as info:  # Spark's error, with the task's inside
        writer.save()
    elapsed = time.monotonic() - started
    message = str(info.value)
    assert "Writing to Kafka failed" in message
    assert f"No broker at {bootstrap} acknowledged it" in message
    assert f"kafka.delivery.timeout.ms={DELIVERY_TIMEOUT_MS} ms" in message
    assert f"record for {topic}" in message and "_MSG_TIMED_OUT" in message
    # 3 s of delivery timeout, the flush's slice, and Spark's own job overhead on a busy
    # machine: far from librdkafka's 5-minute default, and from a hang.
    assert elapsed < DELIVERY_TIMEOUT_MS / 1000 + 30, elapsed

    own_broker.resume()
    healthy = spark.range(0, 100, numPartitions=1).selectExpr("cast(id as string) as value")
    (
        healthy.write.format("kafka_direct")
        .mode("append")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .save()
    )
    values = sorted(v for _, _, v, _ in read_topic(bootstrap, topic, 100))
    # Records of the failed write may have landed before the freeze (at-least-once): only the
    # healthy write's are counted here.
    assert sorted(v for v in values if len(v) < 100) == sorted(str(i).encode() for i in range(100))
