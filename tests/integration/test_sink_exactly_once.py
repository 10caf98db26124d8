"""The exactly-once sink on real Apache Kafka (KafkaCluster): what read_committed readers see
through task retries, driver SIGKILLs and restarts, zombie attempts and transaction timeouts;
what read_uncommitted readers see; and the refusals that need a cluster.

Tansu and librdkafka's mock cluster cannot verify any of it (neither filters aborted records
nor fences producers reliably), so this module starts its own real broker.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from kafka_direct.errors import ConfigurationError, KafkaClientError
from kafka_direct.producer.columns import plan_columns
from kafka_direct.producer.markers import (
    Marker,
    MarkerMismatchError,
    ReplayMismatchError,
    TaskIdentity,
    prefix_from_checkpoint,
)
from kafka_direct.producer.transactional import TransactionalProducer, write_transaction
from kafka_direct.source import sink
from kafka_direct.testing.kafka_cluster import KafkaCluster

HERE = Path(__file__).parent
DRIVER, TASK = HERE / "eos_driver.py", HERE / "eos_task.py"
SCHEMA = StructType([StructField("value", BinaryType())])


def transactions_cluster() -> Iterator[str]:
    """A real broker whose coordinator looks for timed-out transactions every second (10 s by
    default); the bootstrap servers, for a module fixture."""
    cluster = KafkaCluster(transaction_abort_timed_out_transaction_cleanup_interval_ms=1000)
    try:
        cluster.start()
    except Exception as exc:  # noqa: BLE001 - a broker that cannot start fails the module
        pytest.fail(f"Real Kafka could not start: {exc}", pytrace=False)
    yield cluster.bootstrap_servers
    cluster.stop()


@pytest.fixture(scope="module")
def bootstrap() -> Iterator[str]:
    yield from transactions_cluster()


@pytest.fixture(autouse=True)
def fresh_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sink, "_checked", {})


def _topics(bootstrap: str, *partitions: int) -> list[str]:
    names = [f"eos-{uuid.uuid4().hex[:8]}" for _ in partitions]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(n, p, 1) for n, p in zip(names, partitions, strict=True)], operation_timeout=30
    )
    for future in futures.values():
        future.result(60)
    return names


def _produce(bootstrap: str, topic: str, values: list[bytes], partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i, value in enumerate(values):
        producer.produce(topic, value, partition=i % partitions)
    assert producer.flush(60) == 0


class Reader:
    """Reads a topic from the start with one isolation level, keeping every value it saw."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, isolation: str) -> None:
        self.values: list[bytes] = []
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"reader-{uuid.uuid4().hex[:6]}",
                "isolation.level": isolation,
                "enable.auto.commit": False,
            }
        )
        self._consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])

    def poll(self, seconds: float = 0.5) -> int:
        for message in self._consumer.consume(10_000, timeout=seconds):
            assert message.error() is None, message.error()
            self.values.append(message.value())
        return len(self.values)

    def read_until(self, count: int, timeout_s: float, settle_s: float = 3.0) -> list[bytes]:
        """Poll until ``count`` values came, then ``settle_s`` more (a duplicate lands then)."""
        deadline = time.monotonic() + timeout_s
        while self.poll() < count and time.monotonic() < deadline:
            pass
        settle = time.monotonic() + settle_s
        while time.monotonic() < settle:
            self.poll()
        return self.values

    def close(self) -> None:
        self._consumer.close()


def _settings(bootstrap: str, topic: str, **options: str) -> sink.WriteSettings:
    raw = {
        "kafka.bootstrap.servers": bootstrap,
        "topic": topic,
        "deliveryGuarantee": "exactly-once",
        **options,
    }
    return sink.build_settings(raw, SCHEMA, stream="transactionalIdPrefix" in options)


def _batches(values: list[bytes]) -> list[pa.RecordBatch]:
    return [pa.RecordBatch.from_arrays([pa.array(values, pa.binary())], names=["value"])]


# -- one task, outside Spark ------------------------------------------------------------------


