#!/usr/bin/env python
"""What the exactly-once marker's row digest costs: one exactly-once write task's
``write_transaction`` on real Apache Kafka, with the digest of each scheme (XXH3-128, the
default; BLAKE2b-128, written before it and by builds without C) and with the sink's
``transactionReplayCheck=count`` (no digest: the marker carries the count only), alternating,
plus each digest alone over the same Arrow batches. Runs in the benchmark process (no Spark:
the task's own code).

    python benchmarks/marker_digest.py                     # starts a one-broker KafkaCluster
    python benchmarks/marker_digest.py --records 200000 --rounds 5
    python benchmarks/marker_digest.py --bootstrap-servers host:9092

Each write is one task of 10,000-row Arrow batches (8-byte keys, 100-byte values) to a
2-partition topic, a micro-batch of its own; the report gives the median seconds per write and
the records per second of each, and the digest's own time. Every write is read back with
read_committed and counted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid

import pyarrow as pa
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from pyspark.sql.types import BinaryType, StructField, StructType

import kafka_direct.producer.digest as row_digest
import kafka_direct.producer.transactional as transactional
from kafka_direct.producer.digest import BLAKE2B_SCHEME, XXH3_SCHEME, RowDigest
from kafka_direct.producer.markers import TaskIdentity
from kafka_direct.source.sink import build_settings

SCHEMA = StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])


def _batches(records: int, size: int = 10_000) -> list[pa.RecordBatch]:
    out = []
    for start in range(0, records, size):
        n = min(size, records - start)
        keys = pa.array([f"{i:08d}".encode() for i in range(start, start + n)], pa.binary())
        values = pa.array([b"v" * 100] * n, pa.binary())
        out.append(pa.RecordBatch.from_arrays([keys, values], names=["key", "value"]))
    return out


def _committed(bootstrap: str, topic: str) -> int:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"count-{uuid.uuid4().hex[:6]}",
         "isolation.level": "read_committed", "enable.auto.commit": False}
    )  # fmt: skip
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(2)])
        seen, idle = 0, 0
        while idle < 6:
            got = consumer.consume(10_000, 0.5)
            seen += len(got)
            idle = 0 if got else idle + 1
        return seen
    finally:
        consumer.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-servers", default=None)
    parser.add_argument("--records", type=int, default=200_000, help="records per write task")
    parser.add_argument("--rounds", type=int, default=5, help="writes per mode")
    args = parser.parse_args(argv)
    cluster = None
    bootstrap = args.bootstrap_servers
    if bootstrap is None:
        from kafka_direct.testing.kafka_cluster import KafkaCluster

        cluster = KafkaCluster().start()
        bootstrap = cluster.bootstrap_servers
    try:
        topic = f"digest-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(60)
        options = {
            "kafka.bootstrap.servers": bootstrap,
            "topic": topic,
            "deliveryGuarantee": "exactly-once",
            "transactionalIdPrefix": f"bench-{topic}",
        }
        # The same writes with each digest scheme the sink can write (the scheme a write uses
        # is the module's DIGEST_SCHEME), and with the sink's count-only markers
        # (transactionReplayCheck=count computes no digest).
        digesting = build_settings(options, SCHEMA, stream=True)
        counting = build_settings(
            {**options, "transactionReplayCheck": "count"}, SCHEMA, stream=True
        )
        modes = {
            f"digest {XXH3_SCHEME} (XXH3-128, the default)": (digesting, XXH3_SCHEME),
            f"digest {BLAKE2B_SCHEME} (BLAKE2b-128)": (digesting, BLAKE2B_SCHEME),
            "count only": (counting, None),
        }
        batches = _batches(args.records)
        times: dict[str, list[float]] = {mode: [] for mode in modes}
        digest_only: dict[str, list[float]] = {XXH3_SCHEME: [], BLAKE2B_SCHEME: []}
        batch_id = 0
        for number in range(args.rounds):
            order = list(modes) if number % 2 == 0 else list(reversed(modes))
            for mode in order:
                settings, scheme = modes[mode]
                row_digest.DIGEST_SCHEME = scheme or XXH3_SCHEME
                started = time.perf_counter()
                result = transactional.write_transaction(
                    settings, batches, TaskIdentity(0, batch_id=batch_id)
                )
                times[mode].append(time.perf_counter() - started)
                assert result.records == args.records and not result.skipped
                batch_id += 1
            for scheme, samples in digest_only.items():
                started = time.perf_counter()
                digest = RowDigest(digesting.columns, scheme)
                for batch in batches:
                    digest.update(batch)
                digest.hexdigest()
                samples.append(time.perf_counter() - started)
        read = _committed(bootstrap, topic)
    finally:
        if cluster is not None:
            cluster.stop()
    expected = args.records * batch_id
    base = statistics.median(times["count only"])
    print(
        f"One exactly-once write task, {args.records} records (8-byte keys, 100-byte values, "
        f"10,000-row batches), 2 partitions, median of {args.rounds} (order reversed every "
        "round)\n\n"
        "| marker | median write (ms) | records/s | vs count only |\n|---|---|---|---|"
    )
    for mode, samples in times.items():
        median = statistics.median(samples)
        print(f"| {mode} | {median * 1000:,.0f} | {args.records / median:,.0f} | "
              f"{base / median:.2f}x |")  # fmt: skip
    print()
    for scheme, samples in digest_only.items():
        alone = statistics.median(samples)
        rate, mb_s = args.records / alone, args.records * 108 / alone / 1e6
        print(f"The digest alone, {scheme}: {alone * 1000:,.1f} ms ({rate:,.0f} records/s, "
              f"{mb_s:,.0f} MB/s of keys and values)")  # fmt: skip
    print(f"Read back (read_committed): {read} of {expected} records")
    return 0 if read == expected else 1


if __name__ == "__main__":
    sys.exit(main())
