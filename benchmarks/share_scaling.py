#!/usr/bin/env python
"""Queues scale readers past the partition count: throughput against the number of readers, for
a share group (KIP-932) next to a consumer group, with 1 ms of work per record.

    python benchmarks/share_scaling.py                 # 3,000 records per run, ~5 min
    python benchmarks/share_scaling.py --records 1000  # quicker
    python benchmarks/share_scaling.py --no-stream     # the plain clients only
    python benchmarks/share_scaling.py --no-members    # the share stream only

It starts Apache Kafka 4.4.0 (``KafkaCluster``; share groups are on by default since 4.2) and
measures, on a 1-partition and a 4-partition topic, with 1, 2 and 4 readers:

- **consumer group**: plain ``confluent_kafka.Consumer`` members (threads), each sleeping 1 ms per
  record. A partition has one reader in a consumer group, so readers past the partition count sit
  idle: this is the ceiling of ``createStream`` and of the direct stream.
- **share group**: plain ``ShareConsumer`` members (threads), the same work, each record
  acknowledged after it.
- **share stream**: ``KafkaUtils.createShareStream`` with that many receivers on a local Spark,
  the 1 ms of work in ``recordCheck`` (it runs in the receivers, and notes when each record is
  done), every record then logged, acknowledged and processed by a batch.

Readers join first; then the records are produced in producer batches of 20 (a broker acquires
whole producer batches for a share consumer, so batches as large as the backlog would go to one
reader; ``batch.num.messages=20``), and share consumers take at most 20 records per poll
(``max.poll.records``; see ``SHARE_CLIENT``). Throughput is records / (last
record done - first record done). The run prints a Markdown table, the date and the load average.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import AcknowledgeType, Consumer, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic

from kafka_direct.kafka.share_groups import alter_share_group_config
from kafka_direct.testing.kafka_cluster import KafkaCluster

COST_S = 0.001
READERS = (1, 2, 4)
PARTITIONS = (1, 4)
#: A share consumer acquires about max.poll.records per fetch: with librdkafka's default (500),
#: one reader takes the whole backlog and the others wait (measured: 4 readers on 1 partition
#: ran at 600 records/s with it, at 1,900/s with 20).
SHARE_CLIENT = {"max.poll.records": "20"}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def make_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(60)


def produce(bootstrap: str, topic: str, records: int, partitions: int) -> None:
    # Producer batches of 20 records: fast to write, small enough for acquisition to spread.
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": "5", "batch.num.messages": "20"}
    )
    for i in range(records):
        producer.produce(topic, f"{i:08d}".encode() * 4, partition=i % partitions)
        producer.poll(0)
    producer.flush(60)


class Clock:
    """First and last time a record was done, and how many were done, across readers."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.first = self.last = 0.0
        self.done = 0

    def tick(self) -> None:
        now = time.monotonic()
        with self.lock:
            self.first = self.first or now
            self.last = now
            self.done += 1

    def rate(self) -> float:
        return self.done / max(1e-9, self.last - self.first)


