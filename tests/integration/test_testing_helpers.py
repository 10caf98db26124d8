"""kafka_direct.testing against the real parts: librdkafka's mock cluster, Tansu on moto S3 and a
Spark standalone cluster. No fakes, no skips: a helper that cannot start fails its test.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from kafka_direct.errors import EmbeddedBrokerError
from kafka_direct.testing import ApiKey, DurableBroker, MockCluster, StandaloneCluster
from kafka_direct.testing.broker import create_topic
from kafka_direct.testing.durable_broker import WATERMARK_SETTLE_S
from tests.integration.kafka_helpers import produce_known

ROOT = Path(__file__).resolve().parents[2]
OFFSET_INVALID = -1001  # what list_offsets answers, without an error, when the leader is silent


# --- helpers -----------------------------------------------------------------------------------


def list_offsets(admin: AdminClient, topic: str, partition: int, spec: Any, timeout: float) -> int:
    result = admin.list_offsets({TopicPartition(topic, partition): spec}, request_timeout=timeout)
    return int(next(iter(result.values())).result().offset)


def eventually(call: Any, timeout_s: float = 30.0) -> Any:
    """``call()``'s first answer that is not an exception nor OFFSET_INVALID, within a deadline."""
    deadline = time.monotonic() + timeout_s
    answer = None
    while True:
        try:
            answer = call()
            if answer != OFFSET_INVALID:
                return answer
        except KafkaException:
            if time.monotonic() >= deadline:
                raise
        assert time.monotonic() < deadline, f"still {answer} after {timeout_s:g} s"
        time.sleep(0.1)


def consume_exact(
    bootstrap: str, assignments: list[tuple[str, int, int]], ends: dict[int, int]
) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every record from each start until ``ends[partition]``."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "helpers", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(t, p, o) for t, p, o in assignments])
    got: list[tuple[int, int, bytes]] = []
    position = {p: o for _, p, o in assignments}
    deadline = time.monotonic() + 60
    try:
        while any(position[p] < end for p, end in ends.items()):
            assert time.monotonic() < deadline, f"stuck at {position}, wanted {ends}"
            for msg in consumer.consume(10_000, 1.0):
                assert msg.error() is None, msg.error()
                got.append((msg.partition(), msg.offset(), msg.value()))
                position[msg.partition()] = msg.offset() + 1
    finally:
        consumer.close()
    return sorted(got)


# --- the mock cluster --------------------------------------------------------------------------


@pytest.fixture()
def mock_cluster() -> Iterator[MockCluster]:
    cluster = MockCluster(brokers=3).start()
    yield cluster
    cluster.close()


def _leader(cluster: MockCluster, topic: str, partition: int) -> int:
    metadata = AdminClient({"bootstrap.servers": cluster.bootstrap_servers}).list_topics(
        topic, timeout=10
    )
    return int(metadata.topics[topic].partitions[partition].leader)


def test_mock_cluster_serves_this_process_and_a_subprocess_with_exact_offsets(mock_cluster):
    mock_cluster.create_topic("events", partitions=2, replication_factor=3)
    assert mock_cluster.produce("events", [f"a{i}" for i in range(5)], partition=0) == [
        (0, i) for i in range(5)
    ]
    assert mock_cluster.produce("events", [b"b0", b"b1"], partition=1) == [(1, 0), (1, 1)]
    admin = AdminClient({"bootstrap.servers": mock_cluster.bootstrap_servers})
    # Exact watermarks (no Tansu batch quirk), and no timestamp lookup inside the log.
    assert list_offsets(admin, "events", 0, OffsetSpec.earliest(), 10) == 0
    assert list_offsets(admin, "events", 0, OffsetSpec.latest(), 10) == 5
    assert list_offsets(admin, "events", 1, OffsetSpec.latest(), 10) == 2
    assert list_offsets(admin, "events", 0, OffsetSpec.for_timestamp(0), 10) == -1

    code = textwrap.dedent(f"""
        import json
        from confluent_kafka import Consumer, TopicPartition
        c = Consumer({{"bootstrap.servers": {mock_cluster.bootstrap_servers!r},
                       "group.id": "sub", "enable.auto.commit": False}})
        c.assign([TopicPartition("events", 0, 1), TopicPartition("events", 1, 0)])
        got = []
        while len(got) < 6:
            for m in c.consume(6 - len(got), 10):
                got.append((m.partition(), m.offset(), m.value().decode()))
        c.close()
        print(json.dumps(sorted(got)))
    """)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [
        [0, 1, "a1"],
        [0, 2, "a2"],
        [0, 3, "a3"],
        [0, 4, "a4"],
        [1, 0, "b0"],
        [1, 1, "b1"],
    ]


