"""Receiver or direct, measured: the receiver stream (``KafkaUtils.createStream``) against the
direct stream (``createDirectStream``) on the same data, in one run. Runs in the benchmark
process (the Spark driver), and in child drivers for the crash phase
(:mod:`kafka_direct_bench.receiver_crash`).

- **throughput:** one data set; each mode starts a stream on it with a new group and runs until
  its batch function has counted every record (``count`` and ``sum(length(value))``, so every
  row is materialised). Reported from ``start()`` (start-up included: joining the group, the
  first batch) and from the first record seen. Raw librdkafka (one process per partition) reads
  the same data in the same run, as the ceiling every ratio is taken against.
- **latency:** a producer at a fixed rate into a fresh topic, once each mode is reading it;
  latency is the driver's clock when the batch function holds a row minus the record's
  timestamp (p50, p95, max).
- **repeats after a crash:** :mod:`.receiver_crash`.
- **what each needs:** task slots held, and the log's peak disk use, measured during the
  throughput phase; shared storage and ACLs are listed in the report.

Modes: ``direct`` (commits with ``commitAsync`` after the function), ``receiver`` (the
write-ahead log) and ``receiver-nowal``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kafka_direct_bench.common import BenchmarkError, log, percentile
from kafka_direct_bench.dataset import (
    create_topic,
    new_topic,
    per_partition_counts,
    produce_dataset,
)
from kafka_direct_bench.raw import RawReaders

MODES = ("direct", "receiver", "receiver-nowal")
# Tansu's first JoinGroup waits half the session timeout (BROKER.md); 6 s keeps joins short.
GROUP_TIMEOUTS = {"session.timeout.ms": "6000", "heartbeat.interval.ms": "500"}
PATIENCE_S = 120.0  # a hang guard: no new record for this long ends a wait with an error


@dataclass
class ReceiverBenchConfig:
    records: int = 1_000_000
    size: int = 100
    partitions: int = 4
    receivers: int = 2
    batch_interval: float = 1.0
    latency_rate: int = 5_000
    latency_seconds: float = 10.0
    crash_records: int = 20_000
    seed: int = 7
    bootstrap_servers: str | None = None
    json_path: str | None = None
    skip: set[str] = field(default_factory=set)


def parse_args(argv: list[str] | None) -> ReceiverBenchConfig:
    p = argparse.ArgumentParser(description="Receiver stream vs direct stream.")
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--receivers", type=int, default=2)
    p.add_argument("--batch-interval", type=float, default=1.0)
    p.add_argument("--latency-rate", type=int, default=5_000)
    p.add_argument("--latency-seconds", type=float, default=10.0)
    p.add_argument("--crash-records", type=int, default=20_000)
    p.add_argument("--bootstrap-servers")
    p.add_argument("--json", dest="json_path")
    p.add_argument("--skip", default="", help="comma-separated: throughput,latency,crash")
    p.add_argument("--quick", action="store_true", help="100,000 records, 5 s of latency")
    a = p.parse_args(argv)
    config = ReceiverBenchConfig(
        a.records, a.size, a.partitions, a.receivers, a.batch_interval, a.latency_rate,
        a.latency_seconds, a.crash_records, 7, a.bootstrap_servers, a.json_path,
        {s for s in a.skip.split(",") if s},
    )  # fmt: skip
    if a.quick:
        config.records, config.latency_seconds, config.crash_records = 100_000, 5.0, 10_000
    return config


def kafka_params(bootstrap: str, group: str, reset: str) -> dict[str, str]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": reset,
        **GROUP_TIMEOUTS,
    }


def make_stream(spark: Any, mode: str, bootstrap: str, topic: str, config: ReceiverBenchConfig,
                work: Path, reset: str = "earliest", **rates: float) -> Any:  # fmt: skip
    """A stream of ``mode`` over ``topic`` with a group of its own."""
    from kafka_direct import ConsumerStrategies, KafkaUtils, LocationStrategies

    params = kafka_params(bootstrap, f"bench-{mode}-{topic}", reset)
    if mode == "direct":
        return KafkaUtils.createDirectStream(
            spark,
            LocationStrategies.PreferConsistent(),
            ConsumerStrategies.Subscribe([topic], params),
            batchInterval=config.batch_interval,
            maxRatePerPartition=rates.get("per_partition"),
        )
    return KafkaUtils.createStream(
        spark,
        params,
        [topic],
        batchInterval=config.batch_interval,
        numReceivers=config.receivers,
        writeAheadLog=mode == "receiver",
        walDir=str(work / f"wal-{mode}-{topic}"),
        maxRatePerReceiver=rates.get("per_receiver"),
    )


def _disk_bytes(root: Path) -> int:
    total = 0
    for sub in ("blocks", "volatile"):
        for dirpath, _dirs, files in os.walk(root / sub):
            for name in files:
                with contextlib.suppress(OSError):  # marked done while we looked
                    total += os.path.getsize(os.path.join(dirpath, name))
    return total


def _wait(condition: Callable[[], bool], progress: Callable[[], int], stream: Any) -> None:
    """Until ``condition``; fails if the stream dies or ``progress`` stalls for PATIENCE_S."""
    last, since = progress(), time.monotonic()
    while not condition():
        if stream.exception() is not None:
            raise BenchmarkError(f"the stream failed: {stream.exception()}")
        now = progress()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since > PATIENCE_S:
            raise BenchmarkError(f"no progress for {PATIENCE_S:.0f} s (at {now})")
        time.sleep(0.05)


def throughput(spark: Any, mode: str, bootstrap: str, topic: str, config: ReceiverBenchConfig,
               work: Path) -> dict[str, Any]:  # fmt: skip
    """Every record of the data set through ``mode``'s batch function, timed."""
    from pyspark.sql import functions as F

    seen, nbytes, first, first_rows = [0], [0], [0.0], [0]
    stream = make_stream(spark, mode, bootstrap, topic, config, work)

    def each(df: Any, ranges: Any) -> None:
        row = df.agg(F.count(F.lit(1)).alias("n"), F.sum(F.length("value")).alias("b")).first()
        if row["n"]:
            if not first[0]:  # the end of the first batch with records
                first[0], first_rows[0] = time.perf_counter(), row["n"]
            seen[0] += row["n"]
            nbytes[0] += row["b"]
        if mode == "direct":
            stream.commitAsync(ranges)

    stream.foreachBatch(each)
    peak_disk, sampling = [0], threading.Event()
    wal = work / f"wal-{mode}-{topic}"

    def sample_disk() -> None:
        while not sampling.wait(0.1):
            peak_disk[0] = max(peak_disk[0], _disk_bytes(wal))

    sampler = threading.Thread(target=sample_disk, daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    stream.start()
    try:
        _wait(lambda: seen[0] >= config.records, lambda: seen[0], stream)
        t1 = time.perf_counter()
        receivers = stream.receivers if mode != "direct" else []
    finally:
        stream.stop()
        sampling.set()
    if seen[0] != config.records or nbytes[0] != config.records * config.size:
        raise BenchmarkError(f"{mode} read {seen[0]} records ({nbytes[0]} B), not the data set")
    return {
        "records": seen[0],
        "seconds": t1 - t0,
        "rate": seen[0] / (t1 - t0),
        "first_batch_s": first[0] - t0,
        # Only with records after the first batch: the direct stream takes a backlog in one.
        "rate_after_first": (seen[0] - first_rows[0]) / (t1 - first[0])
        if seen[0] > first_rows[0] and t1 > first[0]
        else None,
        "batches": len(stream.batches),
        "peak_log_mb": peak_disk[0] / 2**20,
        "receiver_rss_mb": [r.rss_bytes / 2**20 for r in receivers],
        "receivers_paused": sum(r.pauses for r in receivers),
    }


def latency(spark: Any, mode: str, raw: RawReaders, bootstrap: str, config: ReceiverBenchConfig,
            work: Path) -> dict[str, Any]:  # fmt: skip
    """Record timestamp → the driver's clock when the batch function holds the row."""
    from pyspark.sql import functions as F

    topic = new_topic(f"lat-{mode}")
    create_topic(bootstrap, topic, config.partitions)
    latencies: list[float] = []
    # The topic is new and empty, so "earliest" reads exactly what the producer sends. With
    # "latest", records sent between the group's assignment and the receivers' first offset
    # lookup would be skipped, as Kafka's "latest" does for any new consumer.
    stream = make_stream(spark, mode, bootstrap, topic, config, work)

    def each(df: Any, ranges: Any) -> None:
        stamps = df.select(F.unix_micros("timestamp").alias("ts")).toArrow().column("ts")
        now_ms = time.time() * 1000.0
        latencies.extend(now_ms - ts / 1000.0 for ts in stamps.to_pylist())

    stream.foreachBatch(each)
    stream.start()
    try:
        # Produce only once the stream is reading: the direct stream after its first batch,
        # the receivers once the group has given them every partition.
        if mode == "direct":
            _wait(lambda: bool(stream.batches), lambda: 0, stream)
        else:
            owned = lambda: sum(len(r.assignment) for r in stream.receivers)  # noqa: E731
            _wait(lambda: owned() == config.partitions, owned, stream)
        task = (bootstrap, topic, config.partitions, config.latency_rate,
                config.latency_seconds, config.size, config.seed)  # fmt: skip
        sent = raw.produce_paced(task).get(timeout=config.latency_seconds + PATIENCE_S)["sent"]
        _wait(lambda: len(latencies) >= sent, lambda: len(latencies), stream)
    finally:
        stream.stop()
    values = sorted(latencies)
    return {
        "produced": sent,
        "rows": len(values),
        "p50_ms": percentile(values, 50),
        "p95_ms": percentile(values, 95),
        "max_ms": values[-1],
    }


CrashPhase = Callable[[str, ReceiverBenchConfig, Path], dict[str, Any]]


def run(config: ReceiverBenchConfig, command: str, crash_phase: CrashPhase) -> dict[str, Any]:
    """Every phase; ``crash_phase`` is :func:`kafka_direct_bench.receiver_crash.crash_phase`
    (passed in: that module builds its streams with this one's ``make_stream``)."""
    from kafka_direct.testing.broker import EmbeddedBroker
    from kafka_direct.testing.local import local_spark
    from kafka_direct_bench.receiver_report import needs

    started = time.time()
    results: dict[str, Any] = {
        "command": command,
        "config": {**asdict(config), "skip": sorted(config.skip)},
    }
    work = Path(tempfile.mkdtemp(prefix="kafka-direct-receiver-bench-"))
    raw = RawReaders(config.partitions)  # spawned before Spark: children stay small
    broker = None if config.bootstrap_servers else EmbeddedBroker().start()
    bootstrap = config.bootstrap_servers or broker.bootstrap_servers  # type: ignore[union-attr]
    cores = config.receivers + 2  # receivers hold their slots; the batches need the rest
    spark = None
    try:
        if "throughput" not in config.skip:
            topic = new_topic("receiver-data")
            create_topic(bootstrap, topic, config.partitions)
            log(f"producing {config.records:,} records of {config.size} B to {topic}")
            produce_dataset(bootstrap, topic, config.records, config.size, config.partitions,
                            config.seed)  # fmt: skip
            counts = per_partition_counts(config.records, config.partitions)
            raw.read(bootstrap, topic, counts, 20_000)  # warm-up
            results["raw"] = raw.read(bootstrap, topic, counts, 20_000)
            log(f"raw librdkafka: {results['raw']['rate']:,.0f} records/s")
            spark = local_spark("receiver-bench", cores=cores)
            log("warming up: each mode over a small topic (the JVM, the Python workers)")
            warm = new_topic("receiver-warm")
            create_topic(bootstrap, warm, config.partitions)
            produce_dataset(bootstrap, warm, 4_000, config.size, config.partitions, config.seed)
            small = ReceiverBenchConfig(**{**asdict(config), "records": 4_000})
            for mode in MODES:
                throughput(spark, mode, bootstrap, warm, small, work)
            results["throughput"] = {}
            for mode in MODES:
                log(f"throughput: {mode}")
                results["throughput"][mode] = throughput(
                    spark, mode, bootstrap, topic, config, work
                )
                log(f"  {results['throughput'][mode]['rate']:,.0f} records/s")
        if "latency" not in config.skip:
            spark = spark or local_spark("receiver-bench", cores=cores)
            results["latency"] = {}
            for mode in MODES:
                rate, seconds = config.latency_rate, config.latency_seconds
                log(f"latency: {mode}, {rate:,} records/s for {seconds:g} s")
                results["latency"][mode] = latency(spark, mode, raw, bootstrap, config, work)
        if spark is not None:
            spark.stop()
            spark = None
        if "crash" not in config.skip:
            results["crash"] = crash_phase(bootstrap, config, work)
    finally:
        if spark is not None:
            spark.stop()
        raw.close()
        if broker is not None:
            broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    results["needs"] = needs(config)
    results["seconds"] = time.time() - started
    if config.json_path:
        Path(config.json_path).write_text(json.dumps(results, indent=2, default=str))
    return results
