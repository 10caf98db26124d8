#!/usr/bin/env python
"""Steady-state streams: kafka_direct next to Spark's own Kafka connector, same broker, same
Spark (the PySpark the connector was built for), same run.

    python benchmarks/latency.py                                  # both modes, 3 rounds
    python benchmarks/latency.py --modes latency --rounds 4 --seconds 30
    python benchmarks/latency.py --modes sustain --sustain-seconds 60 --json out.json

Two modes, each run for ``format("kafka")`` and ``format("kafka_direct")`` in rounds whose order
alternates:

- **latency**: a child process produces ``--rate`` records/s (default 1,000) of ``--size`` bytes
  into ``--partitions`` (default 4) partitions of a new topic for ``--seconds``; a
  ``startingOffsets=latest`` query under the default trigger (a micro-batch as soon as the last
  one ended) runs ``foreachBatch``, which takes each record's partition, offset and timestamp.
  Latency is the driver's wall clock once ``foreachBatch`` holds the row minus the record's
  timestamp (CreateTime, set by the producer). Reported: p50, p99, the mean micro-batch period
  (between the starts of consecutive micro-batches while records came), the broker's CPU over
  the query as a share of one core (when this command started the broker) and Spark's
  ``durationMs`` per phase (median per micro-batch), which splits a micro-batch into the
  source's calls and the sink's job.
- **sustain**: the highest rate at which a 1 s ``processingTime`` trigger keeps up for
  ``--sustain-seconds`` (default 60). Rates go up from ``--sustain-start`` by doubling until one
  fails (down by halving, to ``--sustain-min``, while none has kept up), then
  ``--sustain-steps`` bisections between the last rate that kept up and the first that did
  not; 0 means not even ``--sustain-min`` kept up. A rate keeps up when records do not queue:
  the p95 latency of the records produced in the last third of the run is at most 2 trigger
  intervals (a record waits at most one interval for its trigger and one for its batch).

Every run checks exactly what the query saw: every offset the producer wrote, once (count and
offsets per partition), or the run fails. Pools are warm on both sides in the same way: each
round starts a new query on a new topic in the same Spark, after one untimed query per format.
The report names Python, PySpark, the connector, confluent-kafka, librdkafka, pyarrow, the
Kafka broker and the commit, and the load average before and after.

When the installed PySpark has no connector on Maven Central, the command runs itself again
under the virtualenv that ``scripts/oracle-venv.sh`` pins (see
``kafka_direct_bench/oracle_python.py``): both formats run on that PySpark.
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import os
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kafka_direct_bench.common import loadavg, log, percentile
from kafka_direct_bench.dataset import create_topic, new_topic
from kafka_direct_bench.procstats import process_cpu_s

FORMATS = ("kafka", "kafka_direct")
PHASES = ("triggerExecution", "latestOffset", "queryPlanning", "walCommit", "addBatch",
          "commitOffsets", "getBatch")  # fmt: skip
PATIENCE_S = 120.0
#: A probe counts only if the producer held this share of its rate.
PRODUCER_HELD = 0.95


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--modes", default="latency,sustain", help="comma list: latency,sustain")
    p.add_argument("--formats", default=",".join(FORMATS))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rate", type=int, default=1_000, help="latency mode: records/s")
    p.add_argument("--seconds", type=float, default=30.0, help="latency mode: produce this long")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--sustain-seconds", type=float, default=60.0)
    p.add_argument("--sustain-start", type=int, default=5_000)
    p.add_argument("--sustain-steps", type=int, default=2)
    p.add_argument("--sustain-max", type=int, default=320_000)
    p.add_argument("--sustain-min", type=int, default=250, help="the lowest rate tried")
    p.add_argument("--trigger-ms", type=int, default=1_000, help="sustain mode's trigger")
    p.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="FORMAT:KEY=VALUE",
        help="a reader option for one format, e.g. kafka:kafka.fetch.max.wait.ms=10",
    )
    p.add_argument("--bootstrap-servers", default=None)
    p.add_argument("--json", default=None)
    p.add_argument(
        "--profile",
        default=None,
        metavar="DIR",
        help="write Spark's event log and kafka_direct's task statistics under DIR and report "
        "where each query's micro-batches spent their time (kafka_direct_bench/stream_profile.py)",
    )
    return p.parse_args(argv)


class Run:
    """One streaming query of one format against a paced producer."""

    def __init__(self, spark: Any, bootstrap: str, args: argparse.Namespace) -> None:
        self.spark = spark
        self.bootstrap = bootstrap
        self.args = args
        self.work = Path(os.environ.get("TMPDIR", "/tmp")) / f"latency-bench-{uuid.uuid4().hex[:6]}"
        self.options: dict[str, dict[str, str]] = {f: {} for f in FORMATS}
        for item in args.option:
            fmt, _, kv = item.partition(":")
            key, _, value = kv.partition("=")
            self.options[fmt][key] = value
        self.producer = multiprocessing.get_context("spawn").Pool(1)

    def close(self) -> None:
        self.producer.close()
        self.producer.join()

    def query(self, fmt: str, rate: int, seconds: float, trigger_ms: int | None) -> dict[str, Any]:
        from kafka_direct_bench.raw import paced_producer
        from kafka_direct_bench.spark_reads import stop_between_batches
        from pyspark.sql import functions as F

        topic = new_topic(f"lat-{fmt.replace('_', '')}")
        create_topic(self.bootstrap, topic, self.args.partitions)
        seen: list[tuple[float, int, int, int]] = []  # (arrival ms, partition, offset, ts ms)
        last_batch = [-1]
        lock = threading.Lock()

        def each(df: Any, batch_id: int) -> None:
            table = df.select(
                "partition", "offset", F.unix_millis("timestamp").alias("ts")
            ).toArrow()
            now_ms = time.time() * 1000.0
            cols = [table.column(n).to_pylist() for n in ("partition", "offset", "ts")]
            with lock:
                seen.extend((now_ms, p, o, t) for p, o, t in zip(*cols, strict=True))
                if table.num_rows:
                    last_batch[0] = max(last_batch[0], batch_id)

        reader = (
            self.spark.readStream.format(fmt)
            .option("kafka.bootstrap.servers", self.bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "latest")
        )
        for key, value in self.options[fmt].items():
            reader = reader.option(key, value)
        writer = reader.load().writeStream.foreachBatch(each)
        writer = writer.option("checkpointLocation", str(self.work / topic))
        if trigger_ms is not None:
            writer = writer.trigger(processingTime=f"{trigger_ms} milliseconds")
        t_start = time.time() * 1000.0
        query = writer.start()
        try:
            # Batch 0 of a "latest" query pins the start: produce only once it has.
            while not query.recentProgress and query.isActive:
                time.sleep(0.05)
            task = (self.bootstrap, topic, self.args.partitions, rate, seconds, self.args.size, 7)
            t_produce = time.time() * 1000.0
            produced = self.producer.apply_async(paced_producer, (task,)).get(
                timeout=seconds + 3 * PATIENCE_S
            )
            t_end = time.time() * 1000.0
            last, changed = len(seen), time.monotonic()
            while len(seen) < produced["sent"] and query.isActive:
                if len(seen) != last:
                    last, changed = len(seen), time.monotonic()
                elif time.monotonic() - changed > PATIENCE_S:
                    break
                time.sleep(0.05)
            if not query.isActive and query.exception() is not None:
                raise RuntimeError(f"{fmt} query failed: {query.exception()}")
        finally:
            stop_between_batches(query, last_batch[0])
        progress = [json.loads(p.json) if hasattr(p, "json") else p for p in query.recentProgress]
        got = self._figures(fmt, rate, seen, produced["sent"], progress, t_produce, t_end)
        # The producer sends its records late when it cannot hold the pace: the rate it held.
        got["produced_rate"] = produced["sent"] / max(produced["seconds"], 1e-9)
        got.update(topic=topic, window_ms=(t_start, time.time() * 1000.0))
        return got

    def _figures(
        self,
        fmt: str,
        rate: int,
        seen: list[tuple[float, int, int, int]],
        sent: int,
        progress: list[dict[str, Any]],
        t_produce: float,
        t_end: float,
    ) -> dict[str, Any]:
        # Exactly what was produced: offsets 0..n-1 of every partition, each once.
        by_partition: dict[int, list[int]] = {}
        for _, p, o, _ in seen:
            by_partition.setdefault(p, []).append(o)
        for p, offsets in by_partition.items():
            offsets.sort()
            if offsets != list(range(len(offsets))):
                dup = len(offsets) - len(set(offsets))
                raise RuntimeError(
                    f"{fmt}: partition {p} saw {len(offsets)} offsets ({dup} repeated), not "
                    f"0..{len(offsets) - 1} once each"
                )
        if len(seen) != sent:
            raise RuntimeError(f"{fmt}: the query saw {len(seen):,} records; {sent:,} produced")
        lat = sorted(a - t for a, _, _, t in seen)
        last_third = sorted(a - t for a, _, _, t in seen if t >= t_end - (t_end - t_produce) / 3)
        data = [p for p in progress if (p.get("numInputRows") or 0) > 0]
        starts = sorted(_ms(p["timestamp"]) for p in data)
        periods = [b - a for a, b in itertools.pairwise(starts)]
        phases = {
            name: statistics.median([p["durationMs"].get(name, 0) for p in data]) if data else None
            for name in PHASES
        }
        return {
            "format": fmt,
            "rate": rate,
            "records": sent,
            "p50_ms": percentile(lat, 50),
            "p99_ms": percentile(lat, 99),
            "max_ms": lat[-1] if lat else None,
            "last_third_p95_ms": percentile(last_third, 95),
            "batches_with_data": len(data),
            "mean_period_ms": statistics.fmean(periods) if periods else None,
            "median_phase_ms": phases,
        }


def _ms(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000.0


def latency_mode(
    run: Run, formats: list[str], args: argparse.Namespace, broker_pid: int | None = None
) -> list[dict[str, Any]]:
    """Per round and format, one query's figures; with ``broker_pid`` (the broker this command
    started) also the broker's CPU over the query, as a share of one core: what the query's
    fetches cost the broker (idle pooled consumers fetching every record as it arrives, for
    example)."""
    out = []
    for r in range(args.rounds):
        order = formats if r % 2 == 0 else formats[::-1]
        for fmt in order:
            cpu_before, started = process_cpu_s(broker_pid), time.monotonic()
            got = run.query(fmt, args.rate, args.seconds, None)
            cpu_after, wall = process_cpu_s(broker_pid), time.monotonic() - started
            got["broker_cpu_pct"] = (
                None
                if cpu_before is None or cpu_after is None
                else round(100.0 * (cpu_after - cpu_before) / wall, 1)
            )
            got["round"] = r
            log(
                f"latency {fmt:<13} round {r}: p50 {got['p50_ms']:6.0f} ms, p99 "
                f"{got['p99_ms']:6.0f} ms, period {got['mean_period_ms'] or 0:5.0f} ms, "
                f"broker CPU {got['broker_cpu_pct']} %, "
                f"{got['batches_with_data']} batches, phases {got['median_phase_ms']}"
            )
            out.append(got)
    return out


class ProducerLimited(Exception):
    """The paced producer could not hold a probe's rate (it held ``held`` records/s)."""

    def __init__(self, held: float) -> None:
        super().__init__(held)
        self.held = held


