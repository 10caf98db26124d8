#!/usr/bin/env python
"""Kafka → decoded Avro in Spark, end to end, in one command: kafka_direct's source-level decode
(``valueFormat=avro``) next to Spark's own Kafka connector + Spark's own ``from_avro``, same
broker, same records, same Spark, same run.

    python benchmarks/value_format.py                  # 1,000,000 records in 2 partitions
    python benchmarks/value_format.py --records 50000 --rounds 1    # a smoke run

It starts one Apache Kafka broker (:class:`kafka_direct.testing.KafkaCluster`) and one Schema
Registry (Apicurio), writes N records in the Confluent wire format (the schema of
``benchmarks/schema_registry.py``: ten fields, nested record, array, enum, decimal, timestamp)
and starts one ``local[2]`` Spark with Spark's Kafka connector and ``spark-avro`` (Maven
Central, cached), on the PySpark they were built for: the command re-runs itself under
``scripts/oracle-venv.sh``'s pin when the installed PySpark has no connector, and logs every
version. Each row reads the whole topic and materialises every decoded field
(``write.format("noop")``):

- ``kafka_direct valueFormat=avro``: the source decodes in the worker that read the records;
- ``kafka_direct + from_avro``: the source's bytes, then kafka_direct's column function;
- ``kafka + Spark from_avro``: ``format("kafka")`` with the connector's defaults, then
  ``from_avro(substring(value, 6), schema)`` (Spark cannot read the wire format: the 5-byte
  header is cut off and the schema given, which only works while the schema never changes);
- ``kafka tuned + Spark from_avro``: the same with ``--jvm-tuned`` consumer options (default
  ``fetch.max.wait.ms=10, max.poll.records=20000``; see ``docs/jvm-benchmark.md``);
- the two reads of the bytes alone (``kafka_direct``, ``kafka tuned``): what the decode adds;
- the floor: a Python data source that yields the same decoded rows ready-made, reading no
  Kafka (``kafka_direct_bench.decoded_floor``): what Spark costs any Python source to take in
  rows of this struct, which no source-level decode can go below.

Rounds alternate the order of the rows. Every decode row is first checked to give exactly N
records and the same sum of one field. Prints records/s per row (median of the rounds) and
each row's ratio to ``kafka + Spark from_avro`` and its tuned form (above 1: faster than Spark).
Runs in the benchmark process, which is also the Spark driver.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fastavro
from confluent_kafka import Producer
from kafka_direct_bench.common import log
from kafka_direct_bench.dataset import create_topic, new_topic, per_partition_counts
from kafka_direct_bench.decoded_floor import decoded_floor_source
from schema_registry import SCHEMA, _records

SOURCE, FUNCTION, JVM, TUNED = (
    "kafka_direct valueFormat=avro",
    "kafka_direct + from_avro",
    "kafka + Spark from_avro",
    "kafka tuned + Spark from_avro",
)
OURS_BYTES, TUNED_BYTES = "kafka_direct bytes only", "kafka tuned bytes only"
FLOOR = "Python source, rows ready (floor)"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--jvm-tuned",
        default="kafka.fetch.max.wait.ms=10,kafka.max.poll.records=20000",
        help="format('kafka') options of the tuned rows",
    )
    p.add_argument("--json", help="also write the figures to this file")
    return p.parse_args(argv)


def produce(bootstrap: str, topic: str, framed: list[bytes], partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000})
    for i, value in enumerate(framed):
        while True:
            try:
                producer.produce(topic, value=value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120) != 0:
        raise RuntimeError("records left undelivered")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from kafka_direct_bench.oracle_python import run_on_oracle_pyspark, versions

    # Spark's connector (and spark-avro) only on the PySpark they were built for: this re-runs
    # the command under scripts/oracle-venv.sh's pin when the installed PySpark has neither.
    run_on_oracle_pyspark(__file__, argv)
    args = parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    load_before = os.getloadavg()
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro as spark_from_avro

    from kafka_direct.functions import from_avro
    from kafka_direct.schema_registry.client import RegistryClient
    from kafka_direct.schema_registry.options import parse_registry
    from kafka_direct.schema_registry.wire import header
    from kafka_direct.testing.jars import fetch_maven_jars
    from kafka_direct.testing.kafka_cluster import KafkaCluster
    from kafka_direct.testing.local import local_spark
    from kafka_direct.testing.schema_registry import SchemaRegistry
    from kafka_direct.testing.spark_connector import (
        connector_version,
        spark_kafka_conf,
        spark_kafka_jars,
    )

    jars = spark_kafka_jars()
    version = connector_version(jars)
    avro_jar = f"org.apache.spark:spark-avro_2.13:{version}"
    jars += fetch_maven_jars([avro_jar], f"spark-avro-{version}")
    tuned = dict(item.split("=", 1) for item in args.jvm_tuned.split(",") if item)
    schema_text = json.dumps(SCHEMA)
    parsed = fastavro.parse_schema(SCHEMA)
    records = _records(args.records)
    expected = (args.records, sum(r["device"]["version"] for r in records))
    spark = None
    with KafkaCluster(brokers=1) as cluster, SchemaRegistry() as registry:
        bootstrap = cluster.bootstrap_servers
        topic = new_topic("value-format")
        subject = f"{topic}-value"
        schema_id = RegistryClient(parse_registry(registry.url, {})).register(subject, schema_text)
        framed = []
        for record in records:
            out = io.BytesIO()
            out.write(header(schema_id))
            fastavro.schemaless_writer(out, parsed, record)
            framed.append(out.getvalue())
        del records
        create_topic(bootstrap, topic, args.partitions)
        began = time.perf_counter()
        produce(bootstrap, topic, framed, args.partitions)
        log(f"produced {args.records:,} framed Avro records in {time.perf_counter() - began:.1f} s")
        try:
            spark = local_spark("kafka_direct-value-format-bench", conf=spark_kafka_conf(jars))
            log(f"Spark {spark.version}, connector and spark-avro {version}")
            found = versions(spark, version)
            log("versions: " + ", ".join(f"{k} {v}" for k, v in found.items()))
            sample = [value[5:] for value in framed[:20_000]]
            spark.dataSource.register(decoded_floor_source(schema_text, sample))
            counts = per_partition_counts(args.records, args.partitions)

            def read(fmt: str, **options: str) -> Any:
                r = spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap)
                r = r.option("subscribe", topic).option("startingOffsets", "earliest")
                for key, value in options.items():
                    r = r.option(key, value)
                return r.load()

            stripped = F.expr("substring(value, 6, length(value) - 5)")
            queries = {
                SOURCE: read(
                    "kafka_direct", valueFormat="avro", schemaRegistryAddress=registry.url
                ).select("value"),
                FUNCTION: read("kafka_direct").select(
                    from_avro("value", subject=subject, schemaRegistryAddress=registry.url).alias(
                        "value"
                    )
                ),
                JVM: read("kafka").select(spark_from_avro(stripped, schema_text).alias("value")),
                TUNED: read("kafka", **tuned).select(
                    spark_from_avro(stripped, schema_text).alias("value")
                ),
                OURS_BYTES: read("kafka_direct").select("value"),
                TUNED_BYTES: read("kafka", **tuned).select("value"),
                FLOOR: spark.read.format("kafka_direct_bench_decoded_floor")
                .option("counts", ",".join(map(str, counts)))
                .load()
                .select("value"),
            }
            floor_count = queries[FLOOR].count()
            if floor_count != args.records:
                print(f"FAILED check: the floor gave {floor_count} rows", file=sys.stderr)
                return 1
            for name in (SOURCE, FUNCTION, JVM, TUNED):
                got = tuple(
                    queries[name].agg(F.count("value"), F.sum("value.device.version")).first()
                )
                if got != expected:
                    print(f"FAILED check: {name} gave {got}, expected {expected}", file=sys.stderr)
                    return 1
            rates: dict[str, list[float]] = {name: [] for name in queries}
            names = list(queries)
            for r in range(args.rounds):
                for name in names[r % len(names) :] + names[: r % len(names)]:
                    began = time.perf_counter()
                    queries[name].write.format("noop").mode("overwrite").save()
                    seconds = time.perf_counter() - began
                    rates[name].append(args.records / seconds)
                    log(f"round {r + 1} {name:<32} {seconds:7.2f} s")
        finally:
            if spark is not None:
                spark.stop()
    median = {name: statistics.median(values) for name, values in rates.items()}
    print(
        f"\n{args.records:,} records in {args.partitions} partitions, median of {args.rounds}; "
        f"load average before {load_before}, after {os.getloadavg()}"
    )
    print(f"{'':<32}{'records/s':>12}{'vs kafka':>10}{'vs tuned':>10}")
    for name, value in median.items():
        print(
            f"{name:<32}{value:>12,.0f}{value / median[JVM]:>9.2f}x{value / median[TUNED]:>9.2f}x"
        )
    # What decoding adds to reading the bytes, per record: the part that is the decode's.
    ours = 1e6 / median[SOURCE] - 1e6 / median[OURS_BYTES]
    theirs = 1e6 / median[TUNED] - 1e6 / median[TUNED_BYTES]
    print(
        f"decoding adds {ours:.2f} us/record to kafka_direct's read, {theirs:.2f} us/record to "
        f"the tuned connector's (ratio {theirs / ours:.2f}x); Spark's own rows of the struct "
        f"(the floor) cost {1e6 / median[FLOOR]:.2f} us/record"
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "records": args.records,
                    "partitions": args.partitions,
                    "rounds": rates,
                    "median": median,
                    "connector": version,
                    "jvm_tuned": tuned,
                    "load_before": load_before,
                    "load_after": os.getloadavg(),
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
