"""Faults on a real three-broker Apache Kafka cluster (KRaft, combined broker+controller nodes):
a partition leader SIGKILLed and restarted, a broker frozen (SIGSTOP) for longer than its broker
session timeout and resumed, and the active controller SIGKILLed and restarted.

Each fault runs under each API, while records keep arriving with ``acks=all`` to a topic with
three replicas and ``min.insync.replicas=2``:

- the structured source (``spark.readStream``) into a foreachBatch sink that is idempotent by
  batch id (:class:`~tests.integration.streams.Collector`): every acknowledged record once;
- the sink (``df.write`` and ``writeStream`` to Kafka, ``acks=all``): the target topic holds
  every row exactly once (the sink is at-least-once, but no task or micro-batch runs again here,
  so a duplicate is a failure);
- the DStream API (``KafkaUtils.createDirectStream``) with an SQLite offset store, into an SQLite
  table upserted by (topic, partition, offset): every record delivered once, and the store ends
  at each partition's end.

One cluster per module (its start is the slowest step), a new topic per test; after each test
every broker runs again, unfrozen. The leader faults pick a partition whose leader is not the
active controller, so that "leader" and "controller" are two different faults.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kafka_direct import (
    ConsumerStrategies,
    DirectKafkaStream,
    KafkaUtils,
    LocationStrategies,
    OffsetRange,
    SqlOffsetStore,
    TopicPartition,
)
from kafka_direct.testing.kafka_cluster import KafkaCluster
from kafka_direct.testing.topics import create_topic as create_topic_on
from tests.integration.faults.support import (
    SHORT_LIVED_POOL,
    Feeder,
    KnownProducer,
    exact_through_fault,
    leaders,
    wait_until,
)
from tests.integration.kafka_helpers import Record, new_topic_name
from tests.integration.test_sink_batch import read_topic

pytestmark = pytest.mark.serial
logger = logging.getLogger(__name__)

PARTITIONS = 3
#: Longer than KafkaCluster's broker.session.timeout.ms (4 s): the controller fences the frozen
#: broker and moves its leaderships while it is frozen.
PAUSE_S = 8.0
WAIT_S = 120.0

Fault = Callable[[], None]


class Steps(list[str]):
    """What a fault did and when (seconds since it began), logged as it happens."""

    def __init__(self) -> None:
        super().__init__()
        self.began = time.monotonic()

    def begin(self) -> None:
        self.began = time.monotonic()

    def append(self, step: str) -> None:
        line = f"{time.monotonic() - self.began:6.1f} s  {step}"
        logger.info(line)
        super().append(line)


# --- the cluster ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster() -> Iterator[KafkaCluster]:
    with KafkaCluster(brokers=3) as started:
        yield started


@pytest.fixture()
def healthy(cluster: KafkaCluster) -> Iterator[KafkaCluster]:
    """The module's cluster; whatever a test did to its brokers, they all run again after it."""
    yield cluster
    for node in cluster.broker_ids:
        cluster.resume_broker(node)  # SIGCONT: harmless to a running broker
        if cluster.pid(node) is None:
            cluster.start_broker(node)


def create_topic(bootstrap: str, prefix: str) -> str:
    topic = new_topic_name(prefix)
    # Returns once metadata lists every partition and each one's leader serves it.
    create_topic_on(
        bootstrap, topic, PARTITIONS, {"min.insync.replicas": "2"}, 60, replication_factor=3
    )
    return topic


def quorum_leader(cluster: KafkaCluster) -> int | None:
    """The active controller: the leader of the metadata quorum in the newest epoch any running
    node recorded in its ``quorum-state`` (each voter rewrites it when it learns a new leader);
    None while an election runs."""
    newest: tuple[int, int] | None = None
    for node in cluster.broker_ids:
        if cluster.pid(node) is None:
            continue
        path = cluster.log_path(node).parent / "data" / "__cluster_metadata-0" / "quorum-state"
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # being rewritten
        epoch, leader = int(state.get("leaderEpoch", -1)), int(state.get("leaderId", -1))
        if newest is None or epoch > newest[0]:
            newest = (epoch, leader)
    return None if newest is None or newest[1] < 0 else newest[1]


