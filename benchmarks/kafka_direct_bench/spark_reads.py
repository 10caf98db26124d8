"""The Spark side: one local session and its reads. Runs in the benchmark process, which is the
Spark driver.

:class:`SparkReads` runs each Spark mode once and returns its figures: ``batch`` (a batch read
aggregated so every row is materialised), ``stream`` (``Trigger.AvailableNow`` into
``foreachBatch`` or the ``noop`` sink), ``latency`` (a processing-time trigger against the paced
producer) and ``floor`` (the same batch query over :mod:`~kafka_direct_bench.floor_source`).
"""

from __future__ import annotations

import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kafka_direct_bench.common import percentile
from kafka_direct_bench.config import DEFAULT_ARROW_BATCH, Config
from kafka_direct_bench.executor_stats import STATS_DIR_ENV, task_stats, task_window
from kafka_direct_bench.floor_source import floor_source
from kafka_direct_bench.procstats import cpu_snapshot, cpu_used
from kafka_direct_bench.raw import RawReaders


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


#: How long a wait on a streaming query may go without progress (no new record, no new
#: micro-batch) before it gives up. Only a stall ends a wait: a slow machine does not.
PATIENCE_S = 120.0


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _query_error(query: Any) -> str | None:
    """The error a streaming query died with, or None while it runs (or ended cleanly)."""
    if query.isActive:
        return None
    failure = query.exception()
    return None if failure is None else _first_line(failure)


def _wait_while(query: Any, condition: Callable[[], bool], progress: Callable[[], int]) -> None:
    """Wait while ``condition()`` holds and the query is active, as long as ``progress()``
    keeps changing at least every :data:`PATIENCE_S`."""
    last, changed = progress(), time.monotonic()
    while condition() and query.isActive:
        now = progress()
        if now != last:
            last, changed = now, time.monotonic()
        elif time.monotonic() - changed > PATIENCE_S:
            return
        time.sleep(0.05)


def stop_between_batches(query: Any, last_batch: int) -> None:
    """Stop a processing-time query once micro-batch ``last_batch`` has ended (its progress is
    reported), never while ``foreachBatch`` runs.

    ``query.stop()`` cancels the query's jobs and interrupts its thread. If ``foreachBatch`` is
    in a Spark job at that moment, the job fails in Python with a ``Py4JJavaError`` that holds
    the JVM's whole stack trace, and returns to the JVM as a ``py4j.Py4JException``. Spark then
    asks whether that was the stop (``StreamExecution.isInterruptionException``) by matching its
    message against ``PROXY_ERROR``, ``An error occurred while calling((.|\\r\\n|\\r|\\n)*)(...)``:
    a backtracking group that recurses once per character, so a message of a few thousand
    characters overflows the stack. The stream thread dies with a ``StackOverflowError``
    (``Pattern$Loop.match`` frames), the Python workers of the cancelled tasks log
    ``BrokenPipeError``, and ``query.exception()`` stays None.
    """
    if last_batch >= 0:
        _wait_while(
            query,
            lambda: all(p["batchId"] < last_batch for p in _progress_list(query)),
            lambda: len(query.recentProgress),
        )
    query.stop()


class SparkReads:
    """The Spark side: one local session, with the executors' statistics directory."""

    def __init__(self, bootstrap: str, stats_dir: Path, work_dir: Path, arrow_batch: int) -> None:
        os.environ[STATS_DIR_ENV] = str(stats_dir)  # inherited by the JVM and its Python workers
        from kafka_direct.testing.local import local_spark

        self.spark = local_spark(
            "kafka_direct-bench", conf={f"spark.executorEnv.{STATS_DIR_ENV}": str(stats_dir)}
        )
        self.spark.dataSource.register(floor_source())
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

    def batch(self, topic: str, extra: Mapping[str, str] | None = None) -> dict[str, Any]:
        from pyspark.sql import functions as F

        cpu = cpu_snapshot()
        t0 = time.time()
        df = self.spark.read.format("kafka_direct").options(**self._options(topic, extra)).load()
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
        last_batch = [-1]  # the last micro-batch that held rows
        lock = threading.Lock()

        def each(df: Any, batch_id: int) -> None:
            table = df.select(F.unix_micros("timestamp").alias("ts")).toArrow()
            now_ms = time.time() * 1000.0
            stamps = table.column("ts").to_pylist()
            with lock:
                latencies.extend(now_ms - ts / 1000.0 for ts in stamps)
                rows_seen[0] += len(stamps)
                if stamps:
                    last_batch[0] = max(last_batch[0], batch_id)

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
            _wait_while(query, lambda: not query.recentProgress, lambda: 0)
            task = (
                self.bootstrap,
                topic,
                partitions,
                config.latency_rate,
                config.latency_seconds,
                config.size,
                config.seed,
            )
            produced = raw.produce_paced(task).get(timeout=config.latency_seconds + 3 * PATIENCE_S)
            # Every record, however slowly they come: the wait ends early only if the query
            # dies or no new record arrives for PATIENCE_S.
            _wait_while(query, lambda: rows_seen[0] < produced["sent"], lambda: rows_seen[0])
            error = _query_error(query)
        finally:
            stop_between_batches(query, last_batch[0])
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
            "error": error,
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

    def floor_stream(self, counts: list[int], size: int, micro_batches: int) -> dict[str, Any]:
        """The no-Kafka source as a stream into the same ``foreachBatch`` as :meth:`stream`,
        ``counts`` rows per partition per micro-batch, ``micro_batches`` of them: what a
        micro-batch costs in Spark whatever the source.

        Like the Kafka run it is compared with, it runs under ``Trigger.AvailableNow`` and ends
        by itself (the source stops after ``micro_batches``). It used to be an endless
        processing-time query stopped from here, and :func:`stop_between_batches` says why
        that killed Spark's stream thread now and then."""
        from pyspark.errors import StreamingQueryException
        from pyspark.sql import functions as F

        def each(df: Any, _batch_id: int) -> None:
            df.agg(F.count(F.lit(1)).alias("n"), F.sum(F.length("value")).alias("b")).collect()

        options = {"counts": ",".join(map(str, counts)), "size": str(size),
                   "batch": str(self.arrow_batch), "micro_batches": str(micro_batches)}  # fmt: skip
        checkpoint = self.work_dir / f"ckpt-floor-{uuid.uuid4().hex[:8]}"
        query = (
            self.spark.readStream.format("kafka_direct_bench_floor")
            .options(**options)
            .load()
            .writeStream.foreachBatch(each)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        error = None
        try:
            query.awaitTermination()
        except StreamingQueryException as exc:  # a query that died is a failed check
            error = _first_line(exc)
        progress = [p for p in _progress_list(query) if p["numInputRows"]]
        shutil.rmtree(checkpoint, ignore_errors=True)
        return {"micro_batches": len(progress), "progress": progress, "error": error}

    def stop(self) -> None:
        self.spark.stop()