def test_mock_broker_down_is_seen_by_clients_and_up_recovers(mock_cluster):
    mock_cluster.create_topic("down", partitions=1, replication_factor=3)
    mock_cluster.produce("down", ["x0", "x1"], partition=0)
    leader = _leader(mock_cluster, "down", 0)
    admin = AdminClient({"bootstrap.servers": mock_cluster.bootstrap_servers, "log_level": 0})
    assert list_offsets(admin, "down", 0, OffsetSpec.latest(), 10) == 2

    mock_cluster.broker_down(leader)
    # The leader does not move: its partition has no answer, and list_offsets says so with -1001
    # and no error (DESIGN §4), while a producer's record times out.
    assert list_offsets(admin, "down", 0, OffsetSpec.latest(), 1) == OFFSET_INVALID
    reports: list[KafkaError | None] = []
    producer = Producer(
        {
            "bootstrap.servers": mock_cluster.bootstrap_servers,
            "message.timeout.ms": 1000,
            "log_level": 0,
        }
    )
    producer.produce("down", b"lost", partition=0, on_delivery=lambda e, m: reports.append(e))
    producer.flush(10)
    assert [e.code() if e else None for e in reports] == [KafkaError._MSG_TIMED_OUT]

    mock_cluster.broker_up(leader)
    # Metadata fetched while the broker was down lists no such broker, and an admin client keeps
    # answering _NOENT ("No leaders found") from it until its metadata is refreshed: by the
    # periodic refresh (topic.metadata.refresh.interval.ms, 5 min) or a metadata request.
    admin.list_topics(timeout=10)
    assert eventually(lambda: list_offsets(admin, "down", 0, OffsetSpec.latest(), 2)) == 2
    assert mock_cluster.produce("down", ["x2"], partition=0) == [(0, 2)]
    got = consume_exact(mock_cluster.bootstrap_servers, [("down", 0, 0)], {0: 3})
    assert got == [(0, 0, b"x0"), (0, 1, b"x1"), (0, 2, b"x2")]

    other = next(b for b in mock_cluster.broker_ids if b != leader)
    mock_cluster.set_leader("down", 0, other)
    assert _leader(mock_cluster, "down", 0) == other
    assert mock_cluster.produce("down", ["x3"], partition=0) == [(0, 3)]


def test_mock_delete_records_moves_earliest_and_fetches_below_it_are_out_of_range(mock_cluster):
    mock_cluster.create_topic("loss", partitions=1, replication_factor=1)
    mock_cluster.produce("loss", [f"v{i}" for i in range(10)], partition=0)
    admin = AdminClient({"bootstrap.servers": mock_cluster.bootstrap_servers})

    mock_cluster.delete_records("loss", 0, 4)
    assert list_offsets(admin, "loss", 0, OffsetSpec.earliest(), 10) == 4
    assert list_offsets(admin, "loss", 0, OffsetSpec.latest(), 10) == 10

    consumer = Consumer(
        {
            "bootstrap.servers": mock_cluster.bootstrap_servers,
            "group.id": "loss",
            "auto.offset.reset": "error",
            "log_level": 0,
        }
    )
    consumer.assign([TopicPartition("loss", 0, 2)])
    try:
        msg = consumer.poll(10)
        assert msg is not None and msg.error() is not None
        assert msg.error().code() == KafkaError._AUTO_OFFSET_RESET
        assert "Offset out of range" in msg.error().str()
    finally:
        consumer.close()
    got = consume_exact(mock_cluster.bootstrap_servers, [("loss", 0, 4)], {0: 10})
    assert got == [(0, i, f"v{i}".encode()) for i in range(4, 10)]

    with pytest.raises(EmbeddedBrokerError, match=r"delete_records.*OFFSET_OUT_OF_RANGE \(1\)"):
        mock_cluster.delete_records("loss", 0, 11)