def active_controller(cluster: KafkaCluster, timeout_s: float = 60.0) -> int:
    """The active controller, once the running nodes agree on one that is itself running."""
    found: list[int | None] = []

    def settled() -> bool:
        found[:] = [quorum_leader(cluster)]
        return found[0] is not None and cluster.pid(found[0]) is not None

    wait_until(
        settled, timeout_s, "an active controller that is running", explain=lambda: str(found)
    )
    assert found[0] is not None
    return found[0]


def leader_not_controller(cluster: KafkaCluster, topic: str) -> tuple[int, int]:
    """(partition, leader) for a partition whose leader is not the active controller."""
    controller = active_controller(cluster)
    current = leaders(cluster.bootstrap_servers, topic)
    partition = next(p for p, leader in sorted(current.items()) if leader != controller)
    return partition, current[partition]


def kill_leader_fault(cluster: KafkaCluster, topic: str, log: Steps) -> Fault:
    """SIGKILL a partition's leader; once another replica leads, start it again."""

    def fault() -> None:
        log.begin()
        partition, leader = leader_not_controller(cluster, topic)
        cluster.kill_broker(leader)
        log.append(f"killed broker {leader}, leader of partition {partition}")
        wait_until(
            lambda: leaders(cluster.bootstrap_servers, topic)[partition] not in (leader, -1),
            WAIT_S,
            f"a new leader for partition {partition}",
        )
        log.append(f"new leader {leaders(cluster.bootstrap_servers, topic)[partition]}")
        cluster.start_broker(leader)
        log.append(f"restarted broker {leader}")

    return fault


def pause_leader_fault(cluster: KafkaCluster, topic: str, log: Steps) -> Fault:
    """SIGSTOP a partition's leader for longer than the broker session timeout; check that it
    was fenced meanwhile (its leadership moved), then SIGCONT it."""

    def fault() -> None:
        log.begin()
        partition, leader = leader_not_controller(cluster, topic)
        cluster.pause_broker(leader)
        log.append(f"paused broker {leader}, leader of partition {partition}")
        started = time.monotonic()
        wait_until(
            lambda: leaders(cluster.bootstrap_servers, topic)[partition] not in (leader, -1),
            WAIT_S,
            f"partition {partition} to move off the frozen broker {leader}",
        )
        log.append(f"fenced after {time.monotonic() - started:.1f} s")
        time.sleep(max(0.0, PAUSE_S - (time.monotonic() - started)))
        cluster.resume_broker(leader)
        log.append(f"resumed broker {leader} after {time.monotonic() - started:.1f} s")

    return fault


def kill_controller_fault(cluster: KafkaCluster, log: Steps) -> Fault:
    """SIGKILL the active controller; once another node leads the quorum, start it again."""

    def fault() -> None:
        log.begin()
        controller = active_controller(cluster)
        cluster.kill_broker(controller)
        log.append(f"killed the active controller {controller}")
        successor = active_controller(cluster, WAIT_S)
        assert successor != controller
        log.append(f"new active controller {successor}")
        cluster.start_broker(controller)
        log.append(f"restarted broker {controller}")

    return fault


def make_fault(kind: str, cluster: KafkaCluster, topic: str, log: Steps) -> Fault:
    if kind == "kill-leader":
        return kill_leader_fault(cluster, topic, log)
    if kind == "pause-leader":
        return pause_leader_fault(cluster, topic, log)
    return kill_controller_fault(cluster, log)


FAULTS = ["kill-leader", "pause-leader", "kill-controller"]


# --- the structured source -----------------------------------------------------------------------


