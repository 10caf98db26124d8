"""``python benchmarks/oracle.py --suite``: every mode, data set and row, in one Spark, on the
PySpark Spark's connector was built for. Runs in the benchmark process (the Spark driver); the
floors run in :class:`~kafka_direct_bench.raw.RawReaders` children spawned before Spark.

For each partition count and data set (:mod:`.suite_data`): a topic is made and filled, every
row reads it once untimed (the JIT, the Python workers, the producers' pools, the broker's page
cache: **both sides warm**), and the source frame of the writes (the topic's values, cached) is
counted. Then, in rounds whose order alternates (ABBA: the order of one round reversed in the
next), each mode runs once per row:

- ``batch read``:   ``read.load().agg(count(1), sum(length(value)))``, checked against the count
  and value bytes produced;
- ``stream read``:  ``readStream`` under ``Trigger.AvailableNow`` into ``noop``, checked by the
  rows the query's progress reports;
- ``batch write``:  ``df.write`` of the cached frame to a topic of its own;
- ``stream write``: ``readStream`` of the data set's topic into ``writeStream`` to a topic of its
  own, ``Trigger.AvailableNow``, each row reading and writing with its own format and options.

Every timed read and stream names a consumer group prefix of its own (``groupIdPrefix``): the
JVM connector makes new consumers for every query, and kafka_direct's pooled consumers are keyed
by group, so **both start each query with cold consumers** in warm processes. Producers are
pooled by their settings on both sides (Spark's ``spark.kafka.producer.cache``, kafka_direct's
pool): the warm-up write warmed them on both. A written topic is read back with
``format("kafka")`` (the independent implementation) and compared with the source by count,
value bytes and ``sum(crc32(value))``, a digest of the multiset of values; then deleted.

The rows: ``kafka_direct``, the JVM connector with its defaults (``kafka``), the JVM connector
tuned (``kafka tuned``), and the floor (``floor``: librdkafka with no Spark on as many processes
as Spark has cores, reading one task per partition and writing one producer per process;
:mod:`.suite_children`; its time runs from the first task's start to the last one's end).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from kafka_direct_bench.common import log
from kafka_direct_bench.dataset import (
    create_topic,
    delete_topics,
    new_topic,
    per_partition_counts,
    produce_dataset,
)
from kafka_direct_bench.raw import RawReaders
from kafka_direct_bench.suite_children import batch_rows, floor_content, floor_write_partition
from kafka_direct_bench.suite_data import (
    Dataset,
    codec_option,
    producer_settings,
    required_write_options,
    tuned_read_options,
    tuned_write_options,
    values,
)
from kafka_direct_bench.suite_report import FLOOR, JVM, MODES, OURS, TUNED, abba

Digest = tuple[int, int, int]


#: Values per batch of the set-up's cached frame (see DatasetRun._cached_values).
CACHE_BATCH_BYTES = 8 * 1024 * 1024


class Failed(RuntimeError):
    """A query of the suite read or wrote something other than the data set."""


def timed(action: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    result = action()
    return time.perf_counter() - started, result


class DatasetRun:
    """One data set at one partition count: its topic, its frame, and every timed query."""

    def __init__(self, suite: Suite, dataset: Dataset, partitions: int) -> None:
        self.suite, self.spark, self.bootstrap = suite, suite.spark, suite.bootstrap
        self.dataset, self.partitions = dataset, partitions
        self.records = dataset.scaled(suite.args.scale, partitions)
        self.counts = per_partition_counts(self.records, partitions)
        self.topic = new_topic(f"suite-{dataset.name}-{partitions}")
        self.frame: Any = None
        self.digest: Digest = (0, 0, 0)
        self.value_bytes = 0
        self.checkpoints = Path(tempfile.mkdtemp(prefix="oracle-suite-"))

    # -- the options of each row -------------------------------------------------------------

    def read_options(self, row: str) -> tuple[str, dict[str, str]]:
        opts = {
            "kafka.bootstrap.servers": self.bootstrap,
            "subscribe": self.topic,
            "groupIdPrefix": f"suite-{uuid.uuid4().hex[:12]}",
        }
        if row == TUNED:
            opts.update(tuned_read_options(self.suite.args.jvm_tuned_read))
        return ("kafka_direct" if row == OURS else "kafka"), opts

    def write_options(self, row: str, topic: str) -> tuple[str, dict[str, str]]:
        fmt = "kafka_direct" if row == OURS else "kafka"
        opts = {"kafka.bootstrap.servers": self.bootstrap, "topic": topic}
        opts.update(required_write_options(self.dataset, fmt))
        if row == OURS:
            opts.update(codec_option(self.dataset))
        elif row == TUNED:
            opts.update(tuned_write_options(self.suite.args.jvm_tuned_write, self.dataset))
        return fmt, opts

    # -- set-up ------------------------------------------------------------------------------

    def prepare(self) -> dict[str, Any]:
        ds = self.dataset
        create_topic(self.bootstrap, self.topic, self.partitions, ds.topic_config)
        produced = produce_dataset(
            self.bootstrap,
            self.topic,
            self.records,
            ds.size,
            self.partitions,
            7,
            values(ds),
            producer_settings(ds),
        )
        self.value_bytes = produced["bytes"]
        log(
            f"{ds.name} x {self.partitions} partitions: produced {self.records:,} records "
            f"({self.value_bytes / 1e6:,.1f} MB of values) in {produced['seconds']:.1f} s"
        )
        for row in (OURS, JVM, TUNED):  # warm-up, untimed
            self.batch_read(row)
        self.frame, self.digest = self._cached_values()
        if self.digest[:2] != (self.records, self.value_bytes):
            raise Failed(
                f"the cached frame holds {self.digest[:2]}, expected "
                f"{(self.records, self.value_bytes)}"
            )
        if "batch write" in self.suite.modes:
            for row in (OURS, JVM, TUNED):  # warms each row's pooled producer
                self.batch_write(row)
        if not self.suite.args.no_floor:  # the children's imports, and the values they build
            self.floor_read()
            self.floor_write()
        if not self.suite.streams_warm:
            # Once per run: each format's streaming classes and code paths (a stream's driver
            # side is new in every query on both sides; what is loaded once is not).
            for row in (OURS, JVM, TUNED):
                if "stream read" in self.suite.modes:
                    self.stream_read(row)
                if "stream write" in self.suite.modes:
                    self.stream_write(row)
            self.suite.streams_warm = True
        return {
            "records": self.records,
            "value_bytes": self.value_bytes,
            "produce_s": produced["seconds"],
        }

    def _cached_values(self) -> tuple[Any, Digest]:
        """The data set's values, cached in Spark: every write row writes the same frame, so a
        write times the write, not a read. Spark's columnar cache builds batches of
        ``spark.sql.inMemoryColumnarStorage.batchSize`` rows (10,000) in the heap, which for
        1 MiB values is a whole partition and ran the driver out of heap: the batches are cut
        to about :data:`CACHE_BATCH_BYTES` of values until the cache is built (the plan reads
        the session's setting when it runs). Returns the cached frame and its content."""
        key = "spark.sql.inMemoryColumnarStorage.batchSize"
        before = self.spark.conf.get(key)
        rows = max(1, min(int(before), CACHE_BATCH_BYTES // max(1, self.dataset.size)))
        fmt, opts = self.read_options(JVM)
        self.spark.conf.set(key, str(rows))
        try:
            frame = self.spark.read.format(fmt).options(**opts).load().select("value").cache()
            return frame, self.content(frame)
        finally:
            self.spark.conf.set(key, before)

    def close(self) -> None:
        if self.frame is not None:
            self.frame.unpersist()
        delete_topics(self.bootstrap, [self.topic])

    # -- the modes ---------------------------------------------------------------------------

    def content(self, df: Any) -> Digest:
        from pyspark.sql import functions as F

        row = df.agg(
            F.count(F.lit(1)), F.sum(F.length("value")), F.sum(F.crc32("value"))
        ).collect()[0]
        return int(row[0]), int(row[1] or 0), int(row[2] or 0)

    def read_back(self, topic: str, expected: Digest, what: str) -> None:
        # Untimed: without the 500 ms fetch wait per task at the log end (100 partitions: 50 s).
        opts = {"kafka.bootstrap.servers": self.bootstrap, "subscribe": topic,
                "kafka.fetch.max.wait.ms": "10"}  # fmt: skip
        got = self.content(self.spark.read.format("kafka").options(**opts).load())
        delete_topics(self.bootstrap, [topic])
        if got != expected:
            raise Failed(f"{what}: read back (count, bytes, sum crc32) {got}, expected {expected}")

    def batch_read(self, row: str) -> float:
        from pyspark.sql import functions as F

        fmt, opts = self.read_options(row)
        df = self.spark.read.format(fmt).options(**opts).load()
        agg = df.agg(F.count(F.lit(1)), F.sum(F.length("value")))
        seconds, got = timed(lambda: tuple(agg.collect()[0]))
        if got != (self.records, self.value_bytes):
            raise Failed(
                f"{row} batch read: (count, bytes) {got}, "
                f"expected {(self.records, self.value_bytes)}"
            )
        return seconds

    def _stream(self, row: str, sink: str) -> tuple[float, str | None]:
        fmt, opts = self.read_options(row)
        df = self.spark.readStream.format(fmt).options(**opts)
        df = df.option("startingOffsets", "earliest").load()
        checkpoint = self.checkpoints / uuid.uuid4().hex
        topic = None
        if sink == "noop":
            w = df.writeStream.format("noop")
        else:
            topic = new_topic(f"suite-sw-{row.replace(' ', '')}")
            create_topic(self.bootstrap, topic, self.partitions, self.dataset.topic_config)
            wfmt, wopts = self.write_options(row, topic)
            w = df.select("value").writeStream.format(wfmt).options(**wopts)
        w = w.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True)

        def run() -> int:
            query = w.start()
            query.awaitTermination()
            if query.exception() is not None:
                raise Failed(f"{row} stream ({sink}) failed: {query.exception()}")
            return sum(p["numInputRows"] for p in query.recentProgress)

        seconds, rows = timed(run)
        if rows != self.records:
            raise Failed(f"{row} stream ({sink}): {rows} input rows, expected {self.records}")
        return seconds, topic

    def stream_read(self, row: str) -> float:
        return self._stream(row, "noop")[0]

    def stream_write(self, row: str) -> float:
        seconds, topic = self._stream(row, "kafka")
        assert topic is not None
        self.read_back(topic, self.digest, f"{row} stream write")
        return seconds

    def batch_write(self, row: str) -> float:
        topic = new_topic(f"suite-bw-{row.replace(' ', '')}")
        create_topic(self.bootstrap, topic, self.partitions, self.dataset.topic_config)
        fmt, opts = self.write_options(row, topic)
        w = self.frame.write.format(fmt).mode("append").options(**opts)
        seconds, _ = timed(w.save)
        self.read_back(topic, self.digest, f"{row} batch write")
        return seconds

    def floor_read(self) -> float:
        rows = batch_rows(self.dataset.size)
        got = self.suite.floors.read(self.bootstrap, self.topic, self.counts, rows, arrow=True)
        if (got["rows"], got["bytes"]) != (self.records, self.value_bytes):
            raise Failed(
                f"read floor: {(got['rows'], got['bytes'])}, expected "
                f"{(self.records, self.value_bytes)}"
            )
        # From the first task's start to the last one's end (the pool's hand-over left out)
        return float(got["task_window_s"])

    def floor_write(self) -> float:
        from kafka_direct_bench.write_children import sink_settings

        topic = new_topic("suite-bw-floor")
        create_topic(self.bootstrap, topic, self.partitions, self.dataset.topic_config)
        settings = {**sink_settings(self.bootstrap), **producer_settings(self.dataset)}
        # One producer per floor process, each to the whole topic (librdkafka partitions).
        split = per_partition_counts(self.records, min(self.suite.args.cores, self.partitions))
        tasks = [(self.dataset.name, topic, n, settings) for n in split if n > 0]
        results = self.suite.floors.map(floor_write_partition, tasks)
        seconds = max(r["end"] for r in results) - min(r["start"] for r in results)
        expected = floor_content(self.dataset.name, [n for n in split if n > 0])
        self.read_back(topic, expected, "write floor")
        return seconds

    def run(self, mode: str, row: str) -> float:
        if row == FLOOR:
            return self.floor_read() if mode == "batch read" else self.floor_write()
        action = {
            "batch read": self.batch_read,
            "stream read": self.stream_read,
            "batch write": self.batch_write,
            "stream write": self.stream_write,
        }[mode]
        return action(row)


class Suite:
    def __init__(
        self, spark: Any, bootstrap: str, args: argparse.Namespace, floors: RawReaders
    ) -> None:
        self.spark, self.bootstrap, self.args, self.floors = spark, bootstrap, args, floors
        self.modes = [m for m in MODES if m in args.modes]
        self.streams_warm = False

    def dataset(self, dataset: Dataset, partitions: int) -> dict[str, Any]:
        """Every mode and row over one data set; failures are recorded, the run goes on."""
        out: dict[str, Any] = {
            "dataset": dataset.name,
            "describe": dataset.describe(),
            "partitions": partitions,
            "load_start": os.getloadavg(),
            "seconds": {},
            "failures": [],
        }
        run = DatasetRun(self, dataset, partitions)
        try:
            out.update(run.prepare())
        except Exception as exc:  # noqa: BLE001 - the report names it, the run goes on
            out["failures"].append(f"set-up: {str(exc).splitlines()[0][:300]}")
            log(f"{dataset.name} x {partitions}: set-up FAILED: {exc}")
            run.close()
            out["load_end"] = os.getloadavg()
            return out
        try:
            for r in range(self.args.rounds):
                for mode in self.modes:
                    rows = [OURS, JVM, TUNED]
                    if mode in ("batch read", "batch write") and not self.args.no_floor:
                        rows.append(FLOOR)
                    for row in abba(rows, r):
                        self._one(run, out, mode, row)
        finally:
            run.close()
        out["load_end"] = os.getloadavg()
        return out

    def _one(self, run: DatasetRun, out: dict[str, Any], mode: str, row: str) -> None:
        times = out["seconds"].setdefault(mode, {}).setdefault(row, [])
        try:
            seconds = run.run(mode, row)
        except Exception as exc:  # noqa: BLE001 - the report names it, the run goes on
            out["failures"].append(f"{mode}, {row}: {str(exc).splitlines()[0][:300]}")
            times.append(None)
            log(f"{run.dataset.name:<12} {mode:<13} {row:<13} FAILED: {exc}")
            return
        times.append(seconds)
        rate = run.records / seconds
        log(
            f"{run.dataset.name:<12} x{run.partitions:<4} {mode:<13} {row:<13} "
            f"{seconds:8.2f} s {rate:12,.0f} rec/s"
        )


WARMTH = (
    "both warm: every row read each data set once, untimed, before the first round (JIT, "
    "Python workers, page cache) and wrote it once (pooled producers, on both sides); every "
    "timed read and stream has a consumer group prefix of its own, so both sides start it "
    "with new consumers"
)


def _uptime() -> str:
    import subprocess

    try:
        return subprocess.run(
            ["uptime"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        return "unknown"


def _load() -> str:
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


def run_suite(args: argparse.Namespace, command: str) -> int:
    """The whole suite (see the module docstring): returns 1 if any query failed its check."""
    import json

    from kafka_direct.testing.kafka_cluster import KafkaCluster
    from kafka_direct.testing.local import local_spark
    from kafka_direct.testing.spark_connector import (
        connector_version,
        spark_kafka_conf,
        spark_kafka_jars,
    )
    from kafka_direct_bench.oracle_python import versions
    from kafka_direct_bench.suite_data import LARGE_LIMIT
    from kafka_direct_bench.suite_report import render

    started, load_start = time.strftime("%Y-%m-%d %H:%M", time.gmtime()), _load()
    jars = spark_kafka_jars()
    floors = RawReaders(args.cores)  # spawned before Spark starts: small children
    cluster, spark = None, None
    bootstrap, kafka, brokers = args.bootstrap_servers, "unknown (external)", "external cluster"
    runs: list[dict[str, Any]] = []
    try:
        if bootstrap is None:
            cluster = KafkaCluster(brokers=1, message_max_bytes=LARGE_LIMIT).start()
            bootstrap, kafka = cluster.bootstrap_servers, cluster.kafka_version
            brokers = "one broker, KRaft, started by the run"
        conf = {**spark_kafka_conf(jars), "spark.driver.memory": args.driver_memory}
        spark = local_spark("kafka_direct-oracle-suite", cores=args.cores, conf=conf)
        found = versions(spark, connector_version(jars))
        log("versions: " + ", ".join(f"{k} {v}" for k, v in found.items()) + f", kafka {kafka}")
        suite = Suite(spark, bootstrap, args, floors)
        for partitions in args.partition_counts:
            for dataset in args.dataset_list:
                runs.append(suite.dataset(dataset, partitions))
    finally:
        if spark is not None:
            spark.stop()
        floors.close()
        if cluster is not None:
            cluster.stop()
    report = {
        "command": command,
        "started": started,
        "ended": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "load": {"start": load_start, "end": _load(), "uptime_end": _uptime()},
        "machine": f"{os.cpu_count()} CPUs, local[{args.cores}] Spark "
        f"(spark.driver.memory {args.driver_memory}), shared machine",
        "versions": found,
        "kafka": kafka,
        "brokers": brokers,
        "rounds": args.rounds,
        "scale": args.scale,
        "warmth": WARMTH,
        "tuned_read": args.jvm_tuned_read,
        "tuned_write": args.jvm_tuned_write,
        "runs": runs,
    }
    from kafka_direct_bench.suite_report import summarise

    for run in runs:
        run["summary"] = summarise(run)
    markdown = render(report)
    print(markdown)
    Path(args.json or "oracle-suite.json").write_text(json.dumps(report, indent=2, default=str))
    Path(args.markdown).write_text(markdown)
    log(f"wrote {args.json or 'oracle-suite.json'} and {args.markdown}")
    return 1 if any(r.get("failures") for r in runs) else 0
