#!/usr/bin/env python
"""kafka_direct's benchmark suite, in one command.

    python benchmarks/run.py                      # the default data set, a few minutes
    python benchmarks/run.py --quick --json q.json  # seconds: the smoke test runs this

It starts the embedded broker (or uses ``--bootstrap-servers``), produces N records of S bytes
over P partitions with a fixed seed, warms up the JVM and the Python workers, then measures side
by side, in one run:

- raw:       P processes of plain confluent-kafka, one per partition (the ceiling);
- batch:     ``spark.read.format("kafka_direct")``, aggregated so every row is materialised;
- stream:    ``readStream`` with ``Trigger.AvailableNow`` into ``foreachBatch``, with default
             options (one micro-batch), again into the ``noop`` sink, and with
             ``maxOffsetsPerTrigger`` (many micro-batches: the cost of one);
- floor:     the batch query over a Python data source that reads nothing (Spark's own cost);
- writes:    the same number of records written, in rounds of their own: a plain
             confluent-kafka producer loop per partition with the sink's settings (the raw of
             writing; again with librdkafka's defaults, shown only), the C write path without
             Spark, a Spark writer that only counts, ``df.write.format("kafka_direct")`` (C and
             Python paths) and a Kafka-to-Kafka stream; every topic read back and counted, and
             the Python workers' memory over a large write;
- fixed:     batch and stream queries over one record per partition (the cost of a query);
- latency:   a producer at a fixed rate and a processing-time trigger: record timestamp to the
             moment ``foreachBatch`` on the driver holds the row;
- memory:    peak RSS of the Python workers while they read a backlog of at least 20 Arrow
             batches per task;
- pool:      consumer-pool hits and consumer creations per micro-batch over the many-batch run;
- planning:  driver-side planning time per trigger with 100 partitions, and the number of
             ``list_offsets`` requests it makes.

Raw, batch, stream and floor are interleaved in rounds (``--rounds``); the table reports
medians and ratios to raw from this same run. Absolute rates drift on a shared machine, ratios
from one run much less. ``--json`` writes every figure, per round, with the machine and versions.
See ``benchmarks/README.md`` for what each figure means and how it is measured.

This file is the command: it parses the options, runs the phases in order and prints the
table, in the benchmark process (which is also the Spark driver). The measurements live in
the package next to it, ``benchmarks/kafka_direct_bench/`` (see its docstring for the map).
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from kafka_direct_bench.common import BenchmarkError, log
from kafka_direct_bench.config import Config, parse_args
from kafka_direct_bench.dataset import (
    create_topic,
    delete_topics,
    new_topic,
    per_partition_counts,
    produce_dataset,
)
from kafka_direct_bench.executor_stats import pool_summary, task_stats
from kafka_direct_bench.phases import fixed_costs, measure_memory
from kafka_direct_bench.planning import planning_overhead
from kafka_direct_bench.raw import RawReaders
from kafka_direct_bench.report import render, write_json
from kafka_direct_bench.results import Results, machine_info, summarise
from kafka_direct_bench.spark_reads import SparkReads
from kafka_direct_bench.writes import Writes, run_writes


@contextlib.contextmanager
def broker_for(config: Config) -> Iterator[str]:
    if config.bootstrap_servers:
        yield config.bootstrap_servers
        return
    from kafka_direct.testing.broker import EmbeddedBroker

    with EmbeddedBroker() as broker:
        yield broker.bootstrap_servers


def measured(round_index: int, mode: str, measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """One mode of one round; a mode that fails says which it was."""
    try:
        return measure()
    except Exception as exc:
        raise BenchmarkError(f"round {round_index + 1}, mode {mode!r} failed: {exc}") from exc


def run(config: Config, argv: list[str] | None = None) -> Results:
    started = time.time()
    command = "python benchmarks/run.py " + " ".join(argv if argv is not None else sys.argv[1:])
    results = Results(asdict(config), command.strip(), machine_info())
    counts = per_partition_counts(config.records, config.partitions)
    expected_bytes = config.records * config.size
    work_dir = Path(tempfile.mkdtemp(prefix="kafka-direct-bench-"))
    stats_dir = work_dir / "stats"
    stats_dir.mkdir()
    raw = RawReaders(config.partitions)  # spawned before Spark: children stay small
    # The extension's readers get processes of their own: importing pyarrow and kafka_direct
    # into raw's children would make Python's garbage collector slow raw's per-message loop.
    raw_arrow = RawReaders(config.partitions)
    spark: SparkReads | None = None
    topics: list[str] = []  # the run's topics, deleted at the end from a cluster we did not start
    try:
        with broker_for(config) as bootstrap:
            topic = new_topic("data")
            topics.append(topic)
            create_topic(bootstrap, topic, config.partitions)
            log(
                f"producing {config.records:,} records of {config.size} B over "
                f"{config.partitions} partitions to {topic} at {bootstrap}"
            )
            produced = produce_dataset(
                bootstrap, topic, config.records, config.size, config.partitions, config.seed
            )
            results.dataset = {"topic": topic, "bootstrap": bootstrap, **produced}
            log(f"produced in {results.dataset['seconds']:.1f} s; starting Spark")
            spark = SparkReads(bootstrap, stats_dir, work_dir, config.arrow_batch_size)

            log("warming up the raw readers, the JVM and the Python workers")
            raw.read(bootstrap, topic, counts, config.arrow_batch_size)
            raw_arrow.read(bootstrap, topic, counts, config.arrow_batch_size, arrow=True)
            spark.batch(topic)
            spark.batch(topic, {"fastPath.enabled": "false"})
            spark.stream(topic)

            for i in range(config.rounds):
                log(f"round {i + 1}/{config.rounds}: raw, batch, stream (AvailableNow)")
                measure: dict[str, Callable[[], dict[str, Any]]] = {
                    "raw": lambda: raw.read(bootstrap, topic, counts, config.arrow_batch_size),
                    "raw_arrow": lambda: raw_arrow.read(
                        bootstrap, topic, counts, config.arrow_batch_size, arrow=True
                    ),
                    "batch": lambda: spark.batch(topic),
                    "batch_python": lambda: spark.batch(topic, {"fastPath.enabled": "false"}),
                    "stream": lambda: spark.stream(topic),
                    "stream_noop": lambda: spark.stream(topic, noop=True),
                    "floor": lambda: spark.floor(counts, config.size),
                }
                # The order rotates between rounds, so no mode always runs first after a pause.
                order = list(measure)[i % len(measure) :] + list(measure)[: i % len(measure)]
                rnd = {mode: measured(i, mode, measure[mode]) for mode in order}
                rnd = {mode: rnd[mode] for mode in measure}
                results.rounds.append(rnd)
                log("  " + "  ".join(f"{k} {v['rate']:,.0f}/s" for k, v in rnd.items()))

            if "writes" not in config.skip:
                writes = Writes(spark, raw, raw_arrow, config)
                results.writes = run_writes(writes, topic, config)

            if "fixed" not in config.skip:
                log("fixed cost per query: batch and stream reads of one record per partition")
                results.fixed = fixed_costs(spark, bootstrap, config.partitions, config.rounds)

            if "many" not in config.skip:
                per_trigger = max(1, -(-config.records // config.micro_batches))
                log(f"stream with maxOffsetsPerTrigger={per_trigger:,} (many micro-batches)")
                t0 = time.time()
                many = spark.stream(topic, {"maxOffsetsPerTrigger": str(per_trigger)})
                many_tasks = task_stats(stats_dir, topic, t0, time.time())
                results.many_batches = {"max_offsets_per_trigger": per_trigger, **many}
                log("the same micro-batches from a source that reads no Kafka (Spark's floor)")
                per_partition = per_partition_counts(per_trigger, config.partitions)
                results.many_floor = spark.floor_stream(
                    per_partition, config.size, many["micro_batches"]
                )
                results.pool = pool_summary(many_tasks, many["micro_batches"])

                # Every read of the data set in this run (warm-up and rounds included), for the
                # consumers created overall.
                everything = task_stats(stats_dir, topic, started, time.time())
                results.pool["whole_run"] = pool_summary(everything, 0)

            if "memory" not in config.skip:
                log("memory: worker RSS while reading the backlog")
                results.memory = measure_memory(spark, topic, counts, config)

            if "latency" not in config.skip:
                log(
                    f"latency: {config.latency_rate:,} records/s for "
                    f"{config.latency_seconds:g} s, {config.trigger_ms} ms trigger"
                )
                lat_topic = new_topic("lat")
                topics.append(lat_topic)
                create_topic(bootstrap, lat_topic, config.partitions)
                results.latency = spark.latency(raw, lat_topic, config.partitions, config)

            if "planning" not in config.skip:
                log(f"planning: {config.planning_partitions} partitions, driver side")
                results.planning = planning_overhead(
                    bootstrap, config.planning_partitions, config.planning_triggers
                )
    finally:
        if spark is not None:
            spark.stop()
        raw.close()
        raw_arrow.close()
        shutil.rmtree(work_dir, ignore_errors=True)
        if config.bootstrap_servers:
            delete_topics(config.bootstrap_servers, topics)
    summarise(results, config, expected_bytes)
    results.seconds = time.time() - started
    return results


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    results = run(config, argv)
    print(render(results), flush=True)
    for name, why in results.failures.items():
        log(f"check FAILED: {name}: {why}")
    if config.json_path:
        write_json(results, config.json_path)
        log(f"wrote {config.json_path}")
    return 0 if all(results.checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
