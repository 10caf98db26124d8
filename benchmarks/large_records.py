#!/usr/bin/env python
"""Memory of a read of large records: kafka_direct next to Spark's own Kafka connector, each
query in a Spark of its own under Spark's default memory settings (``local[2]``, a 1 GB heap and
as much direct memory), on the same broker and data, in one command:

    python benchmarks/large_records.py                       # the three data sets below
    python benchmarks/large_records.py --datasets 2x1000x1m  # PARTITIONSxRECORDSxSIZE,...
    python benchmarks/large_records.py --formats kafka_direct --max-batch-bytes 64m
    python benchmarks/large_records.py --formats kafka_direct --option taskMemoryBudget=40m

The data sets (``--datasets``): 2 partitions x 1,000 records of 1 MB (2 GB), 100 partitions x 40
records of 100 KB (400 MB, read by packed tasks) and 2 partitions x 250,000 records of 100 B (the
throughput cost of the byte budget on small records). Each query is
``selectExpr("count(1)", "sum(length(value))", "sum(crc32(value))")``, checked against what was
produced (count, bytes and content). Each query's Spark first runs it over a small topic
(untimed), which starts its Python workers. While the timed query runs, a sampler reads
``/proc`` every 50 ms: the summed RSS of the query's Python workers (the children of
Spark's Python daemon), the largest one, and the RSS of the Spark JVM. It prints, per data set and
format: the result, seconds, records/s, the peaks, and what the largest worker grew by over its
size after the small query (the read's own memory, to compare with ``taskMemoryBudget``).
Records/s is also given as a ratio to a raw librdkafka consumer reading the same topic (one
process per partition, as ``benchmarks/run.py``'s raw row), measured in the same run.

Spark's connector runs only on the Spark it was built for: the queries run on the PySpark that
``scripts/oracle-venv.sh`` pins (``.venv-oracle``) when it exists, else on the installed one
without the JVM rows; the report names the versions. A query that fails is reported as failed
with its error's first line, and the run goes on. Runs in the benchmark process; each query in a
child driver process (``--child``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

DEFAULT_DATASETS = "2x1000x1m,100x40x100k,2x250000x100"
UNITS = {"k": 1024, "m": 1024 * 1024}
#: Distinct values per data set: the records cycle through them (content stays checkable
#: without holding gigabytes in this process).
DISTINCT = 16


def parse_size(text: str) -> int:
    text = text.strip().lower()
    return int(text[:-1]) * UNITS[text[-1]] if text[-1] in UNITS else int(text)


def parse_dataset(text: str) -> tuple[int, int, int]:
    partitions, records, size = text.split("x")
    return int(partitions), int(records), parse_size(size)


def log(message: str) -> None:
    print(f"[large-records] {message}", file=sys.stderr, flush=True)


# -- the child: one query in a Spark of its own ---------------------------------------------------


class Sampler(threading.Thread):
    """Peak RSS of the query's Python workers (summed, and the largest one), of the Spark JVM,
    and the most any one worker grew by over its own size before the query, every 50 ms.

    A worker's growth is measured against itself: ``before`` holds each worker's RSS before
    the query; one forked during it is measured against its daemon's RSS (a fork starts with
    its parent's pages). The largest worker before and the largest during can be two processes
    (a planner, a task's worker), so their difference is not what a task held."""

    def __init__(self, before: dict[int, float] | None = None) -> None:
        super().__init__(daemon=True)
        self.python_peak = 0.0
        self.python_max_one = 0.0
        self.python_max_growth = 0.0
        self.python_max_anon_growth = 0.0
        self.jvm_peak = 0.0
        self._before = dict(before or {})
        self._before_anon = {pid: rss_anon(pid) for pid in self._before}
        self._stop_event = threading.Event()

    def run(self) -> None:
        from kafka_direct_bench.procstats import python_worker_pids, rss_mb

        while not self._stop_event.wait(0.05):
            sizes = {pid: rss_mb(pid) or 0.0 for pid in python_worker_pids()}
            self.python_peak = max(self.python_peak, sum(sizes.values()))
            self.python_max_one = max([self.python_max_one, *sizes.values()])
            for pid, size in sizes.items():
                if pid not in self._before:
                    self._before[pid] = _parent_rss(pid) or size
                    self._before_anon[pid] = _parent_rss(pid, "RssAnon") or rss_anon(pid)
                self.python_max_growth = max(self.python_max_growth, size - self._before[pid])
                self.python_max_anon_growth = max(
                    self.python_max_anon_growth, rss_anon(pid) - self._before_anon[pid]
                )
            self.jvm_peak = max(self.jvm_peak, self._jvm())

    @staticmethod
    def _jvm() -> float:
        from kafka_direct_bench.procstats import rss_mb

        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == os.getpid() and b"java" in cmd.split(b"\0", 1)[0]:
                return rss_mb(int(entry)) or 0.0
        return 0.0

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


def child(args: argparse.Namespace) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from kafka_direct.testing.local import local_spark

    conf: dict[str, str] = {}
    if args.format == "kafka":
        from kafka_direct.testing.spark_connector import spark_kafka_conf, spark_kafka_jars

        conf = spark_kafka_conf(spark_kafka_jars(nearest=True))
    spark = local_spark("large-records", conf=conf)
    reader = (
        spark.read.format(args.format)
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.topic)
    )
    if args.format == "kafka_direct" and args.max_batch_bytes:
        reader = reader.option("maxBatchBytes", args.max_batch_bytes)
    for pair in args.option or []:
        reader = reader.option(*pair.split("=", 1))
    query = reader.load().selectExpr("count(1)", "sum(length(value))", "sum(crc32(value))")
    result: dict[str, Any] = {"spark": spark.version}
    if args.warm_topic:
        # The same query over a small topic first: the Python workers are then started and
        # have imported everything, so what they grow by in the timed query is its data's.
        reader.option("subscribe", args.warm_topic).load().selectExpr("count(1)").collect()
        result["python_one_warm_mb"] = _largest_worker_now()
    sampler = Sampler(_workers_now())
    sampler.start()
    started = time.perf_counter()
    try:
        count, size, crc = query.collect()[0]
        result.update(ok=True, count=count, bytes=size, crc=crc)
    except Exception as exc:  # noqa: BLE001 - reported, and the run goes on
        lines = [line for line in str(exc).splitlines() if line.strip()]
        result.update(ok=False, error=next((line for line in lines if "Error" in line), lines[0]))
    result["seconds"] = time.perf_counter() - started
    sampler.stop()
    result.update(
        python_peak_mb=sampler.python_peak,
        python_one_mb=sampler.python_max_one,
        python_worker_growth_mb=sampler.python_max_growth,
        python_worker_anon_growth_mb=sampler.python_max_anon_growth,
        jvm_peak_mb=sampler.jvm_peak,
    )
    print("RESULT " + json.dumps(result), flush=True)
    spark.stop()


