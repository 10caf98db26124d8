"""The write rows: the sink against a plain producer loop, in the same run, on the same broker.
Runs in the benchmark process (the Spark driver); the baselines run in the raw children.

Every round writes the data set's size (N records of S bytes over P partitions) once per mode,
each mode to a topic of its own, in an order that rotates between rounds:

- ``raw``: P plain confluent-kafka producer loops, one process each, with the sink's producer
  settings (``write_children.raw_write_partition``): the baseline of every write ratio;
- ``raw_defaults``: the same loops with librdkafka's defaults, for transparency only;
- ``native``: P processes of kafka_direct's C write path without Spark (the floor);
- ``spark_floor``: the DataFrame handed by Spark to a Python Arrow writer that only counts
  (``floor_sink``): Spark's own cost to feed any Python writer;
- ``batch``: ``df.write.format("kafka_direct")`` (the C path), and ``batch_python`` the same with
  ``fastPath.enabled=false``;
- ``stream``: ``readStream.format("kafka_direct")`` of the data set's topic into
  ``writeStream.format("kafka_direct")``, ``Trigger.AvailableNow``: a Kafka-to-Kafka stream,
  reading included.

The DataFrame is ``spark.range`` with one value column of S bytes, P partitions, cached and
counted before any clock starts. Each mode's topic is then read back and counted exactly: one
marker record per partition, flushed on its own, makes the embedded broker's log end exact
(``shared/BROKER.md``), and the extension's readers count records and value bytes up to it. The
topic is deleted afterwards, so the in-memory broker does not fill up.

:meth:`Writes.memory` samples the Python workers' RSS over a batch write, as the read side's
memory phase does.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from kafka_direct_bench.common import BenchmarkError, log
from kafka_direct_bench.config import WRITE_MODES, Config
from kafka_direct_bench.dataset import (
    create_topic,
    delete_topics,
    latest_offsets,
    new_topic,
    per_partition_counts,
)
from kafka_direct_bench.floor_sink import floor_sink
from kafka_direct_bench.procstats import (
    RssSampler,
    cpu_snapshot,
    cpu_used,
    python_worker_pids,
    rss_mb,
)
from kafka_direct_bench.raw import RawReaders
from kafka_direct_bench.spark_reads import SparkReads
from kafka_direct_bench.write_children import (
    defaults_settings,
    native_write_partition,
    raw_write_partition,
    sink_settings,
)


def write_stats(stats_dir: Path, topic: str) -> list[dict[str, Any]]:
    """The write tasks' lines (``kafka_direct.producer.write``, ``floor_sink``) for ``topic``."""
    out = []
    for path in stats_dir.glob("tasks-*.jsonl"):
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                rec = json.loads(line)
                if rec.get("role") == "write" and rec.get("topic") == topic:
                    out.append(rec)
    return out


def _window(tasks: list[dict[str, Any]]) -> dict[str, Any]:
    """The in-task rate: records over the span from the first task's start to the last's end."""
    if not tasks:
        return {"task_window_s": None, "task_rate": None, "tasks": 0, "kinds": []}
    rows = sum(t["rows"] for t in tasks)
    window = max(t["end"] for t in tasks) - min(t["start"] for t in tasks)
    return {
        "task_window_s": window,
        "task_rate": rows / window if window > 0 else None,
        "tasks": len(tasks),
        "kinds": sorted({t["kind"] for t in tasks}),
        "written": rows,
    }


