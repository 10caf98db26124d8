"""The smoke set of an installed kafka-direct, run by scripts/install-check.sh with a fresh
virtualenv's Python, from a directory outside the checkout:

    python install_smoke.py --expect-fast-path yes|no [--bootstrap-servers HOST:PORT]

It checks that ``kafka_direct`` is imported from the virtualenv, not the checkout; that the C fast
paths are (or, for an install without a compiler, are not) in use, with the one line that says
why; that the ``kafka-direct`` command runs; and, against real Kafka (``--bootstrap-servers``, or
a broker this script starts with ``kafka_direct.testing.KafkaCluster``) and a local Spark: a
batch read, a sink write, and a stream restarted from its checkpoint, each exact, with
``register()`` in a fresh session. Prints one line per check; exits non-zero on the first
failure.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any


def check(what: str, ok: bool, detail: str = "") -> None:
    print(f"[smoke] {'ok' if ok else 'FAILED'}: {what}{f' ({detail})' if detail else ''}")
    if not ok:
        sys.exit(1)


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for value in values:
        producer.produce(topic, value)
    check(f"produced {len(values)} records", producer.flush(60) == 0)


TOPIC_TIMEOUT_S = 120.0


def read_back(bootstrap: str, topic: str, n: int) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"smoke-{uuid.uuid4().hex[:6]}"}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen: list[bytes] = []
    for _ in range(60):
        seen += [m.value() for m in consumer.consume(1000, 0.5) if m.error() is None]
        if len(seen) >= n:
            break
    consumer.close()
    return seen


def spark_checks(bootstrap: str) -> None:
    import kafka_direct
    from kafka_direct.testing.broker import create_topic

    source, out = f"smoke-in-{uuid.uuid4().hex[:8]}", f"smoke-out-{uuid.uuid4().hex[:8]}"
    # The suite's shared broker, beside the serial part's heaviest tests: a CI run saw the
    # default 30 s pass without an answer to CreateTopics.
    create_topic(bootstrap, source, partitions=1, timeout_s=TOPIC_TIMEOUT_S)
    create_topic(bootstrap, out, partitions=1, timeout_s=TOPIC_TIMEOUT_S)
    first = [f"v{i:03d}".encode() for i in range(100)]
    produce(bootstrap, source, first)

    from pyspark.sql import SparkSession

    spark: Any = SparkSession.builder.master("local[2]").appName("install-smoke").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    kafka_direct.register(spark)  # a fresh session, as a user's
    check("register() in a fresh session", True)
    rows = (
        spark.read.format("kafka_direct")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .load()
        .select("value")
        .collect()
    )
    check("a batch read is exact", sorted(r.value for r in rows) == first, f"{len(rows)} rows")

    spark.createDataFrame([(v,) for v in first], "value binary").write.format(
        "kafka_direct"
    ).mode("append").option("kafka.bootstrap.servers", bootstrap).option("topic", out).save()
    check("a sink write is exact", sorted(read_back(bootstrap, out, 100)) == first)

    seen: list[bytes] = []
    checkpoint = tempfile.mkdtemp(prefix="smoke-ck-")

    def run() -> None:
        query = (
            spark.readStream.format("kafka_direct")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", source)
            .option("startingOffsets", "earliest")
            .load()
            .writeStream.foreachBatch(
                lambda df, _id: seen.extend(r.value for r in df.select("value").collect())
            )
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(300)
        check("the stream ran", query.exception() is None, str(query.exception() or ""))

    run()
    second = [f"w{i:03d}".encode() for i in range(50)]
    produce(bootstrap, source, second)
    run()
    check(
        "a stream restarted from its checkpoint reads each record once",
        sorted(seen) == sorted(first + second),
        f"{len(seen)} records",
    )
    spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--expect-fast-path", choices=["yes", "no"], required=True)
    parser.add_argument("--bootstrap-servers")
    parser.add_argument("--checkout", help="the source tree kafka_direct must not come from")
    args = parser.parse_args()

    import kafka_direct
    import kafka_direct.consumer.native as reads
    import kafka_direct.producer.native as writes

    where = Path(kafka_direct.__file__).resolve()
    check(f"kafka_direct {kafka_direct.__version__} imported from {where.parent}", True)
    if args.checkout:
        inside = Path(args.checkout).resolve() in where.parents
        check("it is the installed copy, not the checkout", not inside, str(where))
    check("it ships py.typed", (where.parent / "py.typed").exists())
    site = where.parent / "source" / "_worker_site" / "sitecustomize.py"
    check("it ships the workers' sitecustomize", site.exists())
    status = f"reads: {reads.status()}; writes: {writes.status()}"
    print(f"[smoke] {status}")
    if args.expect_fast_path == "yes":
        check("the C fast paths are loaded", reads.available() and writes.available(), status)
    else:
        check(
            "without a compiler: the Python path, and the line says why",
            not reads.available() and "not compiled" in reads.status(),
            status,
        )
    cli = Path(sys.executable).parent / "kafka-direct"
    run = subprocess.run([str(cli), "--help"], capture_output=True, text=True, check=False)
    check("the kafka-direct command runs", run.returncode == 0 and "wordcount" in run.stdout)

    bootstrap = args.bootstrap_servers or os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    cluster = None
    if not bootstrap:
        from kafka_direct.testing.kafka_cluster import KafkaCluster

        cluster = KafkaCluster().start()
        bootstrap = cluster.bootstrap_servers
    try:
        spark_checks(bootstrap)
    finally:
        if cluster is not None:
            cluster.stop()
    print("[smoke] all checks passed")


if __name__ == "__main__":
    main()