def _largest_worker_now() -> float:
    return max([0.0, *_workers_now().values()])


def _workers_now() -> dict[int, float]:
    from kafka_direct_bench.procstats import python_worker_pids, rss_mb

    return {pid: rss_mb(pid) or 0.0 for pid in python_worker_pids()}


def _parent_rss(pid: int, field: str = "VmRSS") -> float | None:
    """RSS (or another ``/proc/<pid>/status`` field) of ``pid``'s parent, its daemon, in MB."""
    from kafka_direct_bench.procstats import rss_mb

    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return rss_mb(int(stat.rsplit(")", 1)[1].split()[1]), field)


def rss_anon(pid: int) -> float:
    """A process's anonymous resident memory (its heap: the data it holds), in MB."""
    from kafka_direct_bench.procstats import rss_mb

    return rss_mb(pid, "RssAnon") or 0.0


# -- the coordinator --------------------------------------------------------------------------


def produce(bootstrap: str, topic: str, partitions: int, records: int, size: int) -> int:
    """The data set; returns the expected sum of crc32(value)."""
    import random

    from confluent_kafka import Producer

    rnd = random.Random(size * 31 + records)
    values = [rnd.randbytes(size) for _ in range(DISTINCT)]
    crcs = [zlib.crc32(v) for v in values]
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": "50",
            "message.max.bytes": str(max(size * 2, 1_000_000)),
            "queue.buffering.max.kbytes": "262144",
        }
    )
    expected = 0
    for p in range(partitions):
        for i in range(records):
            value = values[(p + i) % DISTINCT]
            expected += crcs[(p + i) % DISTINCT]
            while True:
                try:
                    producer.produce(topic, value, partition=p)
                    break
                except BufferError:
                    producer.poll(0.05)
    if producer.flush(300):
        raise RuntimeError("producing the data set did not finish")
    return expected


