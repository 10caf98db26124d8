"""The sink's produce paths, Python and C: their throughput against a plain confluent-kafka
producer loop, in one process, and the writer's memory over a large write. The benchmark's write
rows (``python benchmarks/run.py``) measure the same against the broker with one process per
partition and through Spark; this module isolates the producers themselves.

    python -m tests.integration.test_sink_throughput [--records 1000000] [--rounds 3] [--spark]

prints, for 100-byte values into a 2-partition topic of the embedded broker (or
``--bootstrap-servers``), alternating rounds in one process:

- ``raw``: a plain confluent-kafka producer loop (librdkafka's defaults), the "raw" of writing;
- ``raw+sink config``: the same loop with the sink's producer config (idempotence, acks=all,
  murmur2_random, the bounded queue), to tell the config's cost from the code's;
- ``python path``: the sink's write task (``write_batches``) over Arrow batches, in-process,
  with ``fastPath.enabled=false``;
- ``c path``: the same task through the C fast path (``kafka_direct.producer.native``);
- ``spark write`` (with ``--spark``): ``df.write.format("kafka_direct")`` of the same records
  from a local[2] Spark, 2 tasks, read back and counted;
- ``hand-over raw`` / ``hand-over python path`` / ``hand-over c path``: the same loops handing
  records to a producer that sends nothing (a queue big enough for all of them, no broker), so
  the cost of handing a record to librdkafka shows without the broker's.

The test below checks the memory promise: the writer's memory does not grow with the size of
the write (librdkafka's bounded queue makes a task wait instead).
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Producer

from kafka_direct.config.sink import parse_sink_options
from kafka_direct.executor.lease_pool import LeasePool
from kafka_direct.producer.columns import plan_columns
from kafka_direct.producer.pool import PRODUCERS, ProducerKey
from kafka_direct.producer.write import WriteSettings, new_producer, write_batches
from kafka_direct.testing.broker import create_topic
from kafka_direct.testing.demo import bootstrap_or_embedded

BATCH_ROWS = 10_000  # Spark's default spark.sql.execution.arrow.maxRecordsPerBatch


def _values(size: int = 100) -> list[bytes]:
    return [os.urandom(size // 2).hex().encode()[:size] for _ in range(1000)]


def _batches(records: int, values: list[bytes]) -> Iterator[pa.RecordBatch]:
    """Arrow batches as Spark hands them to a writer, built lazily (constant input memory)."""
    template = pa.array(list(itertools.islice(itertools.cycle(values), BATCH_ROWS)), pa.binary())
    for start in range(0, records, BATCH_ROWS):
        yield pa.record_batch(
            [template.slice(0, min(BATCH_ROWS, records - start))], names=["value"]
        )


def raw_loop(
    bootstrap: str, topic: str, records: int, config: dict[str, Any] | None = None
) -> float:
    """A plain confluent-kafka producer loop; records/s."""
    values = _values()
    producer = Producer({"bootstrap.servers": bootstrap, **(config or {})})
    produce, poll = producer.produce, producer.poll
    started = time.perf_counter()
    for i in range(records):
        value = values[i % 1000]
        while True:
            try:
                produce(topic, value)
                break
            except BufferError:
                poll(0.001)
        if not i % 8192:
            poll(0)
    assert producer.flush(120) == 0
    return records / (time.perf_counter() - started)


def sink_settings(
    bootstrap: str, topic: str, fast_path: bool = True, **kafka: str
) -> WriteSettings:
    options = {"kafka.bootstrap.servers": bootstrap, "topic": topic}
    options.update({f"kafka.{k}": v for k, v in kafka.items()})
    opts = parse_sink_options(options)
    columns = plan_columns([("value", "binary")], topic)
    return WriteSettings(opts.producer, columns, opts.delivery_timeout_ms, fast_path=fast_path)


def python_path(
    bootstrap: str, topic: str, records: int, fast_path: bool = False, **kafka: str
) -> float:
    """The sink's write task over Arrow batches, in this process; records/s. ``fast_path``:
    through the C path instead of the Python one."""
    settings = sink_settings(bootstrap, topic, fast_path, **kafka)
    batches = list(_batches(records, _values()))
    pool: LeasePool[ProducerKey, Any] = LeasePool(new_producer, PRODUCERS, reaper=False)
    started = time.perf_counter()
    result = write_batches(settings, iter(batches), pool=pool, attempt=0)
    elapsed = time.perf_counter() - started
    pool.close_all()
    assert result.records == records
    assert result.kind == ("native" if fast_path else "python")
    return records / elapsed


def spark_write(spark: Any, bootstrap: str, topic: str, records: int) -> float:
    """``df.write.format("kafka_direct")`` from 2 tasks; records/s (read back and counted)."""
    from tests.integration.test_sink_batch import read_topic

    df = spark.range(0, records, numPartitions=2).selectExpr(
        "cast(repeat(cast(id % 10 as string), 100) as binary) as value"
    )
    df.cache().count()  # the records exist before the clock starts
    started = time.perf_counter()
    (
        df.write.format("kafka_direct")
        .mode("append")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .save()
    )
    elapsed = time.perf_counter() - started
    df.unpersist()
    assert len(read_topic(bootstrap, topic, records, quiet_s=2.0)) == records
    return records / elapsed


#: A producer that takes every record and sends none: the loops' own cost, without a broker.
_HAND_OVER = {
    "bootstrap.servers": "127.0.0.1:1",
    "queue.buffering.max.messages": "2000000",
    "queue.buffering.max.kbytes": "2000000",
    "linger.ms": "600000",
    "message.timeout.ms": "900000",
    "partitioner": "murmur2_random",
}


def hand_over_raw(records: int) -> float:
    values = _values()
    producer = Producer(_HAND_OVER)
    produce, poll = producer.produce, producer.poll
    started = time.perf_counter()
    for i in range(records):
        produce("t", values[i % 1000])
        if not i % 8192:
            poll(0)
    elapsed = time.perf_counter() - started
    producer.purge()
    producer.flush(0)
    return records / elapsed


def hand_over_python_path(records: int, fast_path: bool = False) -> float:
    from kafka_direct.producer.batch_producer import PythonBatchProducer
    from kafka_direct.producer.native import NativeBatchProducer

    batches = list(_batches(records, _values()))
    producer = (NativeBatchProducer if fast_path else PythonBatchProducer)(_HAND_OVER)
    columns = plan_columns([("value", "binary")], "t")
    started = time.perf_counter()
    for batch in batches:
        producer.produce_batch(batch, columns)
    elapsed = time.perf_counter() - started
    producer.abort()
    return records / elapsed


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_growth(action: Callable[[], object]) -> int:
    """How far this process's resident memory rose above where it started, during ``action``."""
    gc.collect()
    base, peak = rss_bytes(), 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.02):
            peak = max(peak, rss_bytes())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        action()
    finally:
        done.set()
        sampler.join()
    return max(peak, rss_bytes()) - base