def test_a_replayed_task_finds_its_marker_and_writes_nothing_again(bootstrap: str) -> None:
    (out,) = _topics(bootstrap, 1)
    settings = _settings(bootstrap, out, transactionalIdPrefix=f"replay-{out}")
    values = [f"v{i}".encode() for i in range(30)]
    first = write_transaction(settings, _batches(values), TaskIdentity(0, batch_id=4))
    again = write_transaction(settings, _batches(values), TaskIdentity(0, batch_id=4))
    assert (first.records, first.skipped, again.records, again.skipped) == (30, False, 30, True)
    # Where the task's time went, step by step (the statistics line's "phases"): every step,
    # in order, together no more than the task took.
    assert first.phases is not None
    assert list(first.phases) == [
        "first rows", "clients", "init_transactions", "marker read", "produce", "flush",
        "send marker", "commit", "close",
    ]  # fmt: skip
    assert all(seconds >= 0 for seconds in first.phases.values())
    assert sum(first.phases.values()) <= first.seconds
    # An empty task opens no transaction and writes no marker.
    empty = write_transaction(settings, [], TaskIdentity(0, batch_id=5))
    assert (empty.records, empty.skipped) == (0, False)
    with pytest.raises(
        ReplayMismatchError, match="committed before, by attempt 0 of that task, with 30 record"
    ):
        write_transaction(settings, _batches(values[:29]), TaskIdentity(0, batch_id=4))
    # As many rows, but other ones (one value changed): the marker's digest refuses the replay.
    other = [*values[:29], b"not-v29"]
    with pytest.raises(ReplayMismatchError) as info:
        write_transaction(settings, _batches(other), TaskIdentity(0, batch_id=4))
    said = str(info.value)
    assert "The micro-batch 4, partition 0 was committed before, by attempt 0" in said
    assert "this replay holds as many rows but other ones (their digest is" in said
    assert "'transactionReplayCheck', 'count'" in said
    # The committed rows in another order, cut into other batches (a packed task's partitions
    # arrive as their fetches do): the same rows, skipped.
    backwards = values[::-1]
    reordered = _batches(backwards[:7]) + _batches(backwards[7:])
    replay = write_transaction(settings, reordered, TaskIdentity(0, batch_id=4))
    assert (replay.records, replay.skipped) == (30, True)
    # transactionReplayCheck=count (rows nondeterministic by design): other rows, same count,
    # skipped; the committed rows stay what readers see (checked below).
    by_count = _settings(
        bootstrap, out, transactionalIdPrefix=f"replay-{out}", transactionReplayCheck="count"
    )
    replay = write_transaction(by_count, _batches(other), TaskIdentity(0, batch_id=4))
    assert (replay.records, replay.skipped) == (30, True)
    with pytest.raises(MarkerMismatchError, match="already committed micro-batch 4, later than"):
        write_transaction(settings, _batches(values), TaskIdentity(0, batch_id=3))
    nxt = write_transaction(settings, _batches([b"next"]), TaskIdentity(0, batch_id=5))
    assert (nxt.records, nxt.skipped) == (1, False)
    reader = Reader(bootstrap, out, 1, "read_committed")
    try:
        assert reader.read_until(31, 60) == [*values, b"next"]
    finally:
        reader.close()