@pytest.mark.parametrize("kind", FAULTS)
def test_structured_source_reads_every_record_once_through(
    kind: str, spark: Any, healthy: KafkaCluster, queries: Any, tmp_path: Path
) -> None:
    bootstrap = healthy.bootstrap_servers
    topic = create_topic(bootstrap, f"src-{kind}")
    log = Steps()

    def make_stream() -> Any:
        reader = (
            spark.readStream.format("kafka_direct")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
        )
        for key, value in SHORT_LIVED_POOL.items():
            reader = reader.option(key, value)
        return reader.load()

    exact_through_fault(
        make_fault(kind, healthy, topic, log),
        producer=KnownProducer(bootstrap, topic),
        partitions=PARTITIONS,
        make_stream=make_stream,
        track=queries,
        checkpoint=tmp_path / "ck",
        timeout_s=WAIT_S,
    )
    assert log, "the fault did not run"


# --- the sink ---------------------------------------------------------------------------------


ROWS_PER_TASK = 3000
SLICE = 10
#: The longest a task holds its last slice back, waiting for the fault to end.
HOLD_S = 300.0


def paced_rows(spark: Any, flag: Path) -> Any:
    """``ROWS_PER_TASK`` rows in each of two tasks, values ``"{task}-{i}"`` (keyed, so they spread
    over the partitions), handed to the sink ``SLICE`` at a time with a pause between slices
    until ``flag`` exists, and the last slice only once it exists: the write spans the whole
    fault, then finishes at full speed."""
    import pyarrow as pa

    marker = str(flag)

    def pace(batches: Any) -> Any:
        import os

        from pyspark import TaskContext

        task = TaskContext.get().partitionId()  # type: ignore[union-attr]
        waited = 0.0
        for _ in batches:
            pass  # the input only says which task this is
        last = ROWS_PER_TASK - SLICE
        for start in range(0, ROWS_PER_TASK, SLICE):
            # The last slice waits for the fault to be over (the test's wait is bounded).
            while start == last and not os.path.exists(marker) and waited < HOLD_S:
                time.sleep(0.1)
                waited += 0.1
            values = [f"{task}-{i}" for i in range(start, start + SLICE)]
            yield pa.RecordBatch.from_pydict({"key": values, "value": values})
            if not os.path.exists(marker):
                time.sleep(0.1)

    df = spark.range(0, 2, numPartitions=2)
    return df.mapInArrow(pace, "key string, value string")


@pytest.fixture()
def small_arrow_batches(spark: Any) -> Iterator[None]:
    """Spark hands the writer rows in Arrow batches of up to this many rows (10,000 by default):
    with the default, a task's paced slices would reach the sink all at once, at its end."""
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(key)
    spark.conf.set(key, str(SLICE))
    yield
    spark.conf.set(key, before)


@pytest.mark.parametrize("kind", FAULTS)
def test_sink_writes_every_row_exactly_once_through(
    kind: str, spark: Any, healthy: KafkaCluster, small_arrow_batches: None, tmp_path: Path
) -> None:
    bootstrap = healthy.bootstrap_servers
    topic = create_topic(bootstrap, f"sink-{kind}")
    log = Steps()
    flag = tmp_path / "fault-over"
    writer = (
        paced_rows(spark, flag)
        .write.format("kafka_direct")
        .mode("append")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("kafka.acks", "all")
    )
    outcome: list[BaseException | None] = []

    def write() -> None:
        try:
            # Spark looks Python data sources up in the calling JVM thread's active session, and
            # PySpark's pinned thread for this Python thread has none: without this the write
            # fails with DATA_SOURCE_NOT_FOUND (a PySpark behaviour, not a kafka_direct one).
            spark._jvm.SparkSession.setActiveSession(spark._jsparkSession)
            writer.save()
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - asserted below
            outcome.append(exc)

    thread = threading.Thread(target=write, name="sink-write", daemon=True)
    thread.start()
    try:
        wait_until(
            lambda: _high_watermarks(bootstrap, topic) > 0 or bool(outcome),
            WAIT_S,
            "the first records of the write",
            explain=lambda: _spark_jobs(spark),
        )
        assert not outcome, f"the write ended before the fault: {_describe(outcome)}"
        make_fault(kind, healthy, topic, log)()
        assert thread.is_alive(), "the fault should land mid-write"
    finally:
        flag.touch()
        thread.join(WAIT_S + 60)
    assert not thread.is_alive(), "the write hangs"
    assert outcome == [None], f"the write failed: {_describe(outcome)}"
    expected = sorted(f"{t}-{i}".encode() for t in range(2) for i in range(ROWS_PER_TASK))
    values = sorted(value for _, _, value, _ in read_topic(bootstrap, topic, len(expected), 2.0))
    missing = sorted(set(expected) - set(values))
    repeated = len(values) - len(set(values))
    assert (missing[:5], repeated) == ([], 0), f"{len(missing)} lost, {repeated} duplicated"
    assert values == expected