def run_members(
    bootstrap: str, topic: str, records: int, partitions: int, readers: int, share: bool
) -> tuple[float, list[int]]:
    group = f"g-{topic}"
    if share:
        alter_share_group_config(
            {"bootstrap.servers": bootstrap},
            group,
            {"share.auto.offset.reset": "earliest"},
        )
    clock, stop, counts = Clock(), threading.Event(), [0] * readers
    joined = threading.Barrier(readers + 1)

    def member(index: int) -> None:
        settings = {"bootstrap.servers": bootstrap, "group.id": group}
        if share:
            consumer: Any = ShareConsumer(
                {**settings, "share.acknowledgement.mode": "explicit", **SHARE_CLIENT}
            )
        else:
            consumer = Consumer({**settings, "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        poll: Callable[[], Any] = (
            (lambda: consumer.poll(0.2)) if share else (lambda: consumer.consume(500, 0.2))
        )
        started = time.monotonic()
        waiting = True
        while not stop.is_set():
            if waiting and (
                time.monotonic() - started > 8 or (not share and consumer.assignment())
            ):
                waiting = False
                joined.wait()
            for message in poll() or []:
                if message.error() is not None:
                    continue
                time.sleep(COST_S)  # the work: 1 ms per record
                if share:
                    consumer.acknowledge(message, AcknowledgeType.ACCEPT)
                counts[index] += 1
                clock.tick()
        consumer.close()

    threads = [threading.Thread(target=member, args=(i,)) for i in range(readers)]
    for thread in threads:
        thread.start()
    joined.wait()
    time.sleep(3 if not share else 0)  # a consumer group's last rebalance settles
    produce(bootstrap, topic, records, partitions)
    deadline = time.monotonic() + 300
    while clock.done < records and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    for thread in threads:
        thread.join()
    if clock.done < records:
        raise SystemExit(f"{topic}: only {clock.done} of {records} records were processed")
    return clock.rate(), counts


def run_stream(
    spark: Any, bootstrap: str, topic: str, records: int, partitions: int, readers: int
) -> float:
    from kafka_direct import KafkaUtils

    group = f"g-{topic}"
    alter_share_group_config(
        {"bootstrap.servers": bootstrap},
        group,
        {"share.auto.offset.reset": "earliest"},
    )
    wal = tempfile.mkdtemp(prefix="share-bench-wal-")
    times = tempfile.mkdtemp(prefix="share-bench-times-")
    seen = [0]

    handles: dict[int, Any] = {}

    def work(_record: Any) -> None:  # runs in the receivers: the time each record is done
        time.sleep(COST_S)
        pid = os.getpid()
        if pid not in handles:  # line-buffered: one write per record, no open/close
            handles[pid] = open(os.path.join(times, str(pid)), "a", buffering=1)  # noqa: SIM115
        handles[pid].write(f"{time.time()}\n")

    def batch(df: Any, _ranges: Any) -> None:
        seen[0] += df.count()

    stream = KafkaUtils.createShareStream(
        spark,
        {"bootstrap.servers": bootstrap, "group.id": group, **SHARE_CLIENT},
        [topic],
        batchInterval=1.0,
        walDir=wal,
        numReceivers=readers,
        recordCheck=work,
        maxPendingBlocks=100_000,  # measure the receivers, not back-pressure
    )
    stream.foreachBatch(batch)
    stream.start()
    try:
        deadline = time.monotonic() + 120
        while sum(s.state == "running" for s in stream.receivers) < readers:
            if time.monotonic() > deadline:
                raise SystemExit(f"{topic}: the receivers did not start")
            time.sleep(0.5)
        produce(bootstrap, topic, records, partitions)
        deadline = time.monotonic() + 300
        while seen[0] < records and time.monotonic() < deadline:
            time.sleep(0.2)
        if seen[0] < records:
            raise SystemExit(f"{topic}: the stream processed {seen[0]} of {records} records")
        done = [
            float(line)
            for name in os.listdir(times)
            for line in Path(times, name).read_text().split()
        ]
    finally:
        stream.stop(graceful=False)
        shutil.rmtree(wal, ignore_errors=True)
        shutil.rmtree(times, ignore_errors=True)
    return len(done) / max(1e-9, max(done) - min(done))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=3000)
    parser.add_argument("--no-stream", action="store_true", help="plain clients only")
    parser.add_argument("--no-members", action="store_true", help="the share stream only")
    args = parser.parse_args()
    command = "python benchmarks/share_scaling.py " + " ".join(sys.argv[1:])
    rows: list[tuple[str, int, int, float, str]] = []
    loads = [os.getloadavg()[0]]
    with KafkaCluster(kafka_version="4.4.0") as cluster:
        bootstrap = cluster.bootstrap_servers
        for partitions in () if args.no_members else PARTITIONS:
            for share in (False, True):
                for readers in READERS:
                    kind = "share group" if share else "consumer group"
                    topic = f"bench-{'s' if share else 'c'}-{partitions}p-{readers}r-{os.getpid()}"
                    make_topic(bootstrap, topic, partitions)
                    rate, counts = run_members(
                        bootstrap, topic, args.records, partitions, readers, share
                    )
                    log(f"{kind}, {partitions}p, {readers} reader(s): {rate:,.0f}/s {counts}")
                    rows.append((kind, partitions, readers, rate, "/".join(map(str, counts))))
                    loads.append(os.getloadavg()[0])
        if not args.no_stream:
            from kafka_direct.testing.local import local_spark

            spark = local_spark("share-scaling", cores=max(READERS) + 2)
            try:
                for partitions in PARTITIONS:
                    for readers in READERS:
                        topic = f"bench-stream-{partitions}p-{readers}r-{os.getpid()}"
                        make_topic(bootstrap, topic, partitions)
                        rate = run_stream(
                            spark, bootstrap, topic, args.records, partitions, readers
                        )
                        log(f"share stream, {partitions}p, {readers} receiver(s): {rate:,.0f}/s")
                        rows.append(("share stream", partitions, readers, rate, ""))
                        loads.append(os.getloadavg()[0])
            finally:
                spark.stop()
    print(
        f"\n{command}\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"load average (1 min) {min(loads):.1f} to {max(loads):.1f} during the run\n"
    )
    print("| reader | partitions | readers | records/s | records per reader |")
    print("|---|---:|---:|---:|---|")
    for kind, partitions, readers, rate, counts in rows:
        print(f"| {kind} | {partitions} | {readers} | {rate:,.0f} | {counts} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