class Writes:
    """The write modes on one Spark session and one broker (see the module docstring)."""

    def __init__(
        self, reads: SparkReads, raw: RawReaders, raw_arrow: RawReaders, config: Config
    ) -> None:
        self.reads, self.spark = reads, reads.spark
        self.raw, self.raw_arrow = raw, raw_arrow
        self.bootstrap = reads.bootstrap
        self.config = config
        self.counts = per_partition_counts(config.records, config.partitions)
        self.spark.dataSource.register(floor_sink())
        self._df: Any = None

    # -- the DataFrame every Spark mode writes ----------------------------------------------

    def dataframe(self) -> Any:
        """N rows of one binary value of S bytes in P partitions, cached and counted."""
        if self._df is None:
            c = self.config
            df = self.spark.range(0, c.records, 1, c.partitions).selectExpr(
                f"cast(lpad(cast(id as string), {c.size}, 'kafka-direct') as binary) as value"
            )
            df.cache()
            if df.count() != c.records:
                raise BenchmarkError("the cached DataFrame does not hold the data set")
            self._df = df
        return self._df

    def unpersist(self) -> None:
        if self._df is not None:
            self._df.unpersist()
            self._df = None

    # -- the modes ---------------------------------------------------------------------------

    def _children(self, pool: RawReaders, function: Any, topic: str, settings: dict[str, str]):
        c = self.config
        tasks = [(self.bootstrap, topic, n, c.size, c.seed + p, settings)
                 for p, n in enumerate(self.counts) if n > 0]  # fmt: skip
        cpu = cpu_snapshot()
        t0 = time.time()
        results = pool.map(function, tasks)
        wall = time.time() - t0
        rows = sum(r["rows"] for r in results)
        window = max(r["end"] for r in results) - min(r["start"] for r in results)
        return {
            **cpu_used(cpu, rows),
            "written": rows,
            "wall_s": wall,
            "rate": rows / wall,
            "task_window_s": window,
            "task_rate": rows / window if window > 0 else None,
            "tasks": len(results),
            "child_cpu_s": sum(r["cpu_s"] for r in results),
        }

    def raw_loop(self, topic: str, defaults: bool = False) -> dict[str, Any]:
        settings = defaults_settings(self.bootstrap) if defaults else sink_settings(self.bootstrap)
        return self._children(self.raw, raw_write_partition, topic, settings)

    def native(self, topic: str) -> dict[str, Any]:
        return self._children(
            self.raw_arrow, native_write_partition, topic, sink_settings(self.bootstrap)
        )

    def _timed(self, action: Any, label: str) -> dict[str, Any]:
        cpu = cpu_snapshot()
        t0 = time.time()
        action()
        wall = time.time() - t0
        tasks = write_stats(self.reads.stats_dir, label)
        out = {"wall_s": wall, "rate": self.config.records / wall, **_window(tasks)}
        out.update(cpu_used(cpu, self.config.records))
        return out

    def spark_floor(self, label: str) -> dict[str, Any]:
        df = self.dataframe()
        writer = (
            df.write.format("kafka_direct_bench_count")
            .mode("append")
            .option("dir", str(self.reads.stats_dir))
            .option("label", label)
        )
        out = self._timed(writer.save, label)
        tasks = write_stats(self.reads.stats_dir, label)
        out["rows"] = sum(t["rows"] for t in tasks)
        out["bytes"] = sum(t["bytes"] for t in tasks)
        return out

    def batch(self, topic: str, fast: bool = True) -> dict[str, Any]:
        writer = (
            self.dataframe()
            .write.format("kafka_direct")
            .mode("append")
            .option("kafka.bootstrap.servers", self.bootstrap)
            .option("topic", topic)
            .option("fastPath.enabled", str(fast).lower())
        )
        return self._timed(writer.save, topic)

    def stream(self, source: str, topic: str) -> dict[str, Any]:
        """Kafka to Kafka: the data set's topic, read and written by one streaming query."""
        checkpoint = self.reads.work_dir / f"ckpt-write-{uuid.uuid4().hex[:8]}"

        def run() -> None:
            query = (
                self.spark.readStream.format("kafka_direct")
                .option("kafka.bootstrap.servers", self.bootstrap)
                .option("subscribe", source)
                .option("startingOffsets", "earliest")
                .load()
                .select("key", "value")
                .writeStream.format("kafka_direct")
                .option("kafka.bootstrap.servers", self.bootstrap)
                .option("topic", topic)
                .option("checkpointLocation", str(checkpoint))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()

        try:
            return self._timed(run, topic)
        finally:
            shutil.rmtree(checkpoint, ignore_errors=True)

    # -- reading back ------------------------------------------------------------------------

    def read_back(self, topic: str) -> tuple[int, int]:
        """(records, value bytes) in ``topic``, counted exactly (see the module docstring)."""
        partitions = self.config.partitions
        errors: list[str] = []

        def on_delivery(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(str(err))

        marker = Producer({"bootstrap.servers": self.bootstrap, "client.id": "bench-marker"})
        for p in range(partitions):
            marker.produce(topic, b"", partition=p, on_delivery=on_delivery)
            if marker.flush(60) or errors:  # one record per batch: the log end is exact
                raise BenchmarkError(f"the marker for {topic}-{p} was not delivered: {errors[:1]}")
        ends = latest_offsets(self.bootstrap, topic, partitions)
        got = self.raw_arrow.read(self.bootstrap, topic, ends, 20_000, arrow=True)
        return got["rows"] - partitions, got["bytes"]  # the markers are empty values

    def measure(self, mode: str, data_topic: str) -> dict[str, Any]:
        """One mode: a new topic, the write, the read-back, the topic deleted."""
        if mode == "spark_floor":
            return self.spark_floor(new_topic("count"))
        topic = new_topic(f"w-{mode.replace('_', '-')}")
        create_topic(self.bootstrap, topic, self.config.partitions)
        try:
            if mode in ("raw", "raw_defaults"):
                out = self.raw_loop(topic, defaults=mode == "raw_defaults")
            elif mode == "native":
                out = self.native(topic)
            elif mode in ("batch", "batch_python"):
                out = self.batch(topic, fast=mode == "batch")
            elif mode == "stream":
                out = self.stream(data_topic, topic)
            else:
                raise BenchmarkError(f"unknown write mode {mode!r}")
            out["rows"], out["bytes"] = self.read_back(topic)
            return out
        finally:
            delete_topics(self.bootstrap, [topic])

    # -- memory -------------------------------------------------------------------------------

    def memory(self) -> dict[str, Any]:
        """Python worker RSS over a batch write of the data set (C path): early and late peaks
        of each task, as the read side's memory phase reports them."""
        topic = new_topic("w-memory")
        create_topic(self.bootstrap, topic, self.config.partitions)
        before = {pid: rss_mb(pid) for pid in python_worker_pids()}
        try:
            with RssSampler() as sampler:
                self.batch(topic)
            rows, _ = self.read_back(topic)
        finally:
            delete_topics(self.bootstrap, [topic])
        workers = []
        for task in write_stats(self.reads.stats_dir, topic):
            pid, start, end = task["pid"], task["start"], task["end"]
            during = [(t, rss) for t, p, rss in sampler.samples if p == pid and start <= t <= end]
            if not during:
                continue
            values = [rss for _, rss in during]
            early = [r for t, r in during if t <= start + (end - start) * 0.2] or values[:1]
            late = [r for t, r in during if t >= start + (end - start) * 0.5] or values[-1:]
            idle = before.get(pid)
            workers.append({
                "pid": pid, "rows": task["rows"], "arrow_batches": task["batches"],
                "rss_idle_before_mb": idle, "rss_task_start_mb": values[0],
                "rss_peak_mb": max(values), "rss_end_mb": values[-1],
                "growth_mb": max(values) - (idle if idle is not None else values[0]),
                "late_minus_early_peak_mb": max(late) - max(early), "samples": len(values),
            })  # fmt: skip
        return {
            "rows": rows,
            "workers": workers,
            "max_growth_mb": max((w["growth_mb"] for w in workers), default=None),
            "max_drift_mb": max(
                (abs(w["late_minus_early_peak_mb"]) for w in workers), default=None
            ),
        }


def run_writes(writes: Writes, data_topic: str, config: Config) -> dict[str, Any]:
    """The warm-up and the rounds of every write mode, then the memory run."""
    writes.dataframe()
    if not config.quick:  # --quick checks correctness only: its rates mean little anyway
        log("writes: warming up every write mode")
        for mode in WRITE_MODES:
            writes.measure(mode, data_topic)
    rounds = []
    for i in range(config.rounds):
        log(f"write round {i + 1}/{config.rounds}: {', '.join(WRITE_MODES)}")
        order = list(WRITE_MODES[i % len(WRITE_MODES) :] + WRITE_MODES[: i % len(WRITE_MODES)])
        rnd: dict[str, Any] = {}
        for mode in order:
            try:
                rnd[mode] = writes.measure(mode, data_topic)
            except Exception as exc:
                raise BenchmarkError(f"write round {i + 1}, mode {mode!r} failed: {exc}") from exc
        rounds.append({mode: rnd[mode] for mode in WRITE_MODES})
        log("  " + "  ".join(f"{k} {v['rate']:,.0f}/s" for k, v in rounds[-1].items()))
    out: dict[str, Any] = {"rounds": rounds}
    if "write_memory" not in config.skip:
        log("write memory: Python worker RSS over a batch write")
        out["memory"] = writes.memory()
    writes.unpersist()
    return out
