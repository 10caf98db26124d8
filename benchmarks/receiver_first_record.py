#!/usr/bin/env python
"""How long a receiver stream with default settings takes to hand its first record to the
batch function, and whether a group stopped before it joined gets partitions again.

    python benchmarks/receiver_first_record.py --bootstrap-servers HOST:PORT
    python benchmarks/receiver_first_record.py            # the embedded broker (Tansu)

Runs in the benchmark process (the Spark driver, ``local[2]``). One receiver, defaults,
``batchInterval=1.0``, 10 records already in a one-partition topic, ``auto.offset.reset=
earliest``. For each case it prints one JSON line: when ``start()`` returned, when the group
assigned the receiver its partition, when the receiver had logged records, and when the batch
function first saw them, all in seconds from ``start()``; and the batches' sizes and times.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
import uuid
from typing import Any


def _stream(spark: Any, bootstrap: str, topic: str, group: str) -> tuple[Any, dict[str, float]]:
    from kafka_direct import KafkaUtils

    seen: dict[str, float] = {}

    def handle(df: Any, offset_ranges: Any) -> None:
        if df.count() and "first" not in seen:
            seen["first"] = time.monotonic()

    stream = KafkaUtils.createStream(
        spark,
        {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"},
        [topic],
        batchInterval=1.0,
        numReceivers=1,
        walDir=tempfile.mkdtemp(prefix="first-record-"),
    )
    stream.foreachBatch(handle)
    return stream, seen


def measure(spark: Any, bootstrap: str, topic: str, group: str, wait_s: float) -> dict[str, Any]:
    stream, seen = _stream(spark, bootstrap, topic, group)
    began = time.monotonic()
    stream.start()
    out: dict[str, Any] = {"start_returned_s": round(time.monotonic() - began, 1)}
    while "first" not in seen and time.monotonic() < began + wait_s:
        status = stream.receivers[0] if stream.receivers else None
        if status is not None and status.assignment and "assigned_s" not in out:
            out["assigned_s"] = round(time.monotonic() - began, 1)
        if status is not None and status.records and "received_s" not in out:
            out["received_s"] = round(time.monotonic() - began, 1)
        time.sleep(0.1)
    out["first_record_s"] = round(seen["first"] - began, 1) if "first" in seen else None
    out["batches"] = [(b.num_records, round(b.processing_time_s, 1)) for b in stream.batches][:8]
    stream.stop(graceful=False, timeout=30)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap-servers")
    parser.add_argument("--wait", type=float, default=120.0, help="seconds per case (120)")
    args = parser.parse_args(argv)
    from confluent_kafka import Consumer, Producer
    from confluent_kafka import TopicPartition as CkTopicPartition

    from kafka_direct.testing.broker import create_topic
    from kafka_direct.testing.demo import bootstrap_or_embedded
    from kafka_direct.testing.local import local_spark

    with contextlib.ExitStack() as stack:
        bootstrap = stack.enter_context(bootstrap_or_embedded(args.bootstrap_servers))
        topics = []
        for _ in range(2):
            topic = f"first-record-{uuid.uuid4().hex[:6]}"
            create_topic(bootstrap, topic, partitions=1)
            producer = Producer({"bootstrap.servers": bootstrap})
            for i in range(10):
                producer.produce(topic, value=f"r{i}".encode())
            producer.flush(30)
            topics.append(topic)
        spark = local_spark("first-record", cores=2)
        try:
            fresh = measure(spark, bootstrap, topics[0], f"g-{uuid.uuid4().hex[:6]}", args.wait)
            print(json.dumps({"case": "a fresh group", **fresh}), flush=True)
            group = f"g-{uuid.uuid4().hex[:6]}"
            early, _ = _stream(spark, bootstrap, topics[1], group)
            early.start()
            early.stop(graceful=False, timeout=30)  # at once: before the group has assigned
            consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{group}-peek"})
            with contextlib.closing(consumer):
                committed = consumer.committed([CkTopicPartition(topics[1], 0)], timeout=10)
                end = consumer.get_watermark_offsets(CkTopicPartition(topics[1], 0), timeout=10)
            again = measure(spark, bootstrap, topics[1], group, args.wait)
            print(
                json.dumps(
                    {
                        "case": "the group of a run stopped before it joined, started again",
                        "committed_by_the_stopped_run": committed[0].offset,
                        "log_end": end[1],
                        **again,
                    }
                ),
                flush=True,
            )
        finally:
            spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