def test_rows_for_several_topics_with_a_marker_topic(bootstrap: str, spark: Any) -> None:
    """A df.write whose rows carry their topic (and key, headers), the markers on a topic of
    their own; then a replay of one task outside Spark: skipped with the same rows, refused
    with the same values sent to other topics."""
    first, second, markers = _topics(bootstrap, 2, 1, 1)
    rows = [
        (f"k{i}", f"v{i:03d}".encode(), first if i % 3 else second, [("n", str(i).encode())])
        for i in range(300)
    ]
    schema = (
        "key string, value binary, topic string, headers array<struct<key:string,value:binary>>"
    )
    df = spark.createDataFrame(rows, schema).repartition(3)
    prefix = f"multi-{markers}"
    (
        df.write.format("kafka_direct")
        .mode("append")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("deliveryGuarantee", "exactly-once")
        .option("transactionalIdPrefix", prefix)
        .option("transactionMarkerTopic", markers)
        .save()
    )
    for topic, partitions in ((first, 2), (second, 1)):
        reader = Reader(bootstrap, topic, partitions, "read_committed")
        try:
            got = reader.read_until(sum(1 for r in rows if r[2] == topic), 60, settle_s=1)
        finally:
            reader.close()
        assert sorted(got) == sorted(r[1] for r in rows if r[2] == topic), topic
    # Each task's marker is on partition 0 of the marker topic; the marker topic holds no record.
    committed = []
    for n in range(3):
        watcher = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{prefix}-{n}",
                            "isolation.level": "read_committed"})  # fmt: skip
        try:
            (tp,) = watcher.committed([TopicPartition(markers, 0)], timeout=10)
            _, end = watcher.get_watermark_offsets(TopicPartition(markers, 0), timeout=10)
        finally:
            watcher.close()
        marker = Marker.decode(tp.metadata)
        assert marker is not None and marker.digest is not None, (n, tp)
        committed.append(marker.records)
    assert sum(committed) == len(rows) and end == 0
    # A task replayed outside Spark: the same rows skip; the same values to other topics refuse.
    columns = StructType([StructField("value", BinaryType()), StructField("topic", StringType())])
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "deliveryGuarantee": "exactly-once",
        "transactionalIdPrefix": f"{prefix}-replay",
        "transactionMarkerTopic": markers,
    }
    settings = sink.build_settings(options, columns, stream=True)
    values = pa.array([r[1] for r in rows[:20]], pa.binary())

    def batch(topics: list[str]) -> list[pa.RecordBatch]:
        return [pa.RecordBatch.from_arrays([values, pa.array(topics)], names=["value", "topic"])]

    topics = [r[2] for r in rows[:20]]
    wrote = write_transaction(settings, batch(topics), TaskIdentity(0, batch_id=0))
    again = write_transaction(settings, batch(topics), TaskIdentity(0, batch_id=0))
    assert (wrote.records, wrote.skipped, again.skipped) == (20, False, True)
    swapped = [second if t == first else first for t in topics]
    with pytest.raises(ReplayMismatchError, match="micro-batch 0, partition 0 was committed"):
        write_transaction(settings, batch(swapped), TaskIdentity(0, batch_id=0))


def _failing_partition_1(bootstrap: str, topic: str, group: str):  # type: ignore[no-untyped-def]
    """A mapInArrow function whose partition 1 fails once partition 0's marker (``group``'s
    committed offset on ``topic``) is committed: the write fails with task 0 committed."""

    def run(batches):  # type: ignore[no-untyped-def]
        # Imported here: the function is pickled by value, and its module's names with it.
        import time

        from confluent_kafka import Consumer, TopicPartition
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is None or ctx.partitionId() != 1:
            yield from batches
            return
        watcher = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed"}
        )
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                (tp,) = watcher.committed([TopicPartition(topic, 0)], timeout=10)
                if tp.offset >= 0:
                    break
                time.sleep(0.2)
        finally:
            watcher.close()
        raise RuntimeError("injected failure of partition 1, after task 0 committed")

    return run


