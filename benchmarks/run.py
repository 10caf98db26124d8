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
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

STATS_DIR_ENV = "KAFKA_DIRECT_STATS_DIR"  # kafka_direct.executor.STATS_DIR_ENV
DEFAULT_ARROW_BATCH = 20_000  # the source option arrowBatchSize's default
PHASES = ("fixed", "many", "memory", "latency", "planning")  # optional phases, after the rounds


# --- configuration ------------------------------------------------------------------------------


@dataclass
class Config:
    records: int = 2_000_000
    size: int = 100
    partitions: int = 2
    bootstrap_servers: str | None = None
    rounds: int = 5
    micro_batches: int = 40
    latency_rate: int = 20_000
    latency_seconds: float = 20.0
    trigger_ms: int = 500
    planning_partitions: int = 100
    planning_triggers: int = 20
    arrow_batch_size: int = DEFAULT_ARROW_BATCH
    memory_arrow_batch_size: int = DEFAULT_ARROW_BATCH
    seed: int = 42
    quick: bool = False
    json_path: str | None = None
    skip: tuple[str, ...] = ()

    @classmethod
    def quick_mode(cls, **overrides: Any) -> Config:
        """Tiny sizes: seconds, for the smoke test. Correctness only; the rates mean little."""
        base = cls(
            records=20_000,
            rounds=1,
            micro_batches=4,
            latency_rate=2_000,
            latency_seconds=3.0,
            planning_partitions=100,
            planning_triggers=3,
            memory_arrow_batch_size=250,  # 10,000 records per task = 40 Arrow batches
            quick=True,
        )
        for key, value in overrides.items():
            setattr(base, key, value)
        return base


