"""The Kafka sink in a stream: ``readStream.format("kafka_direct")`` → transform →
``writeStream.format("kafka_direct")`` with a checkpoint, on the real broker and a real Spark.

- exact output; stop, produce more, restart: only the new records are written;
- a driver SIGKILLed mid-stream and restarted from its checkpoint: nothing is lost, and the
  duplicates (the sink is at-least-once: a micro-batch whose commit the kill prevented is written
  again) are counted and reported.

Run as a script, this module is the crash test's driver:
``python test_sink_stream.py BOOTSTRAP SOURCE TARGET CHECKPOINT`` (it never stops by itself).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.integration.kafka_helpers import produce_known
from tests.integration.test_sink_batch import read_topic


def pipeline(
    spark: Any, bootstrap: str, source: str, target: str, checkpoint: str, **trigger: Any
) -> Any:
    """Each source record becomes one target record whose value names where it came from."""
    records = (
        spark.readStream.format("kafka_direct")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", trigger.pop("max_offsets", "1000000"))
        .load()
    )
    out = records.selectExpr(
        "key",
        "concat(cast(value as string), ' from ', cast(partition as string), '@', "
        "cast(offset as string)) as value",
    )
    return (
        out.writeStream.format("kafka_direct")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", target)
        .option("checkpointLocation", checkpoint)
        .trigger(**trigger)
        .start()
    )


def expected_values(records: list[Any]) -> Counter[bytes]:
    return Counter(f"{r.value.decode()} from {r.partition}@{r.offset}".encode() for r in records)


@pytest.mark.tansu_smoke
def test_stream_writes_exactly_then_a_restart_writes_only_the_new_records(
    spark, kafka_bootstrap, make_topic, tmp_path
):
    source, target = make_topic(partitions=2), make_topic(partitions=2)
    checkpoint = str(tmp_path / "ck")
    first = produce_known(kafka_bootstrap, source, per_partition=60, partitions=2)
    query = pipeline(spark, kafka_bootstrap, source, target, checkpoint, availableNow=True)
    assert query.awaitTermination(120)
    assert query.exception() is None
    got = read_topic(kafka_bootstrap, target, 120)
    assert Counter(v for _, _, v, _ in got) == expected_values(first)  # each exactly once
    # Keys travel unchanged, so each lands where Java's partitioner would put it.
    assert {(k, v.split(b" from ")[0]) for _, k, v, _ in got} == {(r.key, r.value) for r in first}

    second = produce_known(kafka_bootstrap, source, per_partition=25, partitions=2, start_index=60)
    query = pipeline(spark, kafka_bootstrap, source, target, checkpoint, availableNow=True)
    assert query.awaitTermination(120)
    assert query.exception() is None
    got = read_topic(kafka_bootstrap, target, 170)
    assert Counter(v for _, _, v, _ in got) == expected_values(first + second)


def test_a_stream_with_a_column_the_sink_cannot_write_fails_with_the_columns_name(
    spark, kafka_bootstrap, make_topic, tmp_path
):
    source = make_topic()
    records = (
        spark.readStream.format("kafka_direct")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("subscribe", source)
        .load()
    )
    query = (
        records.selectExpr("offset as value")
        .writeStream.format("kafka_direct")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("topic", "never-written")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception) as info:  # StreamingQueryException, our error inside
        query.awaitTermination(60)
    assert "Column 'value' has type bigint" in str(info.value)
    assert "string or binary" in str(info.value)


# -- SIGKILL mid-stream ---------------------------------------------------------------------------


class TopicCount:
    """Counts a topic's records as they arrive (a plain consumer, assigned from offset 0)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "sink-crash-count"})
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self.values: Counter[bytes] = Counter()

    def poll(self) -> int:
        for message in self.consumer.consume(10_000, 0.2):
            if message.error() is None:
                self.values[message.value()] += 1
        return sum(self.values.values())

    def close(self) -> None:
        self.consumer.close()


def _run_driver(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, __file__, *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # so the kill takes the JVM child too
        )


def _wait_for(
    count: TopicCount,
    proc: subprocess.Popen[bytes],
    at_least: int,
    log: Path,
    timeout_s: float = 180,
) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        n = count.poll()
        if n >= at_least:
            return n
        if proc.poll() is not None:
            pytest.fail(f"driver exited early ({proc.returncode}); log:\n{log.read_text()[-3000:]}")
    tail = log.read_text()[-3000:]
    pytest.fail(f"timed out waiting for {at_least} records (have {count.poll()}); log:\n{tail}")


@pytest.mark.slow
def test_sigkill_mid_stream_then_restart_loses_nothing_and_counts_the_duplicates(
    kafka_bootstrap, make_topic, tmp_path, record_property
):
    source, target = make_topic(partitions=2), make_topic(partitions=2)
    produced = produce_known(kafka_bootstrap, source, per_partition=100, partitions=2)
    expected = expected_values(produced)
    log = tmp_path / "driver.log"
    args = [kafka_bootstrap, source, target, str(tmp_path / "ck")]
    count = TopicCount(kafka_bootstrap, target, 2)
    try:
        proc = _run_driver(args, log)
        try:
            seen = _wait_for(count, proc, 60, log)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
        assert seen < len(produced), "the kill should land before the stream is done"

        proc = _run_driver(args, log)
        try:
            deadline = time.monotonic() + 180
            while set(expected) - set(count.values) and time.monotonic() < deadline:
                count.poll()
                assert proc.poll() is None, log.read_text()[-3000:]
            time.sleep(2)  # a stray batch would land now
            count.poll()
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    finally:
        count.close()

    missing = set(expected) - set(count.values)
    unexpected = set(count.values) - set(expected)
    duplicates = sum(n - 1 for n in count.values.values())
    record_property("sink_duplicates_after_sigkill", duplicates)
    print(f"\nSIGKILL mid-stream: {len(expected)} records, none lost, {duplicates} duplicate(s)")
    assert missing == set() and unexpected == set()  # at-least-once: nothing lost, nothing made up
    # A duplicate can only come from re-running the micro-batch the kill interrupted: at most
    # one trigger's worth of records (maxOffsetsPerTrigger=40) per kill.
    assert duplicates <= 40, count.values.most_common(5)


def main(bootstrap: str, source: str, target: str, checkpoint: str) -> None:
    from kafka_direct.testing.local import local_spark

    spark = local_spark("sink-crash-driver")
    query = pipeline(
        spark,
        bootstrap,
        source,
        target,
        checkpoint,
        max_offsets="40",
        processingTime="300 milliseconds",
    )
    query.awaitTermination()


if __name__ == "__main__":
    main(*sys.argv[1:5])