def test_a_rerun_with_the_same_write_id_skips_the_committed_tasks(
    bootstrap: str, spark: Any
) -> None:
    """Review: a failed df.write run again wrote its committed tasks' rows again (each
    df.write had a new write id). With transactionalWriteId, a re-run skips them."""
    (out,) = _topics(bootstrap, 1)
    prefix = f"rerun-{out}"
    df = spark.range(0, 200, numPartitions=2).selectExpr(
        "cast(cast(id as string) as binary) as value"
    )
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "topic": out,
        "deliveryGuarantee": "exactly-once",
        "transactionalIdPrefix": prefix,
        "transactionalWriteId": "numbers-1",
    }
    failing = df.mapInArrow(_failing_partition_1(bootstrap, out, f"{prefix}-0"), df.schema)
    with pytest.raises(Exception, match="injected failure of partition 1"):
        failing.write.format("kafka_direct").mode("append").options(**options).save()
    for _ in range(2):  # the re-run, then a re-run of the finished write: nothing new
        df.write.format("kafka_direct").mode("append").options(**options).save()
    reader = Reader(bootstrap, out, 1, "read_committed")
    try:
        seen = reader.read_until(200, 60)
    finally:
        reader.close()
    assert sorted(seen) == sorted(str(i).encode() for i in range(200)), len(seen)
    # Each task's marker names the write and carries its start (a retry that finds a write
    # begun after its own refuses: tests/unit/producer/test_markers.py).
    watcher = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{prefix}-1"})
    try:
        (tp,) = watcher.committed([TopicPartition(out, 0)], timeout=10)
    finally:
        watcher.close()
    marker = Marker.decode(tp.metadata)
    assert marker is not None and marker.write_id == "numbers-1" and marker.started_ms


