"""Planning on the driver: the stream planner's time per trigger and the admin requests it
makes. Runs in the benchmark process, without Spark.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from typing import Any

from confluent_kafka import Producer

from kafka_direct_bench.common import median
from kafka_direct_bench.dataset import create_topic, new_topic


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