def parse_args(argv: list[str] | None) -> Config:
    p = argparse.ArgumentParser(
        description="kafka_direct benchmarks: rates and ratios to raw librdkafka, in one run.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    d = Config()
    p.add_argument("--records", type=int, help=f"records in the data set (default {d.records:,})")
    p.add_argument("--size", type=int, default=d.size, help="bytes per record value")
    p.add_argument("--partitions", type=int, default=d.partitions, help="partitions of the topic")
    p.add_argument(
        "--bootstrap-servers", help="use this cluster instead of starting the embedded broker"
    )
    p.add_argument("--rounds", type=int, help=f"interleaved raw/batch/stream rounds ({d.rounds})")
    p.add_argument(
        "--micro-batches",
        type=int,
        help=f"micro-batches of the maxOffsetsPerTrigger run ({d.micro_batches})",
    )
    p.add_argument("--latency-rate", type=int, help=f"records/s ({d.latency_rate:,})")
    p.add_argument("--latency-seconds", type=float, help=f"producer run time ({d.latency_seconds})")
    p.add_argument("--trigger-ms", type=int, default=d.trigger_ms, help="latency trigger interval")
    p.add_argument(
        "--planning-partitions", type=int, default=d.planning_partitions, help="planning topic size"
    )
    p.add_argument("--seed", type=int, default=d.seed, help="seed of the data set")
    p.add_argument("--quick", action="store_true", help="tiny sizes, seconds (the smoke test)")
    p.add_argument("--json", dest="json_path", help="write all results to this JSON file")
    p.add_argument(
        "--skip",
        type=lambda text: tuple(x.strip() for x in text.split(",") if x.strip()),
        help=f"comma-separated phases to leave out: {', '.join(PHASES)}",
    )
    a = p.parse_args(argv)
    given = {
        k: v
        for k, v in vars(a).items()
        if v is not None and k not in ("quick",) and not (k == "json_path" and v is None)
    }
    config = Config.quick_mode(**given) if a.quick else Config(**given)
    unknown = set(config.skip) - set(PHASES)
    if unknown:
        p.error(f"--skip: unknown phase(s) {', '.join(sorted(unknown))}; phases: {PHASES}")
    if config.records < config.partitions:
        p.error("--records must be at least --partitions")
    return config


# --- small helpers ------------------------------------------------------------------------------


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values."""
    if not sorted_values:
        return float("nan")
    rank = max(1, min(len(sorted_values), round(q / 100.0 * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1]


def per_partition_counts(records: int, partitions: int) -> list[int]:
    base, extra = divmod(records, partitions)
    return [base + (1 if p < extra else 0) for p in range(partitions)]


def new_topic(prefix: str) -> str:
    return f"bench-{prefix}-{uuid.uuid4().hex[:8]}"


def machine_info() -> dict[str, Any]:
    cpu = platform.processor() or ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_gb = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        first = Path("/proc/meminfo").read_text().splitlines()[0]
        mem_gb = round(int(first.split()[1]) / 1024 / 1024, 1)
    versions: dict[str, str] = {"python": platform.python_version()}
    import confluent_kafka
    import pyarrow

    versions["confluent_kafka"] = str(confluent_kafka.__version__)
    versions["librdkafka"] = confluent_kafka.libversion()[0]
    versions["pyarrow"] = pyarrow.__version__
    with contextlib.suppress(ImportError):
        import pyspark

        versions["pyspark"] = pyspark.__version__
    load = None
    with contextlib.suppress(OSError):
        load = os.getloadavg()[0]
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": mem_gb,
        "os": platform.platform(),
        "load_average_1m_at_start": load,
        "versions": versions,
    }


# --- the data set -------------------------------------------------------------------------------


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from kafka_direct.broker import create_topic as create

    create(bootstrap, topic, partitions=partitions)


def produce_dataset(
    bootstrap: str, topic: str, records: int, size: int, partitions: int, seed: int
) -> dict[str, Any]:
    """N records of ``size`` random bytes (fixed seed) with 8-byte keys, partition by partition.

    The embedded broker reports the log end as the start of the last record batch (BROKER.md),
    so each partition's final record is flushed on its own: the log end is then exact.
    """
    rnd = random.Random(seed)
    values = [rnd.randbytes(size) for _ in range(1024)]
    keys = [rnd.randbytes(8) for _ in range(1024)]
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": "50",
            "batch.num.messages": "10000",
            "batch.size": "1000000",
            "queue.buffering.max.messages": "1000000",
            "queue.buffering.max.kbytes": "1048576",
            "client.id": "kafka-direct-bench-producer",
        }
    )
    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    counts = per_partition_counts(records, partitions)
    started = time.perf_counter()
    for p, count in enumerate(counts):
        for i in range(count - 1):
            while True:
                try:
                    value, key = values[i & 1023], keys[i & 1023]
                    producer.produce(topic, value, key, partition=p, on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.05)
    producer.flush(120)
    for p, count in enumerate(counts):
        if count > 0:
            producer.produce(topic, values[0], keys[0], partition=p, on_delivery=on_delivery)
            producer.flush(60)
    elapsed = time.perf_counter() - started
    if errors:
        raise RuntimeError(f"producing the data set failed: {errors[:3]}")
    ends = latest_offsets(bootstrap, topic, partitions)
    if ends != counts:
        raise RuntimeError(f"the log ends at {ends}, expected {counts}: the data set is incomplete")
    return {"seconds": elapsed, "rate": records / elapsed, "per_partition": counts}


def latest_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kafka-direct-bench-probe"})
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)[1]
            for p in range(partitions)
        ]
    finally:
        consumer.close()


# --- raw: plain confluent-kafka, one process per partition ---------------------------------------


def raw_consumer_config(bootstrap: str) -> dict[str, str]:
    """The executors' librdkafka settings (same fetch tunables), for a plain consumer: the ratio
    then measures what Spark and the source add, not a difference in client configuration."""
    from kafka_direct.settings import executor_consumer_config

    config = executor_consumer_config(
        {"bootstrap.servers": bootstrap},
        group_id="kafka-direct-bench-raw",
        isolation_level="read_uncommitted",
    )
    config["enable.partition.eof"] = "false"  # plain: no EOF events, every message is data
    config["client.id"] = "kafka-direct-bench-raw"
    return config


def raw_read_partition(task: tuple[dict[str, str], str, int, int, int, int]) -> dict[str, Any]:
    """One raw reader: assign, consume in batches, touch every value (``len``). Runs in a child."""
    config, topic, partition, start, until, batch = task
    t0 = time.time()
    consumer = Consumer(config)
    consumer.assign([TopicPartition(topic, partition, start)])
    rows = total = 0
    nxt = start
    while nxt < until:
        msgs = consumer.consume(min(batch, until - nxt), 1.0)
        for m in msgs:
            total += len(m.value())
        if msgs:
            rows += len(msgs)
            nxt = msgs[-1].offset() + 1
    t1 = time.time()
    consumer.close()
    return {"partition": partition, "rows": rows, "bytes": total, "start": t0, "end": t1}


def paced_producer(task: tuple[str, str, int, int, float, int, int]) -> dict[str, Any]:
    """The latency run's producer: ``rate`` records/s for ``seconds``, in 10 ms ticks. Child."""
    bootstrap, topic, partitions, rate, seconds, size, seed = task
    value = random.Random(seed).randbytes(size)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": "5", "client.id": "kafka-direct-bench-lat"}
    )
    tick = 0.01
    per_tick = max(1, round(rate * tick))
    sent = 0
    start = time.monotonic()
    deadline = start + seconds
    next_tick = start
    while next_tick < deadline:
        for _ in range(per_tick):
            producer.produce(topic, value, partition=sent % partitions)
            sent += 1
        producer.poll(0)
        next_tick += tick
        pause = next_tick - time.monotonic()
        if pause > 0:
            time.sleep(pause)
    producer.flush(30)
    # The embedded broker's log end lags by one record batch (BROKER.md): a lone final record
    # per partition makes every record above visible.
    for p in range(partitions):
        producer.produce(topic, value, partition=p)
        sent += 1
        producer.flush(30)
    return {"sent": sent, "seconds": time.monotonic() - start}


class RawReaders:
    """A pool of P warm child processes (spawned once, before Spark starts)."""

    def __init__(self, processes: int) -> None:
        self._pool = multiprocessing.get_context("spawn").Pool(processes)

    def read(self, bootstrap: str, topic: str, counts: list[int], batch: int) -> dict[str, Any]:
        config = raw_consumer_config(bootstrap)
        tasks = [(config, topic, p, 0, n, batch) for p, n in enumerate(counts) if n > 0]
        cpu = cpu_snapshot()
        t0 = time.time()
        results = self._pool.map(raw_read_partition, tasks, chunksize=1)
        wall = time.time() - t0
        rows = sum(r["rows"] for r in results)
        window = max(r["end"] for r in results) - min(r["start"] for r in results)
        return {
            **cpu_used(cpu, rows),
            "rows": rows,
            "bytes": sum(r["bytes"] for r in results),
            "wall_s": wall,
            "rate": rows / wall,
            "task_window_s": window,
            "task_rate": rows / window,
        }

    def produce_paced(self, task: tuple[str, str, int, int, float, int, int]) -> Any:
        return self._pool.apply_async(paced_producer, (task,))

    def close(self) -> None:
        self._pool.close()
        self._pool.join()


# --- executor statistics and worker memory -------------------------------------------------------