def _start_task(
    bootstrap: str, topic: str, prefix: str, tag: str, pause: bool, timeout_ms: int, copy: str = ""
) -> subprocess.Popen[str]:
    args = [bootstrap, topic, prefix, "7", tag, "1" if pause else "0", str(timeout_ms)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    errors_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"eos-task-{prefix}-{tag}{copy}.err"
    with open(errors_path, "w") as errors:
        proc = subprocess.Popen(
            [sys.executable, str(TASK), *args],
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            env=env,
        )
    proc.errors_path = errors_path  # type: ignore[attr-defined]
    return proc


def _errors(proc: subprocess.Popen[str]) -> str:
    path: Path = proc.errors_path  # type: ignore[attr-defined]
    return path.read_text()[-3000:] if path.exists() else ""


def _wait_paused(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline()  # blocks until the task prints PAUSING (or exits)
    assert line.strip() == "PAUSING", f"{line!r}; stderr:\n{_errors(proc)}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the stop follows the line
        with open(f"/proc/{proc.pid}/stat") as stat:
            if stat.read().split(") ", 1)[1].startswith("T"):
                return
        time.sleep(0.05)
    pytest.fail("the task did not stop itself")


def _finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=120)
    return proc.returncode, out.strip()


def _stable_end(bootstrap: str, topic: str) -> tuple[int, int]:
    """(the position a read_committed reader reaches, the last stable offset) of partition 0."""
    reader = Reader(bootstrap, topic, 1, "read_committed")
    try:
        reader.poll(2.0)
        (position,) = reader._consumer.position([TopicPartition(topic, 0)])
        _, end = reader._consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return position.offset, end
    finally:
        reader.close()


def _zombie_then_retry(
    bootstrap: str, wait_s: float, timeout_ms: int
) -> tuple[str, str, str, tuple[int, int]]:
    """A: stops with its transaction open; after ``wait_s``, B (the retry) writes the same task;
    then A resumes. Returns (A's outcome, B's outcome, topic, (stable offset, log end) just
    before B started)."""
    (out,) = _topics(bootstrap, 1)
    prefix = f"zombie-{out}"
    zombie = _start_task(bootstrap, out, prefix, "a", True, timeout_ms)
    try:
        _wait_paused(zombie)
        time.sleep(wait_s)
        before = _stable_end(bootstrap, out)
        code, retry_said = _finish(_start_task(bootstrap, out, prefix, "b", False, timeout_ms))
        assert code == 0, retry_said
    finally:
        zombie.send_signal(signal.SIGCONT)
    code, zombie_said = _finish(zombie)
    assert code == 3, zombie_said
    return zombie_said, retry_said, out, before


def _check_views(bootstrap: str, topic: str) -> None:
    """read_committed: the retry's 20 records once; read_uncommitted: those, plus the zombie's
    first ten, which were written in its transaction and aborted."""
    b = [f"b-{i}".encode() for i in range(20)]
    committed = Reader(bootstrap, topic, 1, "read_committed")
    uncommitted = Reader(bootstrap, topic, 1, "read_uncommitted")
    try:
        assert committed.read_until(20, 60) == b
        seen = uncommitted.read_until(30, 60)
    finally:
        committed.close()
        uncommitted.close()
    assert sorted(seen) == sorted(b + [f"a-{i}".encode() for i in range(10)])


def test_a_paused_attempt_cannot_commit_after_its_retry(bootstrap: str) -> None:
    zombie_said, retry_said, topic, _ = _zombie_then_retry(bootstrap, 0.0, 300_000)
    assert retry_said == "COMMITTED 20"
    assert zombie_said.startswith("FAILED: ") and "_FENCED" in zombie_said, zombie_said
    assert "a newer attempt of this task (or a newer run of the query) took over" in zombie_said
    _check_views(bootstrap, topic)


def test_a_producer_fenced_with_its_transaction_open_closes_without_raising(
    bootstrap: str,
) -> None:
    """The ending of a task whose copy took over: its producer, fenced before it noticed, is
    closed in the task's ``finally``. confluent-kafka's close then aborts the open transaction
    and raises the fence again (found by the test below under load: the task died of that
    error, printing no outcome). The close must leave the task's own outcome standing."""
    (out,) = _topics(bootstrap, 1)
    txn_id = f"fenced-{out}"
    config = {"bootstrap.servers": bootstrap, "transactional.id": txn_id}
    first = TransactionalProducer(config)
    first.init_transactions(30)
    first.begin_transaction()
    batch = pa.RecordBatch.from_arrays([pa.array([b"v"], pa.binary())], names=["value"])
    first.produce_batch(batch, plan_columns([("value", "binary")], out))
    first.flush(30)  # the record is in the open transaction
    taker = Producer(config)
    taker.init_transactions(30)  # fences the first producer
    first.close()  # raised KafkaException(_FENCED, "Failed to end transaction") before
    taker.close()
    # The taker's initialisation aborted the transaction: the record, then the abort marker.
    assert _stable_end(bootstrap, out) == (2, 2)
    committed = Reader(bootstrap, out, 1, "read_committed")
    uncommitted = Reader(bootstrap, out, 1, "read_uncommitted")
    try:
        assert uncommitted.read_until(1, 30, settle_s=1.0) == [b"v"]
        assert committed.read_until(0, 0, settle_s=2.0) == []
    finally:
        committed.close()
        uncommitted.close()


def test_copies_of_a_task_running_at_once_commit_once(bootstrap: str) -> None:
    """What a speculative copy is to Kafka: two attempts of one task, the same rows, started
    together. Whichever initialises second fences the first, or finds its commit and skips:
    exactly one commits. (spark.speculation cannot make one on a single machine: local mode
    does not speculate, and Spark launches no speculative copy on a host where the task runs.)"""
    (out,) = _topics(bootstrap, 1)
    prefix = f"copies-{out}"
    copies = [_start_task(bootstrap, out, prefix, "s", False, 300_000, copy=c) for c in "12"]
    said = sorted(_finish(c)[1] for c in copies)
    committed = [s for s in said if s == "COMMITTED 20"]
    other = [s for s in said if s != "COMMITTED 20"]
    assert len(committed) == 1, said
    assert other[0] == "SKIPPED 20" or (
        other[0].startswith("FAILED: ") and "_FENCED" in other[0]
    ), said
    reader = Reader(bootstrap, out, 1, "read_committed")
    try:
        assert reader.read_until(20, 60) == [f"s-{i}".encode() for i in range(20)]
    finally:
        reader.close()


def test_a_restart_after_the_transaction_timeout(bootstrap: str) -> None:
    # The coordinator aborts the stopped attempt's transaction once 5 s passed; the restart
    # then finds nothing committed and writes; the resumed attempt is refused.
    zombie_said, retry_said, topic, before = _zombie_then_retry(bootstrap, 9.0, 5_000)
    # Before the restart: the coordinator had aborted (ten records and the abort marker), so
    # read_committed readers were no longer held back.
    assert before == (11, 11), before
    assert retry_said == "COMMITTED 20"
    assert zombie_said.startswith("FAILED: "), zombie_said
    # Review: said "a newer attempt ... took over", though the coordinator had aborted it.
    assert "longer than kafka.transaction.timeout.ms=5000, so the transaction coordinator" in (
        zombie_said
    ), zombie_said
    _check_views(bootstrap, topic)


# -- refusals that need a cluster -------------------------------------------------------------


def test_a_missing_marker_topic_is_refused_before_anything_is_written(bootstrap: str) -> None:
    (out,) = _topics(bootstrap, 1)
    with pytest.raises(ConfigurationError) as info:
        _settings(bootstrap, out, transactionalIdPrefix="p", transactionMarkerTopic="no-such")
    message = str(info.value)
    assert "'transactionMarkerTopic'" in message and "'no-such'" in message
    assert "Create the topic first; nothing was written." in message


@pytest.mark.serial
def test_a_cluster_whose_transactions_cannot_work_is_refused() -> None:
    # One broker, but a transaction log that wants three replicas: no coordinator can start.
    with KafkaCluster(transaction_state_log_replication_factor=3) as cluster:
        (out,) = _topics(cluster.bootstrap_servers, 1)
        started = time.monotonic()
        with pytest.raises(KafkaClientError) as info:
            _settings(cluster.bootstrap_servers, out, transactionalIdPrefix="p")
        assert time.monotonic() - started < 60
    message = str(info.value)
    assert "deliveryGuarantee 'exactly-once' needs Kafka transactions" in message
    assert "transaction.state.log.replication.factor" in message
    # Not waited out as a moving coordinator would be: the cluster says why it cannot work.
    assert (
        "no __transaction_state topic yet, and creating it needs 3 brokers "
        "(transaction.state.log.replication.factor=3) where 1 answered"
    ) in message
    assert "Nothing was written." in message


# -- Spark: streams through SIGKILLs, batch writes through task failures ------------------------


def _spark(args: list[str], log: Path, **env_vars: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), **env_vars)
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, str(DRIVER), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # the kill takes the JVM and the Python workers too
        )