def test_mock_rtt_slows_requests_and_pushed_errors_answer_the_next_request(mock_cluster):
    mock_cluster.create_topic("slow", partitions=1, replication_factor=3)
    mock_cluster.produce("slow", ["s0"], partition=0)
    admin = AdminClient({"bootstrap.servers": mock_cluster.bootstrap_servers})
    # Warm up: metadata is known, so only the ListOffsets request meets the delay below.
    assert list_offsets(admin, "slow", 0, OffsetSpec.latest(), 10) == 1

    mock_cluster.set_rtt(_leader(mock_cluster, "slow", 0), 1000)
    started = time.monotonic()
    assert list_offsets(admin, "slow", 0, OffsetSpec.latest(), 10) == 1
    assert time.monotonic() - started >= 0.9
    assert list_offsets(admin, "slow", 0, OffsetSpec.latest(), 0.3) == OFFSET_INVALID
    mock_cluster.set_rtt(-1, 0)

    mock_cluster.push_request_errors(ApiKey.LIST_OFFSETS, KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaException) as failed:
        list_offsets(admin, "slow", 0, OffsetSpec.latest(), 10)
    assert failed.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert list_offsets(admin, "slow", 0, OffsetSpec.latest(), 10) == 1  # the stack is used up


def test_mock_cluster_close_is_idempotent_and_errors_name_the_call():
    cluster = MockCluster(brokers=1)
    with pytest.raises(EmbeddedBrokerError, match="not started"):
        _ = cluster.bootstrap_servers
    with cluster:
        assert cluster.bootstrap_servers.count(",") == 0
        with pytest.raises(EmbeddedBrokerError) as failed:
            cluster.broker_down(7)
        assert str(failed.value) == (
            "rd_kafka_mock_broker_set_down(7) failed on the mock cluster: BROKER_NOT_AVAILABLE (8)"
        )
    cluster.close()
    with pytest.raises(EmbeddedBrokerError, match="not started"):
        cluster.set_rtt(1, 10)


# --- the durable broker ------------------------------------------------------------------------


@pytest.fixture()
def durable_broker() -> Iterator[DurableBroker]:
    broker = DurableBroker().start()
    yield broker
    broker.stop()


def test_durable_broker_keeps_every_record_across_a_crash_and_restart(durable_broker):
    bootstrap = durable_broker.bootstrap_servers
    create_topic(bootstrap, "durable", partitions=2)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all"})
    failures: list[KafkaError] = []

    def send(p: int, i: int) -> None:
        producer.produce(
            "durable",
            f"p{p}-{i}".encode(),
            partition=p,
            on_delivery=lambda e, m: failures.append(e) if e else None,
        )

    for i in range(9_999):
        for p in (0, 1):
            send(p, i)
    assert producer.flush(60) == 0
    # Tansu's watermark quirk, stricter on S3 (see durable_broker): the final record of each
    # partition goes alone, in a later second than the batch before it.
    time.sleep(WATERMARK_SETTLE_S)
    for p in (0, 1):
        send(p, 9_999)
    assert producer.flush(60) == 0
    assert failures == []
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    assert [list_offsets(admin, "durable", p, OffsetSpec.latest(), 10) for p in (0, 1)] == [
        10_000,
        10_000,
    ]

    durable_broker.crash()
    assert not durable_broker.is_running()
    durable_broker.restart()
    assert durable_broker.bootstrap_servers == bootstrap  # same port: clients reconnect
    # The admin client from before the crash may answer _NOENT ("No leaders found") once, while
    # it reconnects (about 0.5 s here); then it sees the restarted broker's exact watermarks.
    latest = [
        eventually(lambda p=p: list_offsets(admin, "durable", p, OffsetSpec.latest(), 10))
        for p in (0, 1)
    ]
    assert latest == [10_000, 10_000]
    got = consume_exact(bootstrap, [("durable", 0, 0), ("durable", 1, 0)], {0: 10_000, 1: 10_000})
    assert got == [(p, i, f"p{p}-{i}".encode()) for p in (0, 1) for i in range(10_000)]

    durable_broker.pause()
    with pytest.raises(KafkaException):
        AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(timeout=0.5)
    durable_broker.resume()
    assert "durable" in admin.list_topics(timeout=10).topics


# --- the standalone Spark cluster --------------------------------------------------------------