def raw_rate(bootstrap: str, topic: str, partitions: int, records: int, size: int) -> float:
    """Records/s of plain confluent-kafka consumers with the executors' settings, one partition
    at a time in each of two processes (Spark's two cores), asking for 16 MB per consume."""
    import multiprocessing

    from kafka_direct_bench.raw import raw_consumer_config, raw_read_partition

    config = raw_consumer_config(bootstrap)
    batch = max(1, min(20_000, 16 * 1024 * 1024 // max(size, 1)))
    tasks = [(config, topic, p, 0, records, batch) for p in range(partitions)]
    started = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        done = pool.map(raw_read_partition, tasks)
    seconds = time.perf_counter() - started
    if sum(d["rows"] for d in done) != partitions * records:
        raise RuntimeError("the raw read did not read the data set")
    return partitions * records / seconds


def oracle_python() -> Path | None:
    venv = Path(os.environ.get("KAFKA_DIRECT_ORACLE_VENV", ROOT / ".venv-oracle"))
    python = venv / "bin" / "python"
    return python if python.exists() else None


def run_child(
    python: str,
    fmt: str,
    bootstrap: str,
    topic: str,
    max_bytes: str,
    warm_topic: str = "",
    options: list[str] | None = None,
) -> dict:
    """One query in a child driver; with ``warm_topic``, the result also holds the largest
    Python worker's RSS after the same query over that topic (``python_one_warm_mb``), and
    what any one worker grew by over its own size before the query (``python_worker_growth_mb``).
    ``options``: reader options as KEY=VALUE."""
    cmd = [python, __file__, "--child", "--format", fmt, "--bootstrap", bootstrap]
    cmd += ["--topic", topic, "--max-batch-bytes", max_bytes]
    if warm_topic:
        cmd += ["--warm-topic", warm_topic]
    for pair in options or []:
        cmd += ["--option", pair]
    env = dict(os.environ, PYSPARK_PYTHON=python, PYSPARK_DRIVER_PYTHON=python)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800, check=False)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])  # type: ignore[no-any-return]
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return {"ok": False, "error": " | ".join(tail) or f"exit {proc.returncode}", "seconds": 0.0}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-servers")
    parser.add_argument("--datasets", default=DEFAULT_DATASETS)
    parser.add_argument("--formats", default="kafka_direct,kafka")
    parser.add_argument("--max-batch-bytes", default="", help="kafka_direct's maxBatchBytes")
    parser.add_argument("--json", help="also write every figure to this file")
    parser.add_argument(
        "--python",
        help="the interpreter of the queries (default: .venv-oracle's, else this one); with a "
        "PySpark whose connector Maven Central lacks, run --formats kafka_direct",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--format", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument(
        "--option", action="append", metavar="KEY=VALUE", help="a reader option (repeatable)"
    )
    parser.add_argument("--warm-topic", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args)
        return 0

    from kafka_direct.testing.broker import create_topic
    from kafka_direct.testing.kafka_cluster import KafkaCluster

    python = Path(args.python) if args.python else oracle_python()
    formats = args.formats.split(",")
    if python is None:
        python = Path(sys.executable)
        if "kafka" in formats:
            log("no .venv-oracle (scripts/oracle-venv.sh --prepare makes it): no JVM rows")
            formats = [f for f in formats if f != "kafka"]
    versions = subprocess.run(
        [str(python), "-c", "import pyspark, confluent_kafka as c; "
         "print(pyspark.__version__, c.libversion()[0])"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    log(f"PySpark {versions[0]} (and Spark's Kafka connector of that version), "
        f"librdkafka {versions[1]}, via {python}")  # fmt: skip
    cluster = None
    bootstrap = args.bootstrap_servers
    if bootstrap is None:
        cluster = KafkaCluster(brokers=1, message_max_bytes=16 * 1024 * 1024).start()
        bootstrap = cluster.bootstrap_servers
    failed = False
    rows: list[dict[str, Any]] = []
    try:
        # Every query first reads this small topic (untimed): its Python workers are then
        # started, so what the largest one grows by is the read's own memory.
        warm = f"large-warm-{int(time.time())}"
        create_topic(bootstrap, warm, partitions=2)
        produce(bootstrap, warm, 2, 200, 100)
        for spec in args.datasets.split(","):
            partitions, records, size = parse_dataset(spec)
            topic = f"large-{spec}-{int(time.time())}"
            create_topic(
                bootstrap, topic, partitions=partitions,
                config={"max.message.bytes": str(max(size * 2, 1_048_588))},
            )  # fmt: skip
            crc = produce(bootstrap, topic, partitions, records, size)
            raw = raw_rate(bootstrap, topic, partitions, records, size)
            log(f"{spec}: produced; raw librdkafka reads {raw:,.0f} records/s")
            for fmt in formats:
                options = args.option if fmt == "kafka_direct" else None
                got = run_child(
                    str(python), fmt, bootstrap, topic, args.max_batch_bytes, warm, options
                )
                total = partitions * records
                exact = got.get("ok") and (got["count"], got["bytes"], got["crc"]) == (
                    total,
                    total * size,
                    crc,
                )
                if got.get("ok") and not exact:
                    got.update(ok=False, error=f"wrong result {got['count']}, {got['bytes']}")
                failed |= fmt == "kafka_direct" and not got.get("ok")
                rate = total / got["seconds"] if got.get("ok") else 0.0
                row = {"dataset": spec, "format": fmt, **got, "records_per_s": rate,
                       "vs_raw": rate / raw if raw else 0.0}  # fmt: skip
                rows.append(row)
                log(json.dumps(row))
    finally:
        if cluster is not None:
            cluster.stop()
    print(f"\nPySpark {versions[0]}, librdkafka {versions[1]}; Spark's defaults (local[2], 1 GB)")
    print("| data set | format | result | s | records/s | vs raw | Python workers peak | "
          "largest worker | its growth | Spark JVM peak |")  # fmt: skip
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        result = "exact" if r.get("ok") else f"**failed**: {r.get('error', '')[:80]}"
        # What one worker grew by over its own size before the query (Sampler's docstring).
        r["python_one_growth_mb"] = r.get(
            "python_worker_growth_mb",
            r.get("python_one_mb", 0.0) - r.get("python_one_warm_mb", 0.0),
        )
        keys = ("python_peak_mb", "python_one_mb", "python_one_growth_mb", "jvm_peak_mb")
        print(f"| {r['dataset']} | {r['format']} | {result} | {r['seconds']:.1f} | "
              f"{r['records_per_s']:,.0f} | {r['vs_raw']:.2f} | "
              + " | ".join(f"{r.get(k, 0.0):,.0f} MB" for k in keys) + " |")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