def task_stats(stats_dir: Path, topic: str, since: float, until: float) -> list[dict[str, Any]]:
    """The executors' per-task lines (kafka_direct.executor) for ``topic`` in a time window."""
    out = []
    for path in stats_dir.glob("tasks-*.jsonl"):
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                rec = json.loads(line)
                if rec["topic"] == topic and rec["start"] >= since and rec["end"] <= until:
                    out.append(rec)
    return out


def task_window(tasks: list[dict[str, Any]]) -> dict[str, Any]:
    if not tasks:
        return {"task_window_s": None, "task_rate": None, "tasks": 0}
    rows = sum(t["rows"] for t in tasks)
    window = max(t["end"] for t in tasks) - min(t["start"] for t in tasks)
    return {
        "task_window_s": window,
        "task_rate": rows / window if window > 0 else None,
        "tasks": len(tasks),
    }


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                kids.setdefault(ppid, []).append(int(entry))
    return kids


def python_worker_pids() -> list[int]:
    """Spark's Python workers under this driver: the children of its ``pyspark.daemon``."""
    kids = _children()
    stack, daemons = [os.getpid()], []
    while stack:
        pid = stack.pop()
        for child in kids.get(pid, []):
            with contextlib.suppress(OSError):
                cmd = Path(f"/proc/{child}/cmdline").read_bytes()
                if (
                    b"pyspark.daemon" in cmd
                    and b"pyspark.daemon" not in Path(f"/proc/{pid}/cmdline").read_bytes()
                ):
                    daemons.append(child)
                    continue
            stack.append(child)
    return [w for d in daemons for w in kids.get(d, [])]


def rss_mb(pid: int) -> float | None:
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return None


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_group(pid: int, cmd: bytes) -> str:
    if pid == os.getpid():
        return "driver"
    if b"tansu" in cmd:
        return "broker"
    if b"java" in cmd.split(b"\0", 1)[0]:
        return "jvm"
    if b"pyspark" in cmd:
        return "python_workers"
    if b"multiprocessing" in cmd:
        return "raw_readers"
    return "other"


Snapshot = dict[int, tuple[str, float, float]]


def cpu_snapshot() -> Snapshot:
    """Per process (this one and every descendant): its role (the broker, the JVM, Spark's
    Python workers, the raw readers, this driver), its own CPU seconds (user + system), and the
    CPU seconds of its children that have exited and been reaped."""
    kids = _children()
    out: Snapshot = {}
    stack = [os.getpid()]
    while stack:
        pid = stack.pop()
        stack.extend(kids.get(pid, []))
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            own = (int(fields[11]) + int(fields[12])) / _TICKS
            reaped = (int(fields[13]) + int(fields[14])) / _TICKS
            out[pid] = (_cpu_group(pid, cmd) if cmd else "exited", own, reaped)
    return out


def cpu_used(before: Snapshot, rows: int) -> dict[str, Any]:
    """CPU used since ``before``, by role.

    Spark starts short-lived Python processes (a streaming query's source runner on the driver
    lives as long as the query). Once reaped, their CPU shows up only in their parent's count of
    reaped children; it is reported as ``short_lived``, minus what they had used before the
    window, so it is neither lost nor counted twice.
    """
    after = cpu_snapshot()
    by_role: Counter[str] = Counter()
    for pid, (role, own, reaped) in after.items():
        # A process that started and exited in the window (a zombie now) was short-lived too.
        old_role, old_own, old_reaped = before.get(pid, ("short_lived", 0.0, 0.0))
        by_role[old_role if role == "exited" else role] += own - old_own
        by_role["short_lived"] += reaped - old_reaped
    for pid, (_role, own, reaped) in before.items():
        if pid not in after:  # reaped meanwhile: its parent's count includes what it had used
            by_role["short_lived"] -= own + reaped
    total = sum(v for v in by_role.values() if v > 0)
    return {
        "cpu_s": {k: round(v, 3) for k, v in by_role.items() if abs(v) >= 0.005},
        "cpu_total_s": total,
        "cpu_us_per_record": total / rows * 1e6 if rows else None,
    }


