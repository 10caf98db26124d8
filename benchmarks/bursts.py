#!/usr/bin/env python
"""Bursts after idle: how long a stream takes to hand ``foreachBatch`` a burst of records that
arrives after the topic was quiet for a few seconds. Runs in the benchmark process (the driver
of a local Spark) against a one-broker ``KafkaCluster`` it starts:

    python benchmarks/bursts.py                                  # kafka_direct's defaults
    python benchmarks/bursts.py --option fastPath.enabled=false  # any source option

A stream with a 200 ms trigger reads a 4-partition topic from its end; the command produces
``--bursts`` bursts of ``--records`` records of 100 B (one flush each), ``--idle`` seconds
apart, and prints per burst the seconds from its first produce to the moment ``foreachBatch``
had counted all of it, then the micro-batches' ``addBatch`` and ``triggerExecution`` times.
Burst 0 includes the first micro-batch's start-up (new consumers, Python workers).
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bursts", type=int, default=6)
    parser.add_argument("--records", type=int, default=400)
    parser.add_argument("--idle", type=float, default=3.0, help="seconds between bursts")
    parser.add_argument(
        "--option", action="append", default=[], metavar="KEY=VALUE", help="a source option"
    )
    args = parser.parse_args(argv)
    from confluent_kafka import Producer

    from kafka_direct.testing.broker import create_topic
    from kafka_direct.testing.kafka_cluster import KafkaCluster
    from kafka_direct.testing.local import local_spark

    options = dict(pair.split("=", 1) for pair in args.option)
    with KafkaCluster(brokers=1) as cluster:
        bootstrap = cluster.bootstrap_servers
        topic = f"bursts-{uuid.uuid4().hex[:8]}"
        create_topic(bootstrap, topic, partitions=4)
        spark = local_spark("kafka_direct-bursts")
        counted = [0]

        def each(df: Any, batch_id: int) -> None:
            counted[0] += df.count()

        query = (
            spark.readStream.format("kafka_direct")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "latest")
            .options(**options)
            .load()
            .writeStream.foreachBatch(each)
            .trigger(processingTime="200 milliseconds")
            .start()
        )
        try:
            while not query.recentProgress:
                time.sleep(0.1)
            producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
            print(f"options: {options or 'defaults'}; {args.records} records per burst")
            for burst in range(args.bursts):
                started = time.monotonic()
                for i in range(args.records):
                    producer.produce(topic, b"x" * 100, partition=i % 4)
                producer.flush()
                while counted[0] < args.records * (burst + 1):
                    if query.exception() is not None:
                        raise SystemExit(f"the query failed: {query.exception()}")
                    time.sleep(0.01)
                print(f"burst {burst}: all read after {time.monotonic() - started:.3f} s")
                time.sleep(args.idle)
            for progress in query.recentProgress:
                if progress["numInputRows"]:
                    took = progress["durationMs"]
                    print(
                        f"micro-batch {progress['batchId']}: {progress['numInputRows']} rows, "
                        f"addBatch {took.get('addBatch')} ms, "
                        f"triggerExecution {took.get('triggerExecution')} ms"
                    )
        finally:
            query.stop()
            spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
