"""The optional phases built on :class:`~kafka_direct_bench.spark_reads.SparkReads`: the fixed
cost of a query, and worker memory over a backlog. Runs in the benchmark process.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Producer

from kafka_direct_bench.common import BenchmarkError, median
from kafka_direct_bench.config import Config
from kafka_direct_bench.dataset import create_topic, delete_topics, new_topic
from kafka_direct_bench.executor_stats import task_stats
from kafka_direct_bench.procstats import RssSampler, python_worker_pids, rss_mb
from kafka_direct_bench.spark_reads import SparkReads


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
    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    producer = Producer({"bootstrap.servers": bootstrap})
    for p in range(partitions):
        producer.produce(topic, b"x", partition=p, on_delivery=on_delivery)
        # One record per batch: the embedded broker's log end is exact.
        if producer.flush(60) or errors:
            raise BenchmarkError(
                f"fixed cost: producing one record to {topic}-{p} failed: "
                f"{errors[:1] or 'not delivered within 60 s'}"
            )
    try:
        batch = [spark.batch(topic) for _ in range(repeats)]
        stream = [spark.stream(topic) for _ in range(repeats)]
    finally:
        delete_topics(bootstrap, [topic])
    return {
        "batch_wall_s": median([r["wall_s"] for r in batch]),
        "stream_wall_s": median([r["wall_s"] for r in stream]),
        "rows_ok": all(r["rows"] == partitions for r in batch + stream),
    }