def _standalone_driver(master_url: str, bootstrap: str, topic: str) -> None:
    """The Spark driver, in a subprocess: the suite's local session owns this process's JVM."""
    from kafka_direct.testing.standalone import standalone_session

    def executor_identity(_: object) -> tuple[str, int, int]:
        # Walk up from the Python worker to the executor JVM that started it.
        pid = os.getpid()
        while pid > 1:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if any(a.endswith("CoarseGrainedExecutorBackend") for a in argv):
                return argv[argv.index("--executor-id") + 1], pid, ppid
            pid = ppid
        raise AssertionError("this task did not run under a Spark executor")

    def emit(payload: dict[str, Any]) -> None:
        sys.stdout.write("RESULT " + json.dumps(payload) + "\n")
        sys.stdout.flush()

    spark = standalone_session(master_url, "kd-testing-standalone", executors=2)
    sc = spark.sparkContext
    executors = sorted(set(sc.parallelize(range(8), 8).map(executor_identity).collect()))
    df = (
        spark.read.format("kafka_direct")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
    )
    rows = sorted(
        (r["partition"], r["offset"], r["key"] and r["key"].decode(), r["value"].decode())
        for r in df.collect()
    )
    emit({"driver_pid": os.getpid(), "executors": executors, "rows": rows})
    sys.stdin.readline()  # the test kills worker 0 meanwhile
    executors = sorted(set(sc.parallelize(range(8), 8).map(executor_identity).collect()))
    emit({"executors": executors, "sum": sc.parallelize(range(1000), 4).sum()})
    spark.stop()


@pytest.fixture()
def standalone() -> Iterator[StandaloneCluster]:
    cluster = StandaloneCluster(workers=2).start()
    yield cluster
    cluster.stop()


def _process_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def test_standalone_cluster_runs_executors_reads_kafka_and_survives_a_killed_worker(
    standalone, make_topic, kafka_bootstrap, tmp_path
):
    topic = make_topic(partitions=2)
    produced = produce_known(kafka_bootstrap, topic, per_partition=25, partitions=2)
    expected = [
        [r.partition, r.offset, r.key and r.key.decode(), r.value.decode()] for r in produced
    ]
    stderr_path = tmp_path / "driver.log"
    code = (
        "from tests.integration.test_testing_helpers import _standalone_driver as d; "
        f"d({standalone.master_url!r}, {kafka_bootstrap!r}, {topic!r})"
    )
    with open(stderr_path, "wb") as stderr:
        driver = subprocess.Popen(
            [sys.executable, "-c", code],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    results: queue.Queue[dict[str, Any] | None] = queue.Queue()

    def pump() -> None:
        assert driver.stdout is not None
        for line in driver.stdout:
            if line.startswith("RESULT "):
                results.put(json.loads(line[len("RESULT ") :]))
        results.put(None)

    threading.Thread(target=pump, daemon=True).start()

    def next_result() -> dict[str, Any]:
        try:
            result = results.get(timeout=180)
        except queue.Empty:
            result = None
        if result is None:
            tail = stderr_path.read_text(errors="replace")[-4000:]
            pytest.fail(f"The driver gave no result (exit {driver.poll()}):\n{tail}")
        return result

    try:
        first = next_result()
        # One executor per worker, each a child JVM of that worker, none of them the driver.
        assert sorted(ppid for _, _, ppid in first["executors"]) == sorted(standalone.worker_pids)
        assert first["driver_pid"] not in {pid for _, pid, _ in first["executors"]}
        assert first["rows"] == expected

        standalone.kill_worker(0)
        assert standalone.alive_workers() == 1
        killed = [pid for _, pid, ppid in first["executors"] if ppid == standalone.worker_pids[0]]
        assert len(killed) == 1
        deadline = time.monotonic() + 10  # SIGKILL is delivered at once, the exit takes a moment
        while _process_alive(killed[0]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _process_alive(killed[0])

        assert driver.stdin is not None
        driver.stdin.write("go\n")
        driver.stdin.flush()
        second = next_result()
        survivor = [e for e in first["executors"] if e[2] == standalone.worker_pids[1]]
        assert second["executors"] == survivor
        assert second["sum"] == 499_500
        assert driver.wait(timeout=60) == 0
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()


def test_standalone_session_refuses_a_second_spark_context_in_one_process(spark):
    # The suite's local session owns this process's JVM, which is why the test above runs its
    # driver in a subprocess. The error says so instead of handing back the local session.
    from kafka_direct.testing.standalone import standalone_session

    with pytest.raises(EmbeddedBrokerError) as failed:
        standalone_session("spark://127.0.0.1:7077")
    assert str(failed.value) == (
        f"This process already runs a SparkContext on '{spark.sparkContext.master}', and Spark "
        "allows one per process. Stop it first, or run the driver for spark://127.0.0.1:7077 in "
        "a subprocess."
    )
