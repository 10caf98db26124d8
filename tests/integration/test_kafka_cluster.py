"""KafkaCluster: real Apache Kafka brokers as JVM processes, with kills, restarts and pauses.

These tests start their own clusters (one and three brokers) and do not use the session broker.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
)

from kafka_direct.testing.kafka_cluster import KafkaCluster, KafkaClusterError
from kafka_direct.testing.topics import create_topic

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
    create_topic(bootstrap, topic, 1, replication_factor=replicas, timeout_s=60)


def _partition_zero(admin: AdminClient, topic: str) -> Any:
    """Partition 0's metadata, asked until a broker's answer has it. Brokers learn a new topic from
    the controller one by one, so the broker that answers may not list its partitions yet."""
    deadline = time.monotonic() + 30
    while True:
        partitions = admin.list_topics(timeout=30).topics.get(topic)
        if partitions is not None and 0 in partitions.partitions:
            return partitions.partitions[0]
        assert time.monotonic() < deadline, f"no broker's metadata listed {topic}'s partition 0"
        time.sleep(0.1)


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
        partition = _partition_zero(admin, topic)
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


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _start_in_a_thread_that_ends() -> KafkaCluster:
    """A cluster started by a helper thread that has ended by the time this returns."""
    started: list[KafkaCluster] = []
    failed: list[BaseException] = []

    def start() -> None:
        try:
            started.append(KafkaCluster().start())
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            failed.append(exc)

    helper = threading.Thread(target=start, name="starts-the-cluster")
    helper.start()
    helper.join()
    if failed:
        raise failed[0]
    return started[0]


def test_regression_brokers_outlive_the_thread_that_started_them() -> None:
    # PR_SET_PDEATHSIG follows the forking *thread*: a cluster started from a helper thread was
    # SIGKILLed when that thread ended, and its user saw "connection refused" with no cause.
    cluster = _start_in_a_thread_that_ends()
    try:
        # The signal is sent as the thread exits, before join() returns: no wait is needed.
        assert cluster.pid(1) is not None, "the broker died with the thread that started it"
        bootstrap = cluster.bootstrap_servers
        _create(bootstrap, "after-the-thread", 1)
        _produce(bootstrap, "after-the-thread", [f"v{i}" for i in range(5)])
        assert _consume_all(bootstrap, "after-the-thread", 5) == [f"v{i}" for i in range(5)]
    finally:
        cluster.stop()


def test_brokers_die_with_the_process_that_started_them_from_a_thread() -> None:
    # atexit never runs in a process that is SIGKILLed (or segfaults): the brokers must not
    # outlive it, even when a helper thread (long gone) started them.
    code = (
        "import os, signal, sys, threading\n"
        "from kafka_direct.testing.kafka_cluster import KafkaCluster\n"
        "from kafka_direct.testing.reaper import reaper_pid\n"
        "started = []\n"
        "helper = threading.Thread(target=lambda: started.append(KafkaCluster().start()))\n"
        "helper.start()\n"
        "helper.join()\n"
        "cluster = started[0]\n"
        "print(*[cluster.pid(i) for i in cluster.broker_ids], reaper_pid(), flush=True)\n"
        "sys.stdin.readline()\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None and child.stdin is not None
    line = child.stdout.readline()
    words = line.split()
    pids = [int(w) for w in words] if all(w.isdigit() for w in words) else []
    try:
        assert len(pids) == 2, f"the broker's and the reaper's pids, not {line!r}"
        # Alive after the starting thread ended, while the process lives.
        assert [pid for pid in pids if not _alive(pid)] == []
        child.stdin.write("die\n")
        child.stdin.flush()
        assert child.wait(300) == -signal.SIGKILL
        # Generous: the reaper acts as soon as the kernel closes the child's pipe.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
            time.sleep(0.2)
        left = [pid for pid in pids if _alive(pid)]
        assert left == [], f"pids {left} (the broker, then the reaper) outlived the process"
    finally:
        child.kill()
        child.wait()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_regression_a_cluster_started_in_a_thread_beside_a_spark_session_is_written_and_read(
    spark: Any,
) -> None:
    # A first fix forked brokers from a long-lived spawner thread; with a SparkSession running,
    # the next format("kafka_direct") write then failed with DATA_SOURCE_NOT_FOUND.
    cluster = _start_in_a_thread_that_ends()
    try:
        servers = cluster.bootstrap_servers
        _create(servers, "beside-spark", 1)
        rows = [(i, f"event-{i}") for i in range(20)]
        (
            spark.createDataFrame(rows, "k int, v string")
            .selectExpr("cast(k as string) as key", "v as value")
            .write.format("kafka_direct")
            .mode("append")
            .option("kafka.bootstrap.servers", servers)
            .option("topic", "beside-spark")
            .save()
        )
        back = (
            spark.read.format("kafka_direct")
            .option("kafka.bootstrap.servers", servers)
            .option("subscribe", "beside-spark")
            .option("startingOffsets", "earliest")
            .load()
            .selectExpr("cast(key as string) as key", "cast(value as string) as value")
        )
        got = sorted(((r.key, r.value) for r in back.collect()), key=lambda kv: int(kv[0]))
        assert got == [(str(i), f"event-{i}") for i in range(20)]
    finally:
        cluster.stop()