@pytest.mark.parametrize("kind", FAULTS)
def test_stream_sink_copies_every_record_once_through(
    kind: str, spark: Any, healthy: KafkaCluster, queries: Any, tmp_path: Path
) -> None:
    """``writeStream`` to Kafka: a topic copied by a kafka_direct stream into another while the
    fault hits the cluster (for the leader faults, a leader of the target topic)."""
    bootstrap = healthy.bootstrap_servers
    source = create_topic(bootstrap, f"copy-from-{kind}")
    target = create_topic(bootstrap, f"copy-to-{kind}")
    log = Steps()
    producer = KnownProducer(bootstrap, source)
    producer.send_all(range(PARTITIONS), 20)
    first = len(producer.flush())
    df = (
        spark.readStream.format("kafka_direct")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .options(**SHORT_LIVED_POOL)
        .load()
        .select("key", "value")
    )
    query = queries(
        df.writeStream.format("kafka_direct")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", target)
        .option("kafka.acks", "all")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )

    def copied_at_least(count: int) -> Callable[[], bool]:
        def check() -> bool:
            assert query.exception() is None, query.exception()
            return _high_watermarks(bootstrap, target) >= count

        return check

    wait_until(copied_at_least(first), WAIT_S, "the records before the fault")
    with Feeder(producer, range(PARTITIONS)) as feeder:
        time.sleep(0.5)
        make_fault(kind, healthy, target, log)()
        time.sleep(0.5)
    feeder.stop()
    produced = producer.flush()
    wait_until(copied_at_least(len(produced)), WAIT_S, "every record copied")
    time.sleep(1.0)  # a duplicate would land now
    assert query.isActive and query.exception() is None
    query.stop()
    assert len(produced) > first, "records must arrive during the fault"
    copied = sorted(value for _, _, value, _ in read_topic(bootstrap, target, len(produced), 2.0))
    assert copied == sorted(r.value for r in produced)


def _spark_jobs(spark: Any) -> str:
    tracker = spark.sparkContext.statusTracker()
    jobs = [tracker.getJobInfo(j) for j in tracker.getActiveJobsIds()]
    stages = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
    return f"active jobs {jobs}, stages {stages}"


def _describe(outcome: list[BaseException | None]) -> str:
    return "; ".join(str(e)[:4000] for e in outcome)


def _high_watermarks(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "faults3-probe", "log_level": 0}
    )
    try:
        return sum(
            consumer.get_watermark_offsets(KafkaTopicPartition(topic, p), timeout=10)[1]
            for p in range(PARTITIONS)
        )
    finally:
        consumer.close()


# --- the DStream API --------------------------------------------------------------------------


