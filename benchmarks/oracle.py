#!/usr/bin/env python
"""kafka_direct next to Spark's own Kafka connector, in one command: same broker, same data,
same Spark, same run.

    python benchmarks/oracle.py                       # 2,000,000 x 100 B in 2 partitions
    python benchmarks/oracle.py --batch-records 10000000 --json oracle.json
    python benchmarks/oracle.py --quick               # 20,000 records: a smoke run
    python benchmarks/oracle.py --suite               # every data set, mode and row (below)
    python benchmarks/oracle.py --suite --quick       # the same at 1 % scale, 2 partitions

``--suite`` runs ``kafka_direct_bench/suite.py``: four data sets (100 B uncompressed, 1 KB
JSON-like with lz4 and with zstd, 1 MiB records), four modes (batch read, AvailableNow stream
read, batch write, Kafka-to-Kafka stream write), at 2 and 100 partitions, with the rows
kafka_direct, the JVM connector's defaults, the JVM connector tuned (consumer and producer) and
librdkafka's floor, in ABBA rounds; writes are read back and compared by content. It writes a
JSON file and Markdown tables with the date, the load and the versions. The options below the
suite's heading in ``--help`` apply to it only; ``--scale`` sizes every data set.

Spark's connector runs on the PySpark it was built for: when the installed PySpark has none on
Maven Central, the command runs itself again under the virtualenv ``scripts/oracle-venv.sh``
pins (``kafka_direct_bench/oracle_python.py``), kafka_direct included.

It starts one Apache Kafka broker (:class:`kafka_direct.testing.KafkaCluster`) unless
``--bootstrap-servers`` is given, fetches Spark's connector (``spark_kafka_jars``, cached) and
starts one ``local[2]`` Spark with both ``format("kafka")`` and ``format("kafka_direct")``. Then,
in rounds whose order alternates between the two formats:

- batch count:  ``spark.read...load().count()``;
- batch sum:    ``agg(count(1), sum(length(value)))``, so every value is materialised;
- stream noop:  ``readStream`` under ``Trigger.AvailableNow`` into the ``noop`` sink;
- stream foreachBatch: the same into ``foreachBatch`` computing the batch sum;
- batch write:  ``df.write.format(...)`` of N records of S bytes (a cached DataFrame) to a topic
  of its own per round and format, read back and counted;
- floor:        the batch sum over a Python data source that yields ready-made Arrow batches
  of the same shape and reads no Kafka (``kafka_direct_bench.floor_source``): what Spark
  itself costs any Python source. Where the JVM connector is faster, the distance between it
  and this row is Spark's Python data source path (Arrow batches from a Python worker into the
  JVM), which no Python source can avoid.

The reads run twice on the JVM side: with the connector's defaults (``kafka``), and with the
Kafka consumer options of ``--jvm-tuned`` (``kafka tuned``, default
``kafka.fetch.max.wait.ms=10,kafka.max.poll.records=20000``). Spark's connector asks the broker
for the partition's offsets (two ``ListOffsets``) after every poll. The Java consumer has by then
sent its next fetch, which the broker holds for ``fetch.max.wait.ms`` (500 ms by default) when the
task's range ends at the log end, and the offsets request waits behind it on the same
connection: every JVM task whose range ends at the log end pays that wait once. And a poll
returns at most ``max.poll.records`` (500 by default) records, so a task of 1,000,000 records
makes about 2,000 polls and 4,000 offset requests (docs/jvm-benchmark.md). ``--jvm-tuned ""``
leaves the row out.

Every read must see exactly N records (and N x S bytes for the sum), every write must leave N
records, or the run fails. It reports seconds per round, per-round ratios (JVM seconds divided
by kafka_direct seconds: above 1 means kafka_direct is faster) and their median. Runs in the
benchmark process, which is also the Spark driver.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kafka_direct_bench.common import log
from kafka_direct_bench.dataset import (
    create_topic,
    latest_offsets,
    new_topic,
    produce_dataset,
)

JVM, TUNED, OURS = "kafka", "kafka tuned", "kafka_direct"
FORMATS = (JVM, OURS)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=2_000_000, help="stream and write records")
    p.add_argument("--batch-records", type=int, default=None, help="batch read records")
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--rounds", type=int, default=None, help="3; with --suite 2 (ABBA)")
    p.add_argument("--bootstrap-servers", default=None)
    p.add_argument("--skip", default="", help="comma list of: batch,stream,write")
    p.add_argument("--json", default=None, help="write every figure here")
    p.add_argument(
        "--jvm-log",
        default=None,
        help="write the driver JVM's log here, with Spark's connector and the Java Kafka client "
        "at DEBUG (every request, with milliseconds; large: use a small --records)",
    )
    p.add_argument("--quick", action="store_true", help="20,000 records, 2 rounds")
    p.add_argument(
        "--jvm-tuned",
        default="kafka.fetch.max.wait.ms=10,kafka.max.poll.records=20000",
        help="comma list of KEY=VALUE options for a second row of format('kafka') reads "
        "(empty: no such row)",
    )
    add_suite_arguments(p)
    args = p.parse_args(argv)
    if args.rounds is None:
        args.rounds = 2 if args.suite else 3
    if args.quick:
        args.records, args.rounds = 20_000, 2
    if args.suite:
        from kafka_direct_bench.suite_data import parse_datasets

        if args.quick:
            args.scale, args.partition_counts = args.scale or 0.01, args.partition_counts or "2"
        args.scale = args.scale or 1.0
        args.partition_counts = [int(x) for x in (args.partition_counts or "2,100").split(",")]
        args.dataset_list = parse_datasets(args.datasets)
        from kafka_direct_bench.suite_report import MODES

        args.modes = [m.strip().replace("-", " ") for m in args.modes.split(",") if m.strip()]
        if not args.modes or set(args.modes) - set(MODES):
            p.error(f"--modes {args.modes}: expected a comma list of {', '.join(MODES)}")
    args.batch_records = args.batch_records or args.records
    args.tuned_options = dict(
        item.split("=", 1) for item in args.jvm_tuned.split(",") if item.strip()
    )
    return args


def add_suite_arguments(p: argparse.ArgumentParser) -> None:
    from kafka_direct_bench.suite_data import DATASETS, DEFAULT_TUNED_READ, DEFAULT_TUNED_WRITE

    g = p.add_argument_group("the suite (--suite)")
    g.add_argument("--suite", action="store_true", help="every data set, mode and row")
    g.add_argument("--scale", type=float, default=None,
                   help="multiplies every data set's records (1.0; with --quick 0.01)")  # fmt: skip
    g.add_argument("--datasets", default=",".join(DATASETS), help="comma list of data sets")
    g.add_argument("--partition-counts", default=None,
                   help="comma list of partition counts (2,100; with --quick 2)")  # fmt: skip
    g.add_argument("--modes", default="batch-read,stream-read,batch-write,stream-write",
                   help="comma list of modes")  # fmt: skip
    g.add_argument("--jvm-tuned-read", default=DEFAULT_TUNED_READ,
                   help="the tuned JVM row's reader options (KEY=VALUE,...)")  # fmt: skip
    g.add_argument("--jvm-tuned-write", default=DEFAULT_TUNED_WRITE,
                   help="the tuned JVM row's writer options; the codec is the topic's")  # fmt: skip
    g.add_argument("--markdown", default="oracle-suite.md", help="write the tables here")
    g.add_argument("--cores", type=int, default=2, help="local[N] Spark and floor processes")
    g.add_argument("--no-floor", action="store_true", help="leave the librdkafka floor out")
    # Spark's default 1 GB heap cannot hold the 1 MiB data set's cached frame beside the JVM
    # producer's buffers: the tuned JVM stream write ran the driver out of heap with it.
    g.add_argument("--driver-memory", default="2g",
                   help="the suite's spark.driver.memory (both formats share it)")  # fmt: skip


def timed(action: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    result = action()
    return time.perf_counter() - started, result


class Bench:
    def __init__(self, spark: Any, bootstrap: str, args: argparse.Namespace) -> None:
        self.spark = spark
        self.bootstrap = bootstrap
        self.args = args
        self.seconds: dict[str, dict[str, list[float]]] = {}
        # label -> (format name, extra reader options)
        self.variants: dict[str, tuple[str, dict[str, str]]] = {
            JVM: ("kafka", {}),
            OURS: ("kafka_direct", {}),
        }
        if args.tuned_options:
            self.variants[TUNED] = ("kafka", dict(args.tuned_options))
        self.floor_seconds: list[float] = []
        self.checkpoints = Path(tempfile.mkdtemp(prefix="oracle-bench-"))

    def record(self, mode: str, fmt: str, seconds: float) -> None:
        self.seconds.setdefault(mode, {}).setdefault(fmt, []).append(seconds)
        log(f"{mode:<22} {fmt:<13} {seconds:8.2f} s")

    def source(self, fmt: str, topic: str, stream: bool = False) -> Any:
        name, options = self.variants[fmt]
        r = (self.spark.readStream if stream else self.spark.read).format(name)
        r = r.option("kafka.bootstrap.servers", self.bootstrap).option("subscribe", topic)
        for key, value in options.items():
            r = r.option(key, value)
        return r

    def check(self, what: str, got: Any, expected: Any) -> None:
        if got != expected:
            raise RuntimeError(f"{what}: got {got}, expected {expected}")

    def batch(self, fmt: str, topic: str, records: int) -> None:
        from pyspark.sql import functions as F

        df = self.source(fmt, topic).load()
        seconds, n = timed(df.count)
        self.check(f"{fmt} batch count", n, records)
        self.record("batch count", fmt, seconds)
        agg = self.source(fmt, topic).load().agg(F.count(F.lit(1)), F.sum(F.length("value")))
        seconds, row = timed(lambda: agg.collect()[0])
        self.check(f"{fmt} batch sum", (row[0], row[1]), (records, records * self.args.size))
        self.record("batch sum(length)", fmt, seconds)

    def floor(self, records: int) -> None:
        from kafka_direct_bench.dataset import per_partition_counts
        from pyspark.sql import functions as F

        counts = per_partition_counts(records, self.args.partitions)
        df = (
            self.spark.read.format("kafka_direct_bench_floor")
            .option("counts", ",".join(map(str, counts)))
            .option("size", str(self.args.size))
            .option("batch", "10000")
            .load()
            .agg(F.count(F.lit(1)), F.sum(F.length("value")))
        )
        seconds, row = timed(lambda: df.collect()[0])
        self.check("floor", (row[0], row[1]), (records, records * self.args.size))
        self.floor_seconds.append(seconds)
        log(f"{'floor (no Kafka)':<22} {'python':<13} {seconds:8.2f} s")

    def stream(self, fmt: str, topic: str, sink: str, round_: int) -> None:
        from pyspark.sql import functions as F

        totals = [0, 0]

        def each(batch: Any, _id: int) -> None:
            row = batch.agg(F.count(F.lit(1)), F.sum(F.length("value"))).collect()[0]
            totals[0] += row[0]
            totals[1] += row[1] or 0

        checkpoint = self.checkpoints / f"{sink}-{fmt.replace(' ', '-')}-{round_}"
        w = self.source(fmt, topic, stream=True).option("startingOffsets", "earliest").load()
        w = w.writeStream.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True)
        w = w.format("noop") if sink == "noop" else w.foreachBatch(each)

        def run() -> int:
            query = w.start()
            query.awaitTermination()
            if query.exception() is not None:
                raise RuntimeError(f"{fmt} stream failed: {query.exception()}")
            return sum(p["numInputRows"] for p in query.recentProgress)

        seconds, rows = timed(run)
        self.check(f"{fmt} stream {sink} rows", rows, self.args.records)
        if sink != "noop":
            self.check(f"{fmt} foreachBatch", totals, [rows, rows * self.args.size])
        self.record(f"stream {sink}", fmt, seconds)

    def write(self, fmt: str, df: Any) -> None:
        topic = new_topic(f"oracle-write-{fmt.replace('_', '')}")
        create_topic(self.bootstrap, topic, self.args.partitions)
        w = df.write.format(fmt).mode("append").option("kafka.bootstrap.servers", self.bootstrap)
        seconds, _ = timed(lambda: w.option("topic", topic).save())
        written = sum(latest_offsets(self.bootstrap, topic, self.args.partitions))
        self.check(f"{fmt} write", written, self.args.records)
        self.record("batch write", fmt, seconds)

    def report(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        print()
        print(
            f"{'mode':<22} {'JVM row':<12} {'JVM s':>7} {'kafka_direct s':>15} {'ratio':>7}"
            "  per-round ratios"
        )
        for mode, by_fmt in self.seconds.items():
            ours = by_fmt[OURS]
            out[mode] = {"kafka_direct_s": ours}
            for label in (JVM, TUNED):
                if label not in by_fmt:
                    continue
                jvm = by_fmt[label]
                ratios = [j / o for j, o in zip(jvm, ours, strict=False)]
                med = statistics.median(ratios)
                print(
                    f"{mode:<22} {label:<12} {statistics.median(jvm):7.2f} "
                    f"{statistics.median(ours):15.2f} {med:6.2f}x  "
                    f"{' '.join(f'{r:.2f}' for r in ratios)}"
                )
                key = "kafka" if label == JVM else "kafka_tuned"
                out[mode].update({f"{key}_s": jvm, f"{key}_ratios": ratios, f"{key}_median": med})
            # The keys of earlier reports, for the default JVM row.
            out[mode]["ratios"] = out[mode].get("kafka_ratios")
            out[mode]["median"] = out[mode].get("kafka_median")
        if self.floor_seconds:
            floor = statistics.median(self.floor_seconds)
            print(f"{'floor (no Kafka)':<22} {'':>9} {floor:15.2f}  (batch sum, Python source)")
            out["floor"] = {"seconds": self.floor_seconds, "median": floor}
        print("ratio = JVM seconds / kafka_direct seconds (above 1: kafka_direct is faster)")
        tuned = self.variants.get(TUNED)
        if tuned:
            print(f"{TUNED}: format('kafka') with {tuned[1]}")
        return out


# The loggers that show where a JVM task's time goes: the connector's consumer (one line per
# poll and per task), the Java client's requests and responses, and each task's start and end.
JVM_LOG_LEVELS = {
    "org.apache.spark.sql.kafka010": "DEBUG",
    "org.apache.kafka.clients": "DEBUG",
    "org.apache.spark.scheduler.TaskSetManager": "INFO",
    "org.apache.spark.executor.Executor": "INFO",
}


def jvm_log_options(path: Path) -> str:
    """Driver JVM options for a log4j2 file appender at ``path``, with milliseconds."""
    props = Path(tempfile.mkdtemp(prefix="oracle-log4j2-")) / "log4j2.properties"
    props.write_text(
        "\n".join(
            [
                "rootLogger.level = warn",
                "rootLogger.appenderRef.file.ref = file",
                "appender.file.type = File",
                "appender.file.name = file",
                f"appender.file.fileName = {path.resolve()}",
                "appender.file.layout.type = PatternLayout",
                "appender.file.layout.pattern = %d{HH:mm:ss.SSS} [%t] %p %c{1}: %m%n",
                "",
            ]
        )
    )
    return f"-Dlog4j2.configurationFile={props}"


def jvm_log_levels(spark: Any) -> None:
    """Set :data:`JVM_LOG_LEVELS` (local_spark quiets the root logger after the JVM starts)."""
    log4j = spark.sparkContext._jvm.org.apache.logging.log4j
    for name, level in JVM_LOG_LEVELS.items():
        log4j.core.config.Configurator.setLevel(name, getattr(log4j.Level, level))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from kafka_direct_bench.oracle_python import run_on_oracle_pyspark, versions

    # Spark's connector only on the PySpark it was built for: this re-runs the command under
    # scripts/oracle-venv.sh's pin when the installed PySpark has no connector of its own.
    run_on_oracle_pyspark(__file__, argv)
    args = parse_args(argv)
    if args.suite:
        from kafka_direct_bench.suite import run_suite

        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        return run_suite(args, "python benchmarks/oracle.py " + " ".join(argv))
    skip = set(filter(None, args.skip.split(",")))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from kafka_direct.testing.kafka_cluster import KafkaCluster
    from kafka_direct.testing.local import local_spark
    from kafka_direct.testing.spark_connector import (
        connector_version,
        spark_kafka_conf,
        spark_kafka_jars,
    )

    jars = spark_kafka_jars()
    cluster = None
    bootstrap = args.bootstrap_servers
    if bootstrap is None:
        cluster = KafkaCluster(brokers=1).start()
        bootstrap = cluster.bootstrap_servers
    spark = None
    try:
        topic = new_topic("oracle-read")
        create_topic(bootstrap, topic, args.partitions)
        produced = produce_dataset(bootstrap, topic, args.records, args.size, args.partitions, 7)
        log(f"produced {args.records:,} x {args.size} B in {produced['seconds']:.1f} s")
        batch_topic = topic
        if args.batch_records != args.records and "batch" not in skip:
            batch_topic = new_topic("oracle-batch")
            create_topic(bootstrap, batch_topic, args.partitions)
            produce_dataset(
                bootstrap, batch_topic, args.batch_records, args.size, args.partitions, 7
            )
        conf = spark_kafka_conf(jars)
        if args.jvm_log:
            conf["spark.driver.extraJavaOptions"] = jvm_log_options(Path(args.jvm_log))
        spark = local_spark("kafka_direct-oracle-bench", conf=conf)
        if args.jvm_log:
            jvm_log_levels(spark)
        log(f"Spark {spark.version}, Spark's Kafka connector {connector_version(jars)}")
        log(
            "versions: "
            + ", ".join(f"{k} {v}" for k, v in versions(spark, connector_version(jars)).items())
        )
        bench = Bench(spark, bootstrap, args)
        from kafka_direct_bench.floor_source import floor_source

        spark.dataSource.register(floor_source())
        # Warm-up, not timed: the JIT, the Python workers, the consumer pools, and the broker's
        # page cache over every topic read later (else the first format to read it pays alone).
        for fmt in FORMATS:
            for warm in dict.fromkeys([topic, batch_topic]):
                spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap).option(
                    "subscribe", warm
                ).load().count()
        frame = None
        if "write" not in skip:
            from pyspark.sql import functions as F

            frame = (
                spark.range(args.records, numPartitions=args.partitions)
                .select(
                    F.expr(f"cast(rpad(cast(id as string), {args.size}, 'x') as binary)").alias(
                        "value"
                    )
                )
                .cache()
            )
            frame.count()
        readers = list(bench.variants)
        for r in range(args.rounds):
            # Each round starts with another reader, so none always reads first or last.
            order = readers[r % len(readers) :] + readers[: r % len(readers)]
            for fmt in order:
                if "batch" not in skip:
                    bench.batch(fmt, batch_topic, args.batch_records)
                    if fmt == OURS:
                        bench.floor(args.batch_records)
                if "stream" not in skip:
                    bench.stream(fmt, topic, "noop", r)
                    bench.stream(fmt, topic, "foreachBatch", r)
                # The tuned options are a consumer's: a write is the same with or without them.
                if frame is not None and fmt != TUNED:
                    bench.write(fmt, frame)
        results = bench.report()
        if args.json:
            Path(args.json).write_text(
                json.dumps(
                    {
                        "records": args.records,
                        "batch_records": args.batch_records,
                        "size": args.size,
                        "partitions": args.partitions,
                        "spark": spark.version,
                        "versions": versions(spark, connector_version(jars)),
                        "connector": connector_version(jars),
                        "kafka_tuned_options": args.tuned_options,
                        "results": results,
                    },
                    indent=2,
                )
            )
    finally:
        if spark is not None:
            spark.stop()
        if cluster is not None:
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
