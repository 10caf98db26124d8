"""The receiver stream as a new user first meets it, on the shared ``local[2]`` session:

- the example of docs/receiver.md runs as written (``numReceivers=1``: ``local[2]`` has one slot
  for the receiver and one for the batches) and writes exactly the topic's records;
- a second stream in the same application is refused at ``start()``, because the first one's
  receiver holds a slot (two one-receiver streams on ``local[2]`` used to hang in silence);
- a receiver that gets no partition (another member of the group holds it) is named in a
  warning after 30 s.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from kafka_direct import KafkaUtils
from kafka_direct.errors import ConfigurationError
from tests.integration.kafka_helpers import create_topic, new_topic_name

pytestmark = pytest.mark.serial


def _wait(check: Any, what: str, timeout_s: float = 420.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_the_docs_example_runs_on_local_2_and_a_second_stream_is_refused(
    spark: Any, kafka_bootstrap: str, tmp_path: Path
) -> None:
    B = kafka_bootstrap
    topic = new_topic_name("events")
    create_topic(B, topic, partitions=2)
    # Stamped now: real Kafka's retention deletes records stamped long ago.
    produced = [f"event-{i}" for i in range(100)]
    producer = Producer({"bootstrap.servers": B})
    for i, value in enumerate(produced):
        producer.produce(topic, value=value.encode(), partition=i % 2)
    assert producer.flush(30) == 0
    out = str(tmp_path / "out" / "events")

    # --- docs/receiver.md, as written (names substituted) ---
    stream = KafkaUtils.createStream(
        spark,
        {"bootstrap.servers": B, "group.id": f"billing-{topic}", "auto.offset.reset": "earliest"},
        [topic],
        batchInterval=2.0,
        numReceivers=1,  # local[2]: one slot for the receiver, one for the batches
        walDir=str(tmp_path / "wal" / "billing"),  # every node mounts it at the same path
    )

    def handle(df: Any, offsetRanges: Any) -> None:  # the direct stream's signature and schema
        df.selectExpr("CAST(value AS STRING)").write.mode("append").parquet(out)

    stream.foreachBatch(handle)
    stream.start()
    # --- end of the example (it then calls stream.awaitTermination()) ---
    try:
        second = KafkaUtils.createStream(
            spark,
            {"bootstrap.servers": B, "group.id": f"other-{topic}"},
            [topic],
            batchInterval=2.0,
            walDir=str(tmp_path / "wal" / "other"),
        )
        second.foreachBatch(lambda df, ranges: None)
        with pytest.raises(ConfigurationError) as info:
            second.start()
        assert "Other receiver streams of this application hold 1 slot(s)" in str(info.value)

        def written() -> int:
            # Empty batches leave a directory without data files until the first records.
            if not list(Path(out).glob("*.parquet")):
                return 0
            return int(spark.read.parquet(out).count())

        _wait(lambda: written() >= len(produced), "the example's output")
    finally:
        stream.stop(graceful=True, timeout=60)
    values = sorted(r.value for r in spark.read.parquet(out).collect())
    assert values == sorted(produced)


def test_a_receiver_without_partitions_is_named_in_a_warning(
    spark: Any, kafka_bootstrap: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    topic = new_topic_name("held")
    group = f"g-{topic}"
    create_topic(kafka_bootstrap, topic, partitions=1)
    # Another member of the group holds the only partition for the whole test: the range
    # assignor gives it to the member whose id sorts first, and this client id sorts before
    # the receivers' ("kafka-direct-receiver-N").
    rival = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": group,
            "client.id": "a-rival-member",
            "partition.assignment.strategy": "range",
        }
    )
    rival.subscribe([topic])
    done = threading.Event()
    holding = threading.Event()

    def hold() -> None:
        while not done.is_set():
            rival.poll(0.2)
            if rival.assignment():
                holding.set()

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    try:
        _wait(holding.is_set, "the rival member's assignment", 60)
        stream = KafkaUtils.createStream(
            spark,
            {"bootstrap.servers": kafka_bootstrap, "group.id": group},
            [topic],
            batchInterval=2.0,
            walDir=str(tmp_path / "wal"),
        )
        stream.foreachBatch(lambda df, ranges: None)
        with caplog.at_level(logging.WARNING, logger="kafka_direct.dstream.receiver.supervisor"):
            stream.start()
            try:
                _wait(lambda: "have had no partition" in caplog.text, "the idle warning", 120)
            finally:
                stream.stop(graceful=False, timeout=60)
        warnings = [r.getMessage() for r in caplog.records if "no partition" in r.getMessage()]
        assert len(warnings) == 1
        assert warnings[0].startswith(
            f"Receiver(s) 0 of group '{group}' have had no partition of {topic} for 30 s"
        )
        assert f"--describe --group {group}" in warnings[0]
    finally:
        done.set()
        holder.join(10)
        rival.close()