class UpsertSink:
    """The batch function: upserts each record into SQLite by (topic, partition, offset), logs
    every delivery (so a record delivered twice shows), then commits the batch's ranges."""

    def __init__(self, db: Path) -> None:
        self.db = str(db)
        self.stream: DirectKafkaStream | None = None
        self.batches: list[tuple[list[OffsetRange], list[tuple[int, int]]]] = []
        with sqlite3.connect(self.db) as conn:
            conn.execute(
                "CREATE TABLE records (topic TEXT, partition INTEGER, offset INTEGER, "
                "value BLOB, PRIMARY KEY (topic, partition, offset))"
            )
            conn.execute("CREATE TABLE deliveries (partition INTEGER, offset INTEGER)")

    def __call__(self, df: Any, ranges: list[OffsetRange]) -> None:
        rows = [
            (r["topic"], r["partition"], r["offset"], bytes(r["value"]))
            for r in df.select("topic", "partition", "offset", "value").collect()
        ]
        with sqlite3.connect(self.db) as conn:
            conn.executemany("INSERT OR REPLACE INTO records VALUES (?, ?, ?, ?)", rows)
            conn.executemany("INSERT INTO deliveries VALUES (?, ?)", [(r[1], r[2]) for r in rows])
        self.batches.append((list(ranges), [(r[1], r[2]) for r in rows]))
        assert self.stream is not None
        self.stream.commitAsync(ranges)

    def count(self) -> int:
        with sqlite3.connect(self.db) as conn:
            return int(conn.execute("SELECT count(*) FROM records").fetchone()[0])

    def records(self) -> list[tuple[str, int, int, bytes]]:
        with sqlite3.connect(self.db) as conn:
            rows = conn.execute("SELECT topic, partition, offset, value FROM records").fetchall()
        return sorted((t, p, o, bytes(v)) for t, p, o, v in rows)

    def deliveries(self) -> int:
        with sqlite3.connect(self.db) as conn:
            return int(conn.execute("SELECT count(*) FROM deliveries").fetchone()[0])


def _wait(stream: Any, condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        error = stream.exception()
        assert error is None, f"the stream failed while waiting for {what}: {error!r}"
        assert time.monotonic() < deadline, f"timed out after {WAIT_S:g} s waiting for {what}"
        time.sleep(0.1)


def _expected(records: list[Record]) -> list[tuple[str, int, int, bytes]]:
    return sorted((r.topic, r.partition, r.offset, r.value) for r in records)


@pytest.mark.parametrize("kind", FAULTS)
def test_direct_stream_delivers_every_record_once_through(
    kind: str, spark: Any, healthy: KafkaCluster, tmp_path: Path
) -> None:
    bootstrap = healthy.bootstrap_servers
    topic = create_topic(bootstrap, f"dstream-{kind}")
    log = Steps()
    group = new_topic_name("g")
    store = SqlOffsetStore.sqlite(tmp_path / "offsets.db")
    sink = UpsertSink(tmp_path / "sink.db")
    producer = KnownProducer(bootstrap, topic)
    producer.send_all(range(PARTITIONS), 20)
    first = len(producer.flush())
    params = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"}
    stream = KafkaUtils.createDirectStream(
        spark,
        LocationStrategies.PreferConsistent(),
        ConsumerStrategies.Subscribe([topic], params),
        batchInterval=0.5,
        offsetStore=store,
        sourceOptions=SHORT_LIVED_POOL,
    )
    sink.stream = stream
    stream.foreachBatch(sink)
    stream.start()
    try:
        _wait(stream, lambda: sink.count() >= first, "the records before the fault")
        with Feeder(producer, range(PARTITIONS)) as feeder:
            time.sleep(0.5)
            make_fault(kind, healthy, topic, log)()
            time.sleep(0.5)
        feeder.stop()
        produced = producer.flush()
        _wait(stream, lambda: sink.count() >= len(produced), "every record")
        time.sleep(1.5)  # a duplicate would land now
        assert stream.isActive and stream.exception() is None
    finally:
        stream.stop(graceful=True, timeout=60)
    assert stream.exception() is None
    assert len(produced) > first, "records must arrive during the fault"
    assert sink.records() == _expected(produced)
    assert sink.deliveries() == len(produced), "a record was delivered twice"
    # Each batch read exactly its ranges, and the store holds where the stream ended.
    for ranges, rows in sink.batches:
        for r in ranges:
            got = sorted(o for p, o in rows if p == r.partition)
            assert got == list(range(r.from_offset, r.until_offset))
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    ends = {tp.partition: offset for tp, offset in store.load(group, tps).items()}
    assert ends == producer.counts()
    store.close()
