#!/usr/bin/env python
"""What a small write costs by the number of partitions it touches:
``python benchmarks/produce_fanout.py``. Runs in the benchmark process alone (no Spark; Apache
Kafka from ``kafka_direct.testing.KafkaCluster`` unless ``--bootstrap-servers`` is given).

A batch write task after a shuffle holds a few hundred keyed rows that land on most of the
topic's partitions, and it ends with a flush: the task's time is that flush's. librdkafka sends
one ProduceRequest per partition (librdkafka issue #1700), and a broker answers a connection's
requests one at a time, so the flush takes about one round trip per partition touched; the Java
producer puts every partition of a broker into one request. This benchmark separates that from
kafka_direct's own code. For each ``--partitions`` count, a topic of that many partitions gets
``--records`` keyed records of ``--size`` bytes, then a flush, ``--flushes`` times, alternating:

- ``librdkafka``: a plain confluent-kafka ``Producer`` with the sink's producer settings
  (``kafka_direct.config.clients.producer_config``, ``delivery.report.only.error``): ``produce``
  each record, then ``flush()``, as an application would;
- ``kafka_direct``: the sink's write task (``kafka_direct.producer.write.write_batches``, the C
  path, its pooled producer) writing one Arrow batch of the same rows.

Both producers are warm (created before the first timed flush). The report gives each one's
median and 90th percentile per flush, and the partitions the records touched.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kafka_direct_bench.common import log, percentile, run_header, run_on_kafka
from kafka_direct_bench.dataset import create_topic, new_topic

WRITERS = ("librdkafka", "kafka_direct")


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--partitions", default="1,10,100", help="comma-separated topic sizes")
    p.add_argument("--records", type=int, default=200, help="records per flush")
    p.add_argument("--size", type=int, default=100, help="value bytes")
    p.add_argument("--flushes", type=int, default=60, help="timed flushes per writer and size")
    p.add_argument("--bootstrap-servers", default=None)
    p.add_argument("--json", default=None)
    return p.parse_args(argv)


def measure(args: argparse.Namespace, bootstrap: str, partitions: int) -> dict[str, Any]:
    import pyarrow as pa
    from confluent_kafka import Producer
    from pyspark.sql.types import StringType, StructField, StructType

    from kafka_direct.config.clients import producer_config
    from kafka_direct.producer.partitioning import murmur2_partition
    from kafka_direct.producer.write import producer_kind, write_batches
    from kafka_direct.source.sink import build_settings

    topic = new_topic("fanout")
    create_topic(bootstrap, topic, partitions)
    keys = [f"key-{i}" for i in range(args.records)]
    values = [f"{i:010d}".ljust(args.size, "x") for i in range(args.records)]
    touched = len({murmur2_partition(k.encode(), partitions) for k in keys})
    settings = build_settings(
        {"kafka.bootstrap.servers": bootstrap, "topic": topic},
        StructType([StructField("key", StringType()), StructField("value", StringType())]),
        ask_cluster=False,
    )
    kind = producer_kind(settings)
    batch = pa.RecordBatch.from_pydict({"key": keys, "value": values})
    raw = Producer(
        {
            **producer_config({"bootstrap.servers": bootstrap}),
            "delivery.report.only.error": True,
        }
    )

    def librdkafka() -> None:
        for k, v in zip(keys, values, strict=True):
            raw.produce(topic, v.encode(), k.encode())
        if raw.flush(30) != 0:
            raise RuntimeError(f"{topic}: records left after a 30 s flush")

    def kafka_direct() -> None:
        result = write_batches(settings, [batch], attempt=0)
        if result.records != args.records:
            raise RuntimeError(f"{topic}: wrote {result.records} of {args.records}")

    runs = {"librdkafka": librdkafka, "kafka_direct": kafka_direct}
    for name in WRITERS:
        runs[name]()  # warm: connections, metadata, the pooled producer
    ms: dict[str, list[float]] = {w: [] for w in WRITERS}
    for i in range(args.flushes):
        for name in WRITERS if i % 2 == 0 else WRITERS[::-1]:
            started = time.perf_counter()
            runs[name]()
            ms[name].append((time.perf_counter() - started) * 1000)
    raw.flush(30)
    written = args.records * (args.flushes + 1) * len(WRITERS)
    check_count(bootstrap, topic, partitions, written)
    row = {
        "partitions": partitions,
        "touched": touched,
        "kafka_direct_path": kind,
        "median_ms": {w: statistics.median(v) for w, v in ms.items()},
        "p90_ms": {w: percentile(sorted(v), 90) for w, v in ms.items()},
        "ms": ms,
    }
    log(
        f"{partitions} partitions ({touched} touched): "
        + ", ".join(f"{w} median {row['median_ms'][w]:.1f} ms" for w in WRITERS)
    )
    return row


def check_count(bootstrap: str, topic: str, partitions: int, expected: int) -> None:
    """The topic holds exactly what both writers flushed (its log ends: every flush was
    acknowledged, idempotent, so nothing twice)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-check"})
    try:
        total = 0
        for p in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            total += high - low
    finally:
        consumer.close()
    if total != expected:
        raise RuntimeError(f"{topic}: holds {total} records, {expected} were flushed")


def run(args: argparse.Namespace, bootstrap: str) -> dict[str, Any]:
    import confluent_kafka

    sizes = [int(p) for p in args.partitions.split(",")]
    rows = [measure(args, bootstrap, p) for p in sizes]
    return {
        "versions": {
            "confluent-kafka": confluent_kafka.__version__,
            "librdkafka": confluent_kafka.libversion()[0],
        },
        "records": args.records,
        "size": args.size,
        "flushes": args.flushes,
        "rows": rows,
    }


def report(results: dict[str, Any]) -> None:
    print(run_header(results))
    print(
        f"{results['records']} keyed records of {results['size']} B per flush, "
        f"{results['flushes']} timed flushes per writer, alternating; "
        + ", ".join(f"{k} {v}" for k, v in results["versions"].items())
    )
    print("| partitions (touched) | librdkafka median · p90 ms | kafka_direct median · p90 ms |")
    print("|---|---:|---:|")
    for row in results["rows"]:
        cells = " | ".join(f"{row['median_ms'][w]:.1f} · {row['p90_ms'][w]:.1f}" for w in WRITERS)
        print(f"| {row['partitions']} ({row['touched']}) | {cells} |")


def main(argv: list[str]) -> int:
    return run_on_kafka("produce_fanout.py", argv, parse(argv), run, report)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