@pytest.mark.parametrize("fast_path", [True, False], ids=["c path", "python path"])
def test_writer_memory_stays_flat_over_a_large_write(kafka_bootstrap, make_topic, fast_path):
    """4x the records, the same memory: the queue is bounded, and a full queue makes the write
    wait. Input batches are built lazily, as Spark streams them, so only the writer can grow."""
    topic = make_topic(partitions=2)
    settings = sink_settings(kafka_bootstrap, topic, fast_path)
    pool: LeasePool[ProducerKey, Any] = LeasePool(new_producer, PRODUCERS, reaper=False)

    def write(records: int) -> Callable[[], object]:
        return lambda: write_batches(settings, _batches(records, _values()), pool=pool, attempt=0)

    peak_growth(write(50_000))  # a warm producer, as in a reused Python worker
    small = peak_growth(write(400_000))
    large = peak_growth(write(1_600_000))
    pool.close_all()
    mb = 1024 * 1024
    print(f"\npeak RSS growth: {small / mb:.0f} MB for 400k records, {large / mb:.0f} MB for 1.6M")
    # The queue holds at most 100,000 records (~20 MB here, with librdkafka's overhead).
    assert large < 80 * mb, large
    assert large < small + 40 * mb, (small, large)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap-servers", help="a real cluster (default: embedded broker)")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--spark", action="store_true", help="also time a Spark batch write")
    args = parser.parse_args(argv)
    sink_config = {
        k: v
        for k, v in sink_settings("x", "x").producer_config.items()
        if k not in ("bootstrap.servers", "client.id")
    }
    with bootstrap_or_embedded(args.bootstrap_servers) as bootstrap:
        spark = None
        if args.spark:
            from kafka_direct.testing.local import local_spark

            spark = local_spark("sink-throughput")
        runs: dict[str, Callable[[str], float]] = {
            "raw": lambda t: raw_loop(bootstrap, t, args.records),
            "raw+sink config": lambda t: raw_loop(bootstrap, t, args.records, sink_config),
            "python path": lambda t: python_path(bootstrap, t, args.records),
            "c path": lambda t: python_path(bootstrap, t, args.records, fast_path=True),
        }
        if spark is not None:
            runs["spark write"] = lambda t: spark_write(spark, bootstrap, t, args.records)
        runs["hand-over raw"] = lambda t: hand_over_raw(args.records)
        runs["hand-over python path"] = lambda t: hand_over_python_path(args.records)
        runs["hand-over c path"] = lambda t: hand_over_python_path(args.records, fast_path=True)
        results: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.rounds):
            for name, run in runs.items():
                topic = f"sink-throughput-{uuid.uuid4().hex[:8]}"
                create_topic(bootstrap, topic, partitions=2)
                results[name].append(run(topic))
        print(f"{args.records:,} records of 100 bytes, 2 partitions, {args.rounds} round(s)")
        for name, rates in results.items():
            base = results["hand-over raw" if name.startswith("hand-over") else "raw"]
            # Each round against its own raw round, so the machine's drift cancels out.
            ratios = sorted(r / b for r, b in zip(rates, base, strict=True))
            median = sorted(rates)[len(rates) // 2]
            shown = " ".join(f"{r:,.0f}" for r in rates)
            print(
                f"{name:22s} median {median:>10,.0f} rec/s, x{ratios[len(ratios) // 2]:.2f} of "
                f"its raw ({shown})"
            )
        if spark is not None:
            spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
