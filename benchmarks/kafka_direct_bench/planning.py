"""Planning on the driver: the stream planner's time per trigger and the admin requests it
makes. Runs in the benchmark process, without Spark.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from confluent_kafka import Producer

from kafka_direct_bench.common import median
from kafka_direct_bench.dataset import create_topic, delete_topics, new_topic


class _CountingAdmin:
    """Wraps an AdminClient and counts the requests the offset reader makes; for each
    ``list_offsets``, how many partitions it asked about and for which offsets (``latest``,
    ``earliest``, ``timestamp``)."""

    def __init__(self, admin: Any, calls: Counter[str], sizes: list[tuple[str, int]]) -> None:
        self._admin, self._calls, self._sizes = admin, calls, sizes

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._admin, name)
        if not callable(target):
            return target

        def call(*args: Any, **kwargs: Any) -> Any:
            self._calls[name] += 1
            if name == "list_offsets" and args:
                kinds = {
                    type(spec).__name__.removesuffix("Spec").lower() for spec in args[0].values()
                }
                self._sizes.append(("+".join(sorted(kinds)), len(args[0])))
            return target(*args, **kwargs)

        return call


def planning_overhead(bootstrap: str, partitions: int, triggers: int) -> dict[str, Any]:
    """Time ``latest_offsets`` + ``plan_ranges`` of the stream planner per trigger, and count
    its admin requests, on a topic of ``partitions`` partitions with new data in every one."""
    from kafka_direct.config.source import parse_source_options
    from kafka_direct.kafka.admin import new_admin_client
    from kafka_direct.kafka.offset_reader import AdminOffsetReader
    from kafka_direct.planning.micro_batch import StreamPlanner

    topic = new_topic("plan")
    create_topic(bootstrap, topic, partitions)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": "5"})
    for p in range(partitions):
        for _ in range(3):
            producer.produce(topic, b"x", partition=p)
    producer.flush(60)

    calls: Counter[str] = Counter()
    sizes: list[tuple[str, int]] = []
    opts = parse_source_options(
        {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": "earliest"},
        streaming=True,
    )
    reader = AdminOffsetReader(
        opts.kafka,
        isolation_level=opts.isolation_level,
        admin_factory=lambda kafka, events: _CountingAdmin(
            new_admin_client(kafka, events), calls, sizes
        ),
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
                    "list_offsets_sizes": [n for _, n in sizes[n_sizes:]],
                    # Which offsets each request asked for, and for how many partitions.
                    "list_offsets": [f"{kind}:{n}" for kind, n in sizes[n_sizes:]],
                    "ranges": len(ranges),
                }
            )
    finally:
        planner.close()
        delete_topics(bootstrap, [topic])
    list_offsets = [t["calls"].get("list_offsets", 0) for t in per_trigger]
    # One request per kind of offset (latest at latestOffset; earliest at partitions, for the
    # data-loss check against the log start), each for all partitions.
    per_kind = [Counter(k.split(":")[0] for k in t["list_offsets"]) for t in per_trigger]
    return {
        "partitions": partitions,
        "triggers": triggers,
        "median_ms": median(times),
        "max_ms": max(times),
        "list_offsets_per_trigger": max(list_offsets),
        "list_offsets_per_kind_per_trigger": max(max(c.values(), default=0) for c in per_kind),
        "partitions_per_list_offsets": max(
            (n for t in per_trigger for n in t["list_offsets_sizes"]), default=0
        ),
        "requests_per_trigger": per_trigger[-1]["calls"],
        "list_offsets_of_last_trigger": per_trigger[-1]["list_offsets"],
        "ranges_per_trigger": per_trigger[-1]["ranges"],
    }
