#!/usr/bin/env python
"""What one more range costs a packed task, in records: ``python
benchmarks/partitions_open_cost.py``. Runs in the benchmark process, without Spark (the embedded
broker unless KAFKA_BOOTSTRAP_SERVERS is given).

The same records read by one consumer (``kafka_direct.consumer.packed``) from a few partitions
and from many: the difference per extra partition, divided by the cost of one record, is the
``open cost`` that packing charges per range (Spark's ``openCostInBytes``). A long single range
gives the records per second of one task, against which a task's fixed cost in Spark is weighed
to choose ``maxRecordsPerTask``.

``--big N`` also reads N records per partition of 10 partitions both ways, in one process and
one after the other: one consumer per range (``fetch_range``, the read before packing) and the
packed tasks of local[2] (``fetch_ranges``): the executor's side of "no regression with much
data".
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from typing import Any

from kafka_direct_bench.common import log
from kafka_direct_bench.dataset import create_topic, delete_topics, new_topic
from partitions import produce

from kafka_direct.config.clients import executor_consumer_config
from kafka_direct.consumer.fetch import PartitionConsumer, fetch_range
from kafka_direct.consumer.native import NativeConsumer
from kafka_direct.consumer.packed import GroupConsumer, fetch_ranges
from kafka_direct.offsets import OffsetRange
from kafka_direct.planning.packing import PackingSettings, pack_ranges


def read_once(bootstrap: str, path: str, ranges: list[OffsetRange]) -> tuple[float, int]:
    """Seconds to read ``ranges`` with a fresh consumer (its creation included), and rows."""
    from confluent_kafka import Consumer

    conf = _config(bootstrap)
    t0 = time.perf_counter()
    gc = GroupConsumer(NativeConsumer(conf) if path == "native" else Consumer(conf))
    try:
        rows = sum(
            b.num_rows
            for b in fetch_ranges(
                gc,
                ranges,
                poll_timeout_ms=30_000,
                fail_on_data_loss=True,
                batch_size=20_000,
                include_headers=False,
            )
        )
    finally:
        gc.close()
    return time.perf_counter() - t0, rows


def big_read(bootstrap: str, records: int, repeats: int) -> dict[str, float]:
    """10 partitions of ``records``: one consumer per range against the packed tasks."""
    topic = new_topic("open-cost-big")
    create_topic(bootstrap, topic, 10)
    try:
        produce(bootstrap, topic, [records] * 10, 100)
        ranges = [OffsetRange(topic, p, 0, records) for p in range(10)]
        tasks = pack_ranges(ranges, PackingSettings(parallelism=2))
        kw: dict[str, Any] = {
            "poll_timeout_ms": 60_000,
            "fail_on_data_loss": True,
            "batch_size": 20_000,
            "include_headers": False,
        }
        times: dict[str, list[float]] = {"one consumer per range": [], "packed": []}
        for _ in range(repeats):
            t0 = time.perf_counter()
            for rng in ranges:
                pc = PartitionConsumer(NativeConsumer(_config(bootstrap)))
                try:
                    assert sum(b.num_rows for b in fetch_range(pc, rng, **kw)) == records
                finally:
                    pc.close()
            times["one consumer per range"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            for task in tasks:
                gc = GroupConsumer(NativeConsumer(_config(bootstrap)))
                try:
                    got = sum(b.num_rows for b in fetch_ranges(gc, task, **kw))
                    assert got == records * len(task)
                finally:
                    gc.close()
            times["packed"].append(time.perf_counter() - t0)
    finally:
        delete_topics(bootstrap, [topic])
    out = {name: statistics.median(t) for name, t in times.items()}
    log(f"big read, 10 x {records:,} records, {len(tasks)} packed tasks: medians {out}")
    return out


def _config(bootstrap: str) -> dict[str, str]:
    return executor_consumer_config(
        {"bootstrap.servers": bootstrap},
        group_id=f"open-cost-{uuid.uuid4().hex[:8]}",
        isolation_level="read_uncommitted",
    )


def main(argv: list[str] | None = None) -> int:
    from kafka_direct.testing.broker import EmbeddedBroker

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=21_000)
    p.add_argument("--many", type=int, default=1000)
    p.add_argument("--few", type=int, default=10)
    p.add_argument("--long", type=int, default=1_000_000, help="records of the long range")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--big", type=int, default=0, help="records per partition of the big read")
    args = p.parse_args(argv)
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    broker = None if external else EmbeddedBroker().start()
    bootstrap = external or broker.bootstrap_servers  # type: ignore[union-attr]
    topics: list[str] = []
    out: dict[Any, Any] = {}
    try:
        if args.big:
            out["big"] = big_read(bootstrap, args.big, args.repeats)
        cases = {
            "many": (args.many, args.records // args.many),
            "few": (args.few, args.records // args.few),
            "long": (1, args.long),
        }
        plan = {}
        for name, (partitions, per) in cases.items():
            topic = new_topic(f"open-cost-{name}")
            topics.append(topic)
            create_topic(bootstrap, topic, partitions)
            produce(bootstrap, topic, [per] * partitions, 100)
            plan[name] = [OffsetRange(topic, q, 0, per) for q in range(partitions)]
        for path in ("native", "python"):
            for name, ranges in plan.items():
                runs = [read_once(bootstrap, path, ranges) for _ in range(args.repeats)]
                out[(path, name)] = statistics.median(t for t, _ in runs)
                log(f"{path} {name}: {len(ranges)} range(s), {runs[0][1]:,} rows, "
                    f"median {out[(path, name)] * 1e3:.1f} ms")  # fmt: skip
    finally:
        delete_topics(bootstrap, topics)
        if broker is not None:
            broker.stop()
    for path in ("native", "python"):
        per_range = (out[(path, "many")] - out[(path, "few")]) / (args.many - args.few)
        per_record = out[(path, "long")] / args.long
        print(
            f"{path}: {per_range * 1e3:.3f} ms per extra range, {per_record * 1e6:.3f} us per "
            f"record ({1 / per_record:,.0f} records/s in one task): one range costs "
            f"{per_range / per_record:,.0f} records",
            flush=True,
        )
    if "big" in out:
        print(f"10 partitions x {args.big:,} records, seconds: {out['big']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