def keeps_up(got: dict[str, Any], trigger_ms: int) -> bool:
    return bool(got["last_third_p95_ms"] <= 2 * trigger_ms)


def sustain_mode(run: Run, formats: list[str], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Per round and format: the ladder of rates tried and the highest that kept up."""
    out = []
    for r in range(args.rounds):
        order = formats if r % 2 == 0 else formats[::-1]
        for fmt in order:
            tried: list[dict[str, Any]] = []

            def probe(
                rate: int, fmt: str = fmt, tried: list[dict[str, Any]] = tried, r: int = r
            ) -> bool:
                got = run.query(fmt, rate, args.sustain_seconds, args.trigger_ms)
                ok = keeps_up(got, args.trigger_ms)
                got["keeps_up"] = ok
                tried.append(got)
                log(
                    f"sustain {fmt:<13} round {r}: {rate:>7,}/s "
                    f"{'kept up' if ok else 'fell behind'} (last third p95 "
                    f"{got['last_third_p95_ms']:.0f} ms, batch "
                    f"{got['median_phase_ms']['triggerExecution']} ms, producer held "
                    f"{got['produced_rate']:,.0f}/s)"
                )
                if got["produced_rate"] < PRODUCER_HELD * rate:
                    raise ProducerLimited(got["produced_rate"])
                return ok

            good, bad, rate = 0, None, args.sustain_start
            limit: float | None = None
            try:
                while rate <= args.sustain_max:
                    if not probe(rate):
                        bad = rate
                        break
                    good, rate = rate, rate * 2
                while good == 0 and bad is not None and bad // 2 >= args.sustain_min:
                    # The start fell behind: halve until a rate keeps up (a slow or loaded
                    # machine).
                    rate = bad // 2
                    if probe(rate):
                        good = rate
                    else:
                        bad = rate
                for _ in range(args.sustain_steps if bad is not None else 0):
                    mid = (good + bad) // 2
                    if probe(mid):
                        good = mid
                    else:
                        bad = mid
            except ProducerLimited as exc:
                # The rate was not offered, so the probe says nothing about the query: the
                # answer is "at least good", bounded by the producer, not by the stream.
                limit = exc.held
            out.append(
                {
                    "format": fmt,
                    "round": r,
                    "sustained_rate": good,
                    "producer_limited_at": limit,
                    "tried": tried,
                }
            )
    return out


def _pct(value: float | None) -> str:
    return f"{'-' if value is None else f'{value:.0f}':>9}"


def report(results: dict[str, Any]) -> None:
    print()
    print("versions: " + ", ".join(f"{k} {v}" for k, v in results["versions"].items()))
    print(f"load average: before {results['load_before']}, after {results['load_after']}")
    lat = results.get("latency")
    if lat:
        a = results["args"]
        print(
            f"\nlatency: {a['rate']:,} records/s x {a['size']} B into {a['partitions']} "
            f"partitions for {a['seconds']:g} s, default trigger, foreachBatch; per round"
        )
        print(
            f"{'format':<13} {'p50 ms':>8} {'p99 ms':>8} {'period ms':>10} {'broker %':>9}"
            "  median phase ms"
        )
        for fmt in results["formats"]:
            rows = [x for x in lat if x["format"] == fmt]
            for x in rows:
                ph = x["median_phase_ms"]
                print(
                    f"{fmt:<13} {x['p50_ms']:8.0f} {x['p99_ms']:8.0f} "
                    f"{x['mean_period_ms'] or 0:10.0f} {_pct(x.get('broker_cpu_pct'))}  "
                    + " ".join(f"{k}={v:g}" for k, v in ph.items() if v is not None)
                )
            cpu = [x["broker_cpu_pct"] for x in rows if x.get("broker_cpu_pct") is not None]
            print(
                f"{fmt + ' median':<13} {statistics.median(x['p50_ms'] for x in rows):8.0f} "
                f"{statistics.median(x['p99_ms'] for x in rows):8.0f} "
                f"{statistics.median(x['mean_period_ms'] or 0 for x in rows):10.0f} "
                f"{_pct(statistics.median(cpu) if cpu else None)}"
            )
    if lat and "profile" in lat[0]:
        print("\nprofile per query (medians; event log, and kafka_direct's task statistics)")
        for x in lat:
            shown = " ".join(f"{k}={_fmt(v)}" for k, v in x["profile"].items())
            print(f"{x['format']:<13} {shown}")
    sus = results.get("sustain")
    if sus:
        print(
            f"\nsustain: 1 s processingTime trigger ({results['args']['trigger_ms']} ms), "
            f"{results['args']['sustain_seconds']:g} s per rate; highest rate kept up, per round"
        )
        for fmt in results["formats"]:
            rates = [
                f"{x['sustained_rate']:,}"
                if x.get("producer_limited_at") is None
                else f">= {x['sustained_rate']:,} (the producer held only "
                f"{x['producer_limited_at']:,.0f}/s above it)"
                for x in sus
                if x["format"] == fmt
            ]
            print(f"{fmt:<13} {' '.join(rates)} records/s")


def _fmt(value: Any) -> str:
    return f"{value:.0f}" if isinstance(value, float) else str(value)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from kafka_direct_bench.oracle_python import run_on_oracle_pyspark, versions

    run_on_oracle_pyspark(__file__, argv)
    args = parse_args(argv)
    formats = [f for f in args.formats.split(",") if f]
    modes = set(args.modes.split(","))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from kafka_direct.testing.kafka_cluster import KAFKA_VERSION, KafkaCluster
    from kafka_direct.testing.local import local_spark
    from kafka_direct.testing.spark_connector import (
        connector_version,
        spark_kafka_conf,
        spark_kafka_jars,
    )

    jars = spark_kafka_jars() if "kafka" in formats else []
    load_before = loadavg()
    cluster = None
    bootstrap = args.bootstrap_servers
    if bootstrap is None:
        cluster = KafkaCluster(brokers=1).start()
        bootstrap = cluster.bootstrap_servers
    spark = run = None
    conf = spark_kafka_conf(jars) if jars else {}
    if args.profile:
        profile = Path(args.profile)
        (profile / "events").mkdir(parents=True, exist_ok=True)
        (profile / "stats").mkdir(parents=True, exist_ok=True)
        os.environ["KAFKA_DIRECT_STATS_DIR"] = str(profile / "stats")
        conf.update(
            {
                "spark.eventLog.enabled": "true",
                "spark.eventLog.dir": str(profile / "events"),
                "spark.eventLog.compress": "false",
                "spark.eventLog.rolling.enabled": "false",
                "spark.executorEnv.KAFKA_DIRECT_STATS_DIR": str(profile / "stats"),
            }
        )
    results: dict[str, Any] = {}
    try:
        spark = local_spark("kafka_direct-latency-bench", conf=conf)
        ver = versions(spark, connector_version(jars) if jars else None)
        ver["kafka_broker"] = KAFKA_VERSION if cluster is not None else "given"
        log("versions: " + ", ".join(f"{k} {v}" for k, v in ver.items()))
        run = Run(spark, bootstrap, args)
        # Untimed: the JIT, the Python workers and the pools, once per format.
        for fmt in formats:
            run.query(fmt, 200, 2.0, None)
        results = {
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "command": "python benchmarks/latency.py " + " ".join(argv),
            "versions": ver,
            "formats": formats,
            "args": vars(args),
            "load_before": load_before,
        }
        if "latency" in modes:
            broker = None if cluster is None else cluster.pid(cluster.broker_ids[0])
            results["latency"] = latency_mode(run, formats, args, broker)
        if "sustain" in modes:
            results["sustain"] = sustain_mode(run, formats, args)
        results["load_after"] = loadavg()
    finally:
        if run is not None:
            run.close()
        if spark is not None:
            spark.stop()
        if cluster is not None:
            cluster.stop()
    if args.profile:
        add_profiles(results, Path(args.profile))
    report(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


def add_profiles(results: dict[str, Any], profile: Path) -> None:
    """Each query's jobs and tasks (event log) and, for kafka_direct, its read tasks."""
    from kafka_direct_bench.stream_profile import (
        driver_profile,
        job_profile,
        read_profile,
        reads_by_task,
    )

    reads = reads_by_task(profile / "stats")
    for mode in ("latency",):
        for got in results.get(mode, []):
            got["profile"] = job_profile(profile / "events", *got["window_ms"], reads)
            if got["format"] == "kafka_direct":
                got["profile"].update(read_profile(profile / "stats", got["topic"]))
                got["profile"].update(driver_profile(profile / "stats", *got["window_ms"]))


if __name__ == "__main__":
    sys.exit(main())
