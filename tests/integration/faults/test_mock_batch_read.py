"""A batch read (``spark.read``) while a partition's leader is down (librdkafka's mock cluster):
a bounded read cannot wait the outage out, so it fails, quickly, naming the partition and the
option that buys more patience."""

from __future__ import annotations

import time

import pytest
from pyspark.errors import PySparkException

from tests.integration.faults.support import SHORT_LIVED_POOL, KnownProducer

#: Far below the 3 x 30 s a read would hang if each attempt waited out the request timeout.
NO_HANG_S = 60.0


def test_batch_read_with_a_leader_down_fails_fast_naming_the_partition_and_the_option(
    spark, mock_cluster, mock_topics
):
    topic = mock_topics.create(partitions=3)
    producer = KnownProducer(mock_cluster.bootstrap_servers, topic)
    producer.send_all(range(3), 10)
    produced = producer.flush()
    df = (
        spark.read.format("kafka_direct")
        .option("kafka.bootstrap.servers", mock_cluster.bootstrap_servers)
        .option("subscribe", topic)
        .options(**SHORT_LIVED_POOL)
        .load()
    )
    assert df.count() == len(produced)  # the same read works while the cluster is whole

    mock_cluster.broker_down(mock_topics.leader(0))
    began = time.monotonic()
    with pytest.raises(PySparkException) as failed:
        (
            spark.read.format("kafka_direct")
            .option("kafka.bootstrap.servers", mock_cluster.bootstrap_servers)
            .option("subscribe", topic)
            .options(**SHORT_LIVED_POOL)
            .options(**SHORT_LIVED_POOL)
            .load()
            .collect()
        )
    took = time.monotonic() - began
    message = str(failed.value)
    assert "OffsetsUnavailableError" in message
    assert f"{topic}-0" in message
    assert f"{topic}-1" not in message and f"{topic}-2" not in message
    assert "fetchOffset.numRetries" in message
    assert took < NO_HANG_S, f"the read took {took:.0f} s to fail"

    mock_cluster.broker_up(mock_topics.leader(0))
    df = (
        spark.read.format("kafka_direct")
        .option("kafka.bootstrap.servers", mock_cluster.bootstrap_servers)
        .option("subscribe", topic)
        .options(**SHORT_LIVED_POOL)
        .load()
    )
    assert sorted((r.partition, r.offset, r.value) for r in df.collect()) == [
        (r.partition, r.offset, r.value) for r in produced
    ]
