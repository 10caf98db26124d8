"""KafkaCluster: real Apache Kafka brokers as JVM processes, with kills, restarts and pauses.

These tests start their own clusters (one and three brokers) and do not use the session broker.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    NewTopic,
)

from kafka_direct.testing.kafka_cluster import KafkaCluster, KafkaClusterError

pytestmark = pytest.mark.serial


def _produce(bootstrap: str, topic: str, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for value in values:
        producer.produce(topic, value.encode())
    assert producer.flush(60) == 0


def _consume_all(bootstrap: str, topic: str, expected: int) -> list[str]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "g-" + topic, "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        out: list[str] = []
        deadline = time.monotonic() + 60
        while len(out) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(expected - len(out), timeout=1):
                assert msg.error() is None, msg.error()
                out.append(msg.value().decode())
        return out
    finally:
        consumer.close()


def _create(bootstrap: str, topic: str, replicas: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, 1, replicas)], operation_timeout=30)
    futures[topic].result(60)


def test_one_broker_serves_exact_watermarks_and_survives_a_kill_and_restart() -> None:
    with KafkaCluster() as cluster:
        assert cluster.broker_ids == [1]
        bootstrap = cluster.bootstrap_servers
        _create(bootstrap, "one", 1)
        _produce(bootstrap, "one", [f"v{i}" for i in range(10)])
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "w"})
        try:
            # One batch of ten records: the high watermark is the last offset + 1 (not Tansu's
            # base offset of the last batch + 1).
            assert consumer.get_watermark_offsets(TopicPartition("one", 0), timeout=30) == (0, 10)
        finally:
            consumer.close()
        pid = cluster.pid(1)
        cluster.kill_broker(1)
        assert cluster.pid(1) is None
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # type: ignore[arg-type]
        cluster.start_broker(1)
        _produce(bootstrap, "one", ["v10"])
        assert _consume_all(bootstrap, "one", 11) == [f"v{i}" for i in range(11)]
        root = cluster.log_path(1).parent.parent
        assert "Kafka version" in cluster.log_path(1).read_text()
        restarted = cluster.pid(1)
    assert not root.exists()
    with pytest.raises(ProcessLookupError):
        os.kill(restarted, 0)  # type: ignore[arg-type]


def test_three_brokers_replicate_and_keep_serving_with_one_killed_or_paused() -> None:
    # A paused follower leaves the ISR after replica.lag.time.max.ms; 30 s by default.
    with KafkaCluster(brokers=3, replica_lag_time_max_ms=4000) as cluster:
        assert cluster.broker_ids == [1, 2, 3]
        bootstrap = cluster.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topic = "three"
        _create(bootstrap, topic, 3)
        configs = admin.describe_configs([ConfigResource("BROKER", "1")])
        broker_config = next(iter(configs.values())).result(30)
        assert broker_config["min.insync.replicas"].value == "2"
        assert broker_config["offsets.topic.replication.factor"].value == "3"
        assert broker_config["transaction.state.log.min.isr"].value == "2"
        partition = admin.list_topics(topic, timeout=30).topics[topic].partitions[0]
        assert sorted(partition.replicas) == [1, 2, 3]
        _produce(bootstrap, topic, ["a", "b"])

        leader = partition.leader
        cluster.kill_broker(leader)
        _produce(bootstrap, topic, ["c"])  # acks=all with 2 of 3 in sync: min ISR is met
        cluster.start_broker(leader)

        other = next(i for i in cluster.broker_ids if i != leader)
        cluster.pause_broker(other)
        _produce(bootstrap, topic, ["d"])
        cluster.resume_broker(other)
        assert _consume_all(bootstrap, topic, 4) == ["a", "b", "c", "d"]


def test_a_broker_that_fails_at_start_says_why_with_its_log() -> None:
    cluster = KafkaCluster(**{"log.segment.bytes": "not-a-number"})
    with pytest.raises(KafkaClusterError, match=r"log\.segment\.bytes") as caught:
        cluster.start()
    assert "broker 1" in str(caught.value)
    assert cluster.pid(1) is None


def test_brokers_die_with_the_process_that_started_them() -> None:
    # atexit never runs in a process that is SIGKILLed (or segfaults): the brokers must not
    # outlive it.
    code = (
        "import os, signal\n"
        "from kafka_direct.testing.kafka_cluster import KafkaCluster\n"
        "cluster = KafkaCluster().start()\n"
        "print(cluster.pid(1), flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, timeout=300
    )
    assert done.returncode == -signal.SIGKILL
    broker = int(done.stdout.split()[-1])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(broker, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.kill(broker, signal.SIGKILL)
    raise AssertionError(f"broker pid {broker} outlived the process that started it")