def _kill(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


#: Where each driver SIGKILL of the stream test lands (eos_driver.py's HOLD): with every task of
#: a micro-batch holding its transaction open, or with partition 0's task committed and
#: partition 1's still open (so Spark has not written the micro-batch to its commit log). The
#: third kill's restart waits past the transaction timeout, the others come at once.
KILLS = ("open", "committed", "open", "committed")


class _Watch:
    """What the stream test looks at before it kills: the output's open transactions and a
    write task's marker."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, prefix: str) -> None:
        self.topic, self.partitions, self.prefix = topic, partitions, prefix

        def consumer(isolation: str, group: str) -> Consumer:
            return Consumer(
                {"bootstrap.servers": bootstrap, "group.id": group,
                 "isolation.level": isolation, "enable.auto.commit": False}
            )  # fmt: skip

        self._log_end = consumer("read_uncommitted", f"watch-{uuid.uuid4().hex[:6]}")
        self._stable = consumer("read_committed", f"{prefix}-0")  # partition 0's marker group

    def open_transactions(self) -> list[int]:
        """The output partitions whose log runs past their last stable offset."""
        open_ = []
        for p in range(self.partitions):
            tp = TopicPartition(self.topic, p)
            _, end = self._log_end.get_watermark_offsets(tp, timeout=10, cached=False)
            _, stable = self._stable.get_watermark_offsets(tp, timeout=10, cached=False)
            if end > stable:
                open_.append(p)
        return open_

    def committed_batch(self) -> int | None:
        """The micro-batch that write task 0 last committed (its marker), if any."""
        (tp,) = self._stable.committed([TopicPartition(self.topic, 0)], timeout=10)
        marker = Marker.decode(tp.metadata) if tp.offset >= 0 else None
        return None if marker is None else marker.batch_id

    def close(self) -> None:
        self._log_end.close()
        self._stable.close()


def _hold_and_kill(
    proc: subprocess.Popen[bytes], kind: str, batch: int, holds: Path, watch: _Watch, log: Path
) -> str:
    """Wait until micro-batch ``batch`` stands where ``kind`` says (eos_driver.py's HOLD), then
    SIGKILL the driver; returns what was seen there."""
    wanted = [holds / f"held-{batch}-{p}" for p in ((0, 1) if kind == "open" else (1,))]
    deadline = time.monotonic() + 600  # a driver start takes minutes at load average 60
    seen = ""
    try:
        while not seen:
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(
                    f"micro-batch {batch} was not held ({kind}): "
                    f"{[w.name for w in wanted if w.exists()]} held, open transactions in "
                    f"{watch.open_transactions()}, task 0's marker at micro-batch "
                    f"{watch.committed_batch()}; driver log:\n{log.read_text()[-3000:]}"
                )
            time.sleep(0.2)
            if not all(w.exists() for w in wanted):
                continue
            open_ = watch.open_transactions()
            if kind == "open" and open_:
                seen = f"transactions open in output partitions {open_}"
            elif kind == "committed" and watch.committed_batch() == batch:
                seen = f"task 0 committed, task 1's transaction open (in {open_ or 'none yet'})"
    finally:
        _kill(proc)
    return seen


def writes_each_record_once_through_driver_sigkills(
    bootstrap: str, tmp_path: Path, fail_first: bool
) -> None:
    """The stream sink through four SIGKILLs of its driver, each at a point chosen by
    construction (:data:`KILLS`), then a run to the end (test_sink_exactly_once_kills*.py: one
    file per variant, so that the serial run's two workers take one each)."""
    source, out = _topics(bootstrap, 2, 2)
    values = [f"r{i:05d}".encode() for i in range(1000)]
    _produce(bootstrap, source, values, 2)
    checkpoint, log, holds = tmp_path / "ck", tmp_path / "driver.log", tmp_path / "holds"
    holds.mkdir()
    workers = tmp_path / "workers.log"
    env = {"KAFKA_DIRECT_LOG_FILE": str(workers), "KAFKA_DIRECT_LOG_LEVEL": "INFO"}
    args = ["stream", bootstrap, source, out, str(checkpoint), "1" if fail_first else "0"]
    watch = _Watch(bootstrap, out, 2, prefix_from_checkpoint(str(checkpoint)))
    landed: list[str] = []
    try:
        batch = 1  # micro-batch 0 runs whole; each restart replays the held one, holds the next
        for number, kind in enumerate(KILLS):
            proc = _spark([*args, f"{kind}:{batch}:{holds}"], log, **env)
            seen = _hold_and_kill(proc, kind, batch, holds, watch, log)
            # By construction the held micro-batch is not in Spark's commit log: its held tasks
            # never finished. The restart replays it.
            assert not (checkpoint / "commits" / str(batch)).exists(), (kind, batch)
            assert (checkpoint / "offsets" / str(batch)).exists(), (kind, batch)
            landed.append(f"micro-batch {batch}: {seen}")
            if number == 2:
                time.sleep(12)  # past the transaction timeout (10 s): the coordinator aborts
            batch += 1
        proc = _spark(args, log, **env)
        committed = Reader(bootstrap, out, 2, "read_committed")
        try:
            seen_values = committed.read_until(len(values), 600, settle_s=5)
        finally:
            committed.close()
            _kill(proc)
        uncommitted = Reader(bootstrap, out, 2, "read_uncommitted")
        try:
            raw = uncommitted.read_until(len(values) + 1, 60, settle_s=1)
        finally:
            uncommitted.close()
    finally:
        watch.close()
    print("the kills landed:", *landed, sep="\n  ")
    assert len(landed) == len(KILLS) >= 3
    counts = collections.Counter(seen_values)
    duplicates = {v: n for v, n in counts.items() if n > 1}
    assert not duplicates, f"{len(duplicates)} value(s) seen more than once: {landed}"
    assert sorted(seen_values) == values
    # The kills with transactions open left aborted records, which only read_uncommitted sees.
    assert set(raw) == set(values) and len(raw) > len(values), (len(raw), len(values))
    # Every replay of a micro-batch whose task 0 had committed skipped that task.
    said = workers.read_text()
    for number, kind in enumerate(KILLS):
        if kind == "committed":
            assert (
                f"The micro-batch {number + 1}, partition 0 was committed by an earlier attempt"
                in said
            ), f"the replay of micro-batch {number + 1} did not skip its committed task 0"


@pytest.mark.serial
@pytest.mark.slow
def test_a_marker_topic_changed_mid_batch_finds_the_committed_task(
    bootstrap: str, tmp_path: Path
) -> None:
    """Review: a stream killed with task 0 of micro-batch 1 committed (not in Spark's commit
    log), restarted with another transactionMarkerTopic: task 0 found no marker on the new
    topic and wrote its rows again. Its marker on the old topic (the output, by default) is
    now found, and the replay skips it."""
    source, out, markers = _topics(bootstrap, 2, 2, 1)
    values = [f"m{i:04d}".encode() for i in range(200)]
    _produce(bootstrap, source, values, 2)
    checkpoint, log, holds = tmp_path / "ck", tmp_path / "driver.log", tmp_path / "holds"
    holds.mkdir()
    workers = tmp_path / "workers.log"
    env = {"KAFKA_DIRECT_LOG_FILE": str(workers), "KAFKA_DIRECT_LOG_LEVEL": "INFO"}
    args = ["stream", bootstrap, source, out, str(checkpoint), "0"]
    watch = _Watch(bootstrap, out, 2, prefix_from_checkpoint(str(checkpoint)))
    try:
        proc = _spark([*args, f"committed:1:{holds}"], log, **env)
        _hold_and_kill(proc, "committed", 1, holds, watch, log)
    finally:
        watch.close()
    assert not (checkpoint / "commits" / "1").exists()
    proc = _spark(args, log, **env, EOS_MARKER_TOPIC=markers)
    committed = Reader(bootstrap, out, 2, "read_committed")
    try:
        seen = committed.read_until(len(values), 600, settle_s=5)
    finally:
        committed.close()
        _kill(proc)
    duplicates = {v: n for v, n in collections.Counter(seen).items() if n > 1}
    assert not duplicates, f"{len(duplicates)} value(s) seen more than once"
    assert sorted(seen) == values
    said = workers.read_text()
    assert "The micro-batch 1, partition 0 was committed by an earlier attempt" in said
    assert f"its marker is on topic '{out}', not on the marker topic '{markers}'" in said


@pytest.mark.serial
@pytest.mark.slow
def test_a_batch_write_whose_tasks_fail_once_writes_each_record_once(
    bootstrap: str, tmp_path: Path
) -> None:
    source, out = _topics(bootstrap, 2, 2)
    values = [f"b{i:04d}".encode() for i in range(400)]
    _produce(bootstrap, source, values, 2)
    log = tmp_path / "driver.log"
    proc = _spark(["batch", bootstrap, source, out, f"job-{out}", "1"], log)
    try:
        assert proc.wait(600) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            _kill(proc)
    assert log.read_text().count("injected failure of a task's first attempt") >= 4
    committed = Reader(bootstrap, out, 2, "read_committed")
    uncommitted = Reader(bootstrap, out, 2, "read_uncommitted")
    try:
        assert sorted(committed.read_until(len(values), 60)) == values
        # Each task's first attempt failed only once rows of its open transaction were in the
        # log (eos_driver.py): aborted records, at least one per task, besides the committed.
        raw = uncommitted.read_until(len(values) + 4, 60, settle_s=2)
    finally:
        committed.close()
        uncommitted.close()
    aborted = collections.Counter(raw) - collections.Counter(values)
    assert set(raw) == set(values) and aborted.total() >= 4, (len(raw), aborted.total())