class RssSampler:
    """Samples the RSS of every Python worker every ``interval_s`` in a thread."""

    def __init__(self, interval_s: float = 0.05) -> None:
        self.interval_s = interval_s
        self.samples: list[tuple[float, int, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        pids: list[int] = []
        refreshed = 0.0
        while not self._stop.is_set():
            now = time.time()
            if now - refreshed > 0.5:
                pids, refreshed = python_worker_pids(), now
            for pid in pids:
                rss = rss_mb(pid)
                if rss is not None:
                    self.samples.append((now, pid, rss))
            self._stop.wait(self.interval_s)


# --- Spark reads --------------------------------------------------------------------------------


def _progress_field(progress: Any, name: str) -> Any:
    if isinstance(progress, dict):
        return progress.get(name)
    return getattr(progress, name, None)


def _progress_list(query: Any) -> list[dict[str, Any]]:
    out = []
    for p in query.recentProgress:
        out.append(
            {
                "batchId": _progress_field(p, "batchId"),
                "numInputRows": _progress_field(p, "numInputRows"),
                "durationMs": dict(_progress_field(p, "durationMs") or {}),
            }
        )
    return out


# --- Spark's own floor: a Python data source with no Kafka work at all -------------------------


def _floor_source() -> Any:
    """A data source that yields ready-made Arrow batches with kafka_direct's schema: what any
    Python data source costs in Spark, with nothing to read. Built lazily (imports pyspark)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class FloorReader(DataSourceReader):
        def __init__(self, counts: list[int], size: int, batch: int) -> None:
            self.counts, self.size, self.batch = counts, size, batch

        def partitions(self) -> list[InputPartition]:
            return [InputPartition(p) for p in range(len(self.counts))]

        def read(self, partition: InputPartition) -> Iterator[Any]:
            import pyarrow as pa

            from kafka_direct.rows import ARROW_SCHEMA

            p, n, rows = partition.value, self.counts[partition.value], self.batch
            first = pa.RecordBatch.from_arrays(
                [
                    pa.array([b"k" * 8] * rows, pa.binary()),
                    pa.array([b"v" * self.size] * rows, pa.binary()),
                    pa.array(["bench-floor-00000000"] * rows, pa.string()),
                    pa.array([p] * rows, pa.int32()),
                    pa.array(range(rows), pa.int64()),
                    pa.array([1_700_000_000_000_000] * rows, pa.timestamp("us", tz="UTC")),
                    pa.array([0] * rows, pa.int32()),
                ],
                schema=ARROW_SCHEMA,
            )
            while n > 0:
                yield first if n >= rows else first.slice(0, n)
                n -= rows

    class FloorSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "kafka_direct_bench_floor"

        def schema(self) -> str:
            from kafka_direct.rows import schema_ddl

            return schema_ddl(False)

        def reader(self, schema: Any) -> DataSourceReader:
            counts = [int(c) for c in self.options["counts"].split(",")]
            return FloorReader(counts, int(self.options["size"]), int(self.options["batch"]))

    return FloorSource


class SparkReads:
    """The Spark side: one local session, with the executors' statistics directory."""

    def __init__(self, bootstrap: str, stats_dir: Path, work_dir: Path, arrow_batch: int) -> None:
        os.environ[STATS_DIR_ENV] = str(stats_dir)  # inherited by the JVM and its Python workers
        from kafka_direct.local import local_spark

        self.spark = local_spark(
            "kafka_direct-bench", conf={f"spark.executorEnv.{STATS_DIR_ENV}": str(stats_dir)}
        )
        self.spark.dataSource.register(_floor_source())
        self.bootstrap = bootstrap
        self.stats_dir = stats_dir
        self.work_dir = work_dir
        self.arrow_batch = arrow_batch

    def _options(self, topic: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        opts = {"kafka.bootstrap.servers": self.bootstrap, "subscribe": topic}
        if self.arrow_batch != DEFAULT_ARROW_BATCH:
            opts["arrowBatchSize"] = str(self.arrow_batch)
        opts.update(extra or {})
        return opts

    def batch(self, topic: str) -> dict[str, Any]:
        from pyspark.sql import functions as F

        cpu = cpu_snapshot()
        t0 = time.time()
        df = self.spark.read.format("kafka_direct").options(**self._options(topic)).load()
        row = df.agg(F.count(F.lit(1)).alias("n"), F.sum(F.length("value")).alias("b")).collect()
        wall = time.time() - t0
        rows, nbytes = int(row[0]["n"]), int(row[0]["b"] or 0)
        out = {"rows": rows, "bytes": nbytes, "wall_s": wall, "rate": rows / wall}
        out.update(cpu_used(cpu, rows))
        out.update(task_window(task_stats(self.stats_dir, topic, t0, time.time())))
        return out

    def stream(
        self, topic: str, extra: Mapping[str, str] | None = None, *, noop: bool = False
    ) -> dict[str, Any]:
        """AvailableNow into foreachBatch (count and total value length per micro-batch), or with
        ``noop`` into Spark's no-op sink (rows from the progress reports, bytes unknown)."""
        from pyspark.sql import functions as F

        seen: list[tuple[int, int, int]] = []

        def each(df: Any, batch_id: int) -> None:
            r = df.agg(F.count(F.lit(1)).alias("n"), F.sum(F.length("value")).alias("b")).collect()
            seen.append((batch_id, int(r[0]["n"]), int(r[0]["b"] or 0)))

        options = self._options(topic, {"startingOffsets": "earliest", **(extra or {})})
        checkpoint = self.work_dir / f"ckpt-{uuid.uuid4().hex[:8]}"
        cpu = cpu_snapshot()
        t0 = time.time()
        writer = self.spark.readStream.format("kafka_direct").options(**options).load().writeStream
        writer = writer.format("noop") if noop else writer.foreachBatch(each)
        query = (
            writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
        )
        query.awaitTermination()
        wall = time.time() - t0
        progress = _progress_list(query)
        shutil.rmtree(checkpoint, ignore_errors=True)
        data_batches = [p for p in progress if p["numInputRows"]]
        if noop:
            seen = [(p["batchId"], int(p["numInputRows"]), -1) for p in data_batches]
        rows = sum(n for _, n, _ in seen)
        trigger_ms = sum(p["durationMs"].get("triggerExecution", 0) for p in data_batches)
        out = {
            "sink": "noop" if noop else "foreachBatch",
            "rows": rows,
            "bytes": None if noop else sum(b for _, _, b in seen),
            "wall_s": wall,
            "rate": rows / wall,
            "micro_batches": len([1 for _, n, _ in seen if n]),
            "trigger_s": trigger_ms / 1000.0,
            "trigger_rate": rows / (trigger_ms / 1000.0) if trigger_ms else None,
            "progress": progress,
            **cpu_used(cpu, rows),
        }
        out.update(task_window(task_stats(self.stats_dir, topic, t0, time.time())))
        return out

    def latency(
        self, raw: RawReaders, topic: str, partitions: int, config: Config
    ) -> dict[str, Any]:
        """Record timestamp → the driver's clock when ``foreachBatch`` holds the row."""
        from pyspark.sql import functions as F

        latencies: list[float] = []
        rows_seen = [0]
        lock = threading.Lock()

        def each(df: Any, _batch_id: int) -> None:
            table = df.select(F.unix_micros("timestamp").alias("ts")).toArrow()
            now_ms = time.time() * 1000.0
            stamps = table.column("ts").to_pylist()
            with lock:
                latencies.extend(now_ms - ts / 1000.0 for ts in stamps)
                rows_seen[0] += len(stamps)

        checkpoint = self.work_dir / f"ckpt-lat-{uuid.uuid4().hex[:8]}"
        query = (
            self.spark.readStream.format("kafka_direct")
            .options(**self._options(topic, {"startingOffsets": "latest"}))
            .load()
            .writeStream.foreachBatch(each)
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime=f"{config.trigger_ms} milliseconds")
            .start()
        )
        try:
            # Batch 0 of a "latest" query pins the start; produce only once it has.
            deadline = time.time() + 120
            while not query.recentProgress and time.time() < deadline:
                time.sleep(0.05)
            task = (
                self.bootstrap,
                topic,
                partitions,
                config.latency_rate,
                config.latency_seconds,
                config.size,
                config.seed,
            )
            produced = raw.produce_paced(task).get(timeout=config.latency_seconds + 120)
            deadline = time.time() + 60
            while rows_seen[0] < produced["sent"] and time.time() < deadline:
                time.sleep(0.05)
        finally:
            query.stop()
            shutil.rmtree(checkpoint, ignore_errors=True)
        values = sorted(latencies)
        return {
            "rate": config.latency_rate,
            "trigger_ms": config.trigger_ms,
            "produced": produced["sent"],
            "rows": rows_seen[0],
            "p50_ms": percentile(values, 50),
            "p95_ms": percentile(values, 95),
            "p99_ms": percentile(values, 99),
            "max_ms": values[-1] if values else None,
        }

    def floor(self, counts: list[int], size: int) -> dict[str, Any]:
        """The batch read's query over the no-Kafka source: Spark's cost alone."""
        from pyspark.sql import functions as F

        options = {"counts": ",".join(map(str, counts)), "size": str(size),
                   "batch": str(self.arrow_batch)}  # fmt: skip
        cpu = cpu_snapshot()
        t0 = time.time()
        df = self.spark.read.format("kafka_direct_bench_floor").options(**options).load()
        row = df.agg(F.count(F.lit(1)).alias("n"), F.sum(F.length("value")).alias("b")).collect()
        wall = time.time() - t0
        rows, nbytes = int(row[0]["n"]), int(row[0]["b"] or 0)
        out = {"rows": rows, "bytes": nbytes, "wall_s": wall, "rate": rows / wall}
        out.update(cpu_used(cpu, rows))
        return out

    def stop(self) -> None:
        self.spark.stop()


# --- planning on the driver ---------------------------------------------------------------------


class _CountingAdmin:
    """Wraps an AdminClient and counts the requests the offset reader makes."""

    def __init__(self, admin: Any, calls: Counter[str], sizes: list[int]) -> None:
        self._admin, self._calls, self._sizes = admin, calls, sizes

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._admin, name)
        if not callable(target):
            return target

        def call(*args: Any, **kwargs: Any) -> Any:
            self._calls[name] += 1
            if name == "list_offsets" and args:
                self._sizes.append(len(args[0]))
            return target(*args, **kwargs)

        return call


def planning_overhead(bootstrap: str, partitions: int, triggers: int) -> dict[str, Any]:
    """Time ``latest_offsets`` + ``plan_ranges`` of the stream planner per trigger, and count
    its admin requests, on a topic of ``partitions`` partitions with new data in every one."""
    from confluent_kafka.admin import AdminClient

    from kafka_direct.offset_reader import AdminOffsetReader
    from kafka_direct.options import parse_source_options
    from kafka_direct.planner import StreamPlanner

    topic = new_topic("plan")
    create_topic(bootstrap, topic, partitions)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": "5"})
    for p in range(partitions):
        for _ in range(3):
            producer.produce(topic, b"x", partition=p)
    producer.flush(60)

    calls: Counter[str] = Counter()
    sizes: list[int] = []
    opts = parse_source_options(
        {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": "earliest"},
        streaming=True,
    )
    reader = AdminOffsetReader(
        opts.kafka,
        isolation_level=opts.isolation_level,
        admin_factory=lambda conf: _CountingAdmin(AdminClient(conf), calls, sizes),
    )
    planner = StreamPlanner(opts, lambda: reader)
    try:
        start = planner.initial_offsets()
        planner.plan_ranges(start, planner.latest_offsets(start, read_all=False))  # warm-up
        times, per_trigger = [], []
        for _ in range(triggers):
            before, n_sizes = calls.copy(), len(sizes)
            t0 = time.perf_counter()
            end = planner.latest_offsets(start, read_all=False)
            ranges = planner.plan_ranges(start, end)
            times.append((time.perf_counter() - t0) * 1000.0)
            per_trigger.append(
                {
                    "calls": dict(calls - before),
                    "list_offsets_sizes": sizes[n_sizes:],
                    "ranges": len(ranges),
                }
            )
    finally:
        planner.close()
        with contextlib.suppress(Exception):
            from kafka_direct.broker import delete_topic

            delete_topic(bootstrap, topic)
    list_offsets = [t["calls"].get("list_offsets", 0) for t in per_trigger]
    return {
        "partitions": partitions,
        "triggers": triggers,
        "median_ms": median(times),
        "max_ms": max(times),
        "list_offsets_per_trigger": max(list_offsets),
        "partitions_per_list_offsets": max(
            (n for t in per_trigger for n in t["list_offsets_sizes"]), default=0
        ),
        "requests_per_trigger": per_trigger[-1]["calls"],
        "ranges_per_trigger": per_trigger[-1]["ranges"],
    }


# --- the run ------------------------------------------------------------------------------------


@dataclass
class Results:
    config: dict[str, Any]
    command: str
    machine: dict[str, Any]
    dataset: dict[str, Any] = field(default_factory=dict)
    rounds: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    fixed: dict[str, Any] = field(default_factory=dict)
    many_batches: dict[str, Any] = field(default_factory=dict)
    latency: dict[str, Any] = field(default_factory=dict)
    memory: dict[str, Any] = field(default_factory=dict)
    pool: dict[str, Any] = field(default_factory=dict)
    planning: dict[str, Any] = field(default_factory=dict)
    checks: dict[str, bool] = field(default_factory=dict)
    seconds: float = 0.0


@contextlib.contextmanager
def broker_for(config: Config) -> Iterator[str]:
    if config.bootstrap_servers:
        yield config.bootstrap_servers
        return
    from kafka_direct.broker import EmbeddedBroker

    with EmbeddedBroker() as broker:
        yield broker.bootstrap_servers


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
    spark: SparkReads | None = None
    try:
        with broker_for(config) as bootstrap:
            topic = new_topic("data")
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
            spark.batch(topic)
            spark.stream(topic)

            for i in range(config.rounds):
                log(f"round {i + 1}/{config.rounds}: raw, batch, stream (AvailableNow)")
                measure: dict[str, Callable[[], dict[str, Any]]] = {
                    "raw": lambda: raw.read(bootstrap, topic, counts, config.arrow_batch_size),
                    "batch": lambda: spark.batch(topic),
                    "stream": lambda: spark.stream(topic),
                    "stream_noop": lambda: spark.stream(topic, noop=True),
                    "floor": lambda: spark.floor(counts, config.size),
                }
                # The order rotates between rounds, so no mode always runs first after a pause.
                order = list(measure)[i % len(measure) :] + list(measure)[: i % len(measure)]
                rnd = {mode: measure[mode]() for mode in order}
                rnd = {mode: rnd[mode] for mode in measure}
                results.rounds.append(rnd)
                log("  " + "  ".join(f"{k} {v['rate']:,.0f}/s" for k, v in rnd.items()))

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
        shutil.rmtree(work_dir, ignore_errors=True)
    summarise(results, config, expected_bytes)
    results.seconds = time.time() - started
    return results


def measure_memory(
    spark: SparkReads, topic: str, counts: list[int], config: Config
) -> dict[str, Any]:
    """Worker RSS over an AvailableNow read with at least 20 Arrow batches per task."""
    batch = config.memory_arrow_batch_size
    backlog_batches = min(counts) / batch
    extra = {"arrowBatchSize": str(batch)}
    before = {pid: rss_mb(pid) for pid in python_worker_pids()}
    with RssSampler() as sampler:
        t0 = time.time()
        read = spark.stream(topic, extra)
        t1 = time.time()
    tasks = task_stats(spark.stats_dir, topic, t0, t1)
    workers = []
    for task in tasks:
        pid, start, end = task["pid"], task["start"], task["end"]
        during = [(t, rss) for t, p, rss in sampler.samples if p == pid and start <= t <= end]
        if not during:
            continue
        values = [rss for _, rss in during]
        cut = start + (end - start) * 0.2
        early = [rss for t, rss in during if t <= cut] or values[:1]
        late = [rss for t, rss in during if t >= start + (end - start) * 0.5] or values[-1:]
        idle = before.get(pid)
        workers.append(
            {
                "pid": pid,
                "partition": task["partition"],
                "rows": task["rows"],
                "arrow_batches": task["batches"],
                "rss_idle_before_mb": idle,
                "rss_task_start_mb": values[0],
                "rss_peak_mb": max(values),
                "rss_end_mb": values[-1],
                "growth_mb": max(values) - (idle if idle is not None else values[0]),
                "late_minus_early_peak_mb": max(late) - max(early),
                "samples": len(values),
            }
        )
    return {
        "arrow_batch_size": batch,
        "backlog_arrow_batches_per_task": backlog_batches,
        "rows": read["rows"],
        "workers": workers,
        "max_growth_mb": max((w["growth_mb"] for w in workers), default=None),
        "max_drift_mb": max((abs(w["late_minus_early_peak_mb"]) for w in workers), default=None),
    }


def fixed_costs(spark: SparkReads, bootstrap: str, partitions: int, repeats: int) -> dict[str, Any]:
    """Wall time of the batch and stream queries over one record per partition: what a query
    costs in Spark regardless of how much it reads (planning, scheduling, checkpoints)."""
    topic = new_topic("tiny")
    create_topic(bootstrap, topic, partitions)
    producer = Producer({"bootstrap.servers": bootstrap})
    for p in range(partitions):
        producer.produce(topic, b"x", partition=p)
        producer.flush(30)  # one record per batch: the embedded broker's log end is exact
    batch = [spark.batch(topic) for _ in range(repeats)]
    stream = [spark.stream(topic) for _ in range(repeats)]
    return {
        "batch_wall_s": median([r["wall_s"] for r in batch]),
        "stream_wall_s": median([r["wall_s"] for r in stream]),
        "rows_ok": all(r["rows"] == partitions for r in batch + stream),
    }


def pool_summary(tasks: list[dict[str, Any]], micro_batches: int) -> dict[str, Any]:
    hits = sum(t["pool_hits"] for t in tasks)
    misses = sum(t["pool_misses"] for t in tasks)
    creations = sum(t["pool_creations"] for t in tasks)
    return {
        "tasks": len(tasks),
        "micro_batches": micro_batches,
        "hits": hits,
        "misses": misses,
        "hit_rate": hits / (hits + misses) if hits + misses else None,
        "creations": creations,
        "creations_per_micro_batch": creations / micro_batches if micro_batches else None,
        "workers": len({t["pid"] for t in tasks}),
    }


def summarise(results: Results, config: Config, expected_bytes: int) -> None:
    modes = ("raw", "batch", "stream", "stream_noop", "floor")
    s: dict[str, Any] = {}
    for mode in modes:
        rounds = [r[mode] for r in results.rounds]
        s[mode] = {
            "rate": median([r["rate"] for r in rounds]),
            "wall_s": median([r["wall_s"] for r in rounds]),
            "task_rate": median([r["task_rate"] for r in rounds if r.get("task_rate")]),
            "cpu_us_per_record": median([r["cpu_us_per_record"] for r in rounds]),
            "cpu_s": {
                k: median([r["cpu_s"].get(k, 0.0) for r in rounds])
                for k in sorted({k for r in rounds for k in r["cpu_s"]})
            },
        }
        s[mode]["best_rate"] = max(r["rate"] for r in rounds)
        if mode.startswith("stream"):
            s[mode]["trigger_rate"] = median([r["trigger_rate"] for r in rounds])
    for mode in modes[1:]:
        # Ratios per round (raw and the mode ran back to back), then the median.
        s[mode]["ratio"] = median([r[mode]["rate"] / r["raw"]["rate"] for r in results.rounds])
        s[mode]["task_ratio"] = median(
            [
                r[mode]["task_rate"] / r["raw"]["task_rate"]
                for r in results.rounds
                if r[mode].get("task_rate")
            ]
        )
    for mode in modes[1:]:
        # CPU efficiency: raw's CPU per record over the mode's (the broker's share included).
        s[mode]["cpu_ratio"] = median(
            [r["raw"]["cpu_us_per_record"] / r[mode]["cpu_us_per_record"] for r in results.rounds]
        )
    for mode in ("stream", "stream_noop"):
        s[mode]["trigger_ratio"] = median(
            [r[mode]["trigger_rate"] / r["raw"]["rate"] for r in results.rounds]
        )
    many = results.many_batches
    if many:
        single_ms = median([r["stream"]["trigger_s"] * 1000.0 for r in results.rounds])
        data = [p for p in many["progress"] if p["numInputRows"]]
        n = many["micro_batches"]
        s["many_batches"] = {
            "rate": many["rate"],
            "ratio": many["rate"] / s["raw"]["rate"],
            "micro_batches": n,
            "ms_per_micro_batch": many["trigger_s"] * 1000.0 / n if n else None,
            # What a micro-batch costs beyond reading its records at the one-batch rate.
            "overhead_ms_per_micro_batch": (many["trigger_s"] * 1000.0 - single_ms) / (n - 1)
            if n > 1
            else None,
            # Spark's own breakdown of a micro-batch (median ms): latestOffset is our planning.
            "median_duration_ms": {
                k: median([p["durationMs"].get(k, 0) for p in data])
                for k in sorted({k for p in data for k in p["durationMs"]})
            },
        }
    results.summary = s
    checks = {}
    for i, rnd in enumerate(results.rounds):
        for mode in modes:
            checks[f"round{i + 1}.{mode}.rows"] = rnd[mode]["rows"] == config.records
            if rnd[mode]["bytes"] is not None:  # the noop sink cannot count bytes
                checks[f"round{i + 1}.{mode}.bytes"] = rnd[mode]["bytes"] == expected_bytes
    if many:
        checks["many_batches.rows"] = many["rows"] == config.records
        checks["many_batches.bytes"] = many["bytes"] == expected_bytes
        checks["many_batches.is_many"] = many["micro_batches"] >= min(2, config.micro_batches)
    if results.fixed:
        checks["fixed.rows"] = results.fixed["rows_ok"]
    if results.memory:
        checks["memory.rows"] = results.memory["rows"] == config.records
    if results.latency:
        checks["latency.rows"] = results.latency["rows"] == results.latency["produced"]
    if results.planning:
        checks["planning.one_list_offsets_per_trigger"] = (
            results.planning["list_offsets_per_trigger"] == 1
        )
    results.checks = checks


# --- output -------------------------------------------------------------------------------------


def _fmt(value: Any, spec: str = ",.0f") -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    return format(value, spec)


def render(results: Results) -> str:
    c, s, m = results.config, results.summary, results.machine
    modes = ("raw", "batch", "stream", "stream_noop", "floor")
    lines = [
        f"kafka_direct benchmark: {c['records']:,} records x {c['size']} B, "
        f"{c['partitions']} partitions, {c['rounds']} round(s){' (quick)' if c['quick'] else ''}",
        f"machine: {m['cpu']}, {m['cores']} cores, {m['memory_gb']} GB; "
        + ", ".join(f"{k} {v}" for k, v in m["versions"].items()),
        f"command: {results.command}",
        "",
        f"{'mode':<34}{'records/s':>12}{'x raw':>8}{'in-task/s':>12}{'x raw':>8}"
        f"{'CPU us/rec':>12}{'x raw':>8}",
        "-" * 94,
    ]
    raw = s["raw"]
    lines.append(
        f"{'raw confluent-kafka (P processes)':<34}{_fmt(raw['rate']):>12}{'1.00':>8}"
        f"{_fmt(raw['task_rate']):>12}{'1.00':>8}"
        f"{_fmt(raw['cpu_us_per_record'], '.2f'):>12}{'1.00':>8}"
    )
    for label, key in (
        ("batch read", "batch"),
        ("stream AvailableNow, foreachBatch", "stream"),
        ("stream AvailableNow, noop sink", "stream_noop"),
        ("Spark floor (no-Kafka source)", "floor"),
    ):
        row = s[key]
        lines.append(
            f"{label:<34}{_fmt(row['rate']):>12}{_fmt(row['ratio'], '.2f'):>8}"
            f"{_fmt(row['task_rate']):>12}{_fmt(row['task_ratio'], '.2f'):>8}"
            f"{_fmt(row['cpu_us_per_record'], '.2f'):>12}{_fmt(row['cpu_ratio'], '.2f'):>8}"
        )
    for label, key in (("  foreachBatch, Spark trigger time", "stream"),
                       ("  noop sink, Spark trigger time", "stream_noop")):  # fmt: skip
        lines.append(
            f"{label:<34}{_fmt(s[key]['trigger_rate']):>12}"
            f"{_fmt(s[key]['trigger_ratio'], '.2f'):>8}"
        )
    best = ", ".join(
        f"{mode} {s[mode]['best_rate']:,.0f}/s"
        + ("" if mode == "raw" else f" ({s[mode]['best_rate'] / s['raw']['best_rate']:.2f})")
        for mode in modes
    )
    mb = s.get("many_batches")
    if mb:
        lines.append(
            f"{'stream, ' + str(mb['micro_batches']) + ' micro-batches':<34}"
            f"{_fmt(mb['rate']):>12}{_fmt(mb['ratio'], '.2f'):>8}"
        )
        lines.append(
            f"  per micro-batch: {_fmt(mb['ms_per_micro_batch'], '.0f')} ms, of which "
            f"{_fmt(mb['overhead_ms_per_micro_batch'], '.0f')} ms overhead beyond reading; "
            "Spark's median breakdown (ms): "
            + ", ".join(f"{k} {v:.0f}" for k, v in mb["median_duration_ms"].items())
        )
    lines.append(f"best round of each mode (x best raw): {best}")
    fixed = results.fixed
    if fixed:
        lines.append(
            f"fixed cost per query (one record per partition): batch "
            f"{fixed['batch_wall_s']:.2f} s, stream AvailableNow {fixed['stream_wall_s']:.2f} s"
        )
    lat = results.latency
    if lat:
        lines += [
            "",
            f"latency at {lat['rate']:,} records/s, {lat['trigger_ms']} ms trigger "
            f"({lat['rows']:,} of {lat['produced']:,} records seen): "
            f"p50 {_fmt(lat['p50_ms'])} ms, p95 {_fmt(lat['p95_ms'])} ms, "
            f"p99 {_fmt(lat['p99_ms'])} ms",
        ]
    mem = results.memory
    if mem:
        lines.append(
            f"memory: {mem['backlog_arrow_batches_per_task']:.0f} Arrow batches of "
            f"{mem['arrow_batch_size']:,} rows per task"
        )
        for w in mem["workers"]:
            lines.append(
                f"  worker {w['pid']} (partition {w['partition']}): idle "
                f"{_fmt(w['rss_idle_before_mb'])} MB, task start {_fmt(w['rss_task_start_mb'])} "
                f"MB, peak {_fmt(w['rss_peak_mb'])} MB, end {_fmt(w['rss_end_mb'])} MB "
                f"(late-early peak {_fmt(w['late_minus_early_peak_mb'], '+.0f')} MB)"
            )
    pool = results.pool
    if pool:
        whole = pool.get("whole_run") or {}
        lines.append(
            f"pool over {pool['micro_batches']} micro-batches ({pool['tasks']} tasks): hit rate "
            f"{_fmt(pool['hit_rate'], '.1%')}, {pool['creations']} consumers created "
            f"({_fmt(pool['creations_per_micro_batch'], '.2f')} per micro-batch); whole run: "
            f"{whole.get('tasks', 0)} tasks, {whole.get('creations', 0)} consumers created, "
            f"hit rate {_fmt(whole.get('hit_rate'), '.1%')}"
        )
    plan = results.planning
    if plan:
        lines.append(
            f"planning, {plan['partitions']} partitions: median {_fmt(plan['median_ms'], '.1f')} "
            f"ms per trigger (max {_fmt(plan['max_ms'], '.1f')}), "
            f"{plan['list_offsets_per_trigger']} list_offsets call(s) per trigger "
            f"for {plan['partitions_per_list_offsets']} partitions; requests per trigger: "
            + ", ".join(f"{k} {v}" for k, v in sorted(plan["requests_per_trigger"].items()))
        )
    lines.append("")
    lines.append(
        "CPU seconds per mode (median round), by process: "
        + "; ".join(
            f"{mode}: "
            + ", ".join(f"{k} {v:.2f}" for k, v in s[mode]["cpu_s"].items() if v >= 0.01)
            for mode in modes
        )
    )
    failed = [k for k, ok in results.checks.items() if not ok]
    lines += [
        "",
        f"checks: {len(results.checks) - len(failed)}/{len(results.checks)} passed"
        + (f"; FAILED: {', '.join(failed)}" if failed else ""),
        f"total time {results.seconds:.0f} s",
    ]
    return "\n".join(lines)


def _json_safe(value: Any) -> Any:
    """NaN (a median of nothing) becomes null: the JSON file stays standard JSON."""
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    results = run(config, argv)
    print(render(results), flush=True)
    if config.json_path:
        data = _json_safe(asdict(results))
        Path(config.json_path).write_text(json.dumps(data, indent=2, default=str, allow_nan=False))
        log(f"wrote {config.json_path}")
    return 0 if all(results.checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
