"""The real-Kafka soak's producer, its reading of the driver's progress, and its final checks.
Runs in the soak's own process.

Everything is checked against what the brokers acknowledged: a source record counts as produced
when its delivery report gives its offset. The outputs are read back under ``read_committed``.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from kafka_direct import TopicPartition
from kafka_direct.stores import SqlOffsetStore

PIPES = ("eos", "alo", "dstream")


class SequencedProducer:
    """Numbered records (``soak|p<partition>|<i>``) to every partition at a steady rate, in a
    thread; keeps each acknowledged one by (partition, offset). Idempotent, ``acks=all``, and a
    long message timeout that rides out every fault."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: float) -> None:
        self.topic = topic
        self.partitions = partitions
        self.interval_s = partitions / rate  # one record per partition per tick
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 20,
                "message.timeout.ms": 600_000,
                "log_level": 0,
            }
        )
        self._lock = threading.Lock()
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.failures: list[str] = []
        self.sent = 0
        self._next = [0] * partitions
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-producer", daemon=True)

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        with self._lock:
            if err is not None:
                self.failures.append(f"p{msg.partition()}: {err.str()}")
            else:
                # A retry that the broker recognises as a duplicate (DUPLICATE_SEQUENCE_NUMBER)
                # is acknowledged without an offset: librdkafka reports OFFSET_INVALID (-1001).
                # Keyed by value (unique here), such a record is not lost from the books.
                self.acked[msg.value()] = (int(msg.partition() or 0), int(msg.offset() or 0))

    def _run(self) -> None:
        while not self._stop.is_set():
            for p in range(self.partitions):
                i = self._next[p]
                self._next[p] += 1
                self.sent += 1
                self._producer.produce(
                    self.topic,
                    key=f"{p}|{i}".encode(),
                    value=f"soak|p{p}|{i}".encode(),
                    partition=p,
                    on_delivery=self._on_delivery,
                )
            self._producer.poll(0)
            self._stop.wait(self.interval_s)

    def start(self) -> None:
        self._thread.start()

    def finish(self, timeout_s: float = 600.0) -> dict[bytes, tuple[int, int]]:
        self._stop.set()
        self._thread.join()
        self._producer.flush(timeout_s)
        with self._lock:
            return dict(self.acked)

    def ends(self) -> dict[int, int]:
        """Each partition's end offset after the acknowledged records."""
        with self._lock:
            ends = {p: 0 for p in range(self.partitions)}
            for p, o in self.acked.values():
                ends[p] = max(ends[p], o + 1)
            return ends


def read_progress(work: Path) -> list[dict[str, Any]]:
    path = work / "progress.jsonl"
    if not path.exists():
        return []
    lines = []
    for line in path.read_text().splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            continue  # a line cut by a SIGKILL
    return lines


def first_progress_after(work: Path, since: float) -> dict[str, float | None]:
    """Per pipeline: seconds from ``since`` to its first batch that read records, or None."""
    found: dict[str, float | None] = {pipe: None for pipe in PIPES}
    for line in read_progress(work):
        pipe, at = line["pipe"], line["at"]
        if at > since and (found[pipe] is None or at - since < found[pipe]):  # type: ignore[operator]
            found[pipe] = at - since
    return found


def caught_up(work: Path, ends: dict[int, int]) -> dict[str, bool]:
    """Per pipeline: whether one of its batches ended at (or past) every partition's end."""
    reached: dict[str, dict[int, int]] = {pipe: {} for pipe in PIPES}
    for line in read_progress(work):
        for p, o in line["end"].items():
            mine = reached[line["pipe"]]
            mine[int(p)] = max(mine.get(int(p), 0), int(o))
    return {pipe: all(reached[pipe].get(p, 0) >= end for p, end in ends.items()) for pipe in PIPES}


def _read_topic(
    bootstrap: str, topic: str, partitions: int, expected: int
) -> list[tuple[int, int, bytes]]:
    """Every ``(partition, offset, value)`` of ``topic`` visible under ``read_committed``: read
    until ``expected`` came and then 5 s passed with nothing new (a duplicate would come then),
    or 60 s with nothing."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"soak-check-{topic}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    consumer.assign([KafkaTopicPartition(topic, p, 0) for p in range(partitions)])
    records: list[tuple[int, int, bytes]] = []
    last = time.monotonic()
    try:
        while True:
            idle = time.monotonic() - last
            if (len(records) >= expected and idle >= 5.0) or idle >= 60.0:
                return records
            for msg in consumer.consume(1000, timeout=1.0):
                if msg.error() is None:
                    records.append((int(msg.partition() or 0), int(msg.offset() or 0), msg.value()))
                    last = time.monotonic()
    finally:
        consumer.close()


def read_committed(bootstrap: str, topic: str, partitions: int, expected: int) -> list[bytes]:
    """Every value of ``topic`` visible under ``read_committed`` (:func:`_read_topic`)."""
    return [value for _, _, value in _read_topic(bootstrap, topic, partitions, expected)]


def read_log(
    bootstrap: str, topic: str, partitions: int, expected: int
) -> dict[tuple[int, int], bytes]:
    """The source topic as the brokers hold it: ``(partition, offset) -> value``. The truth of
    where each record sits (a delivery report's offset is the producer's claim)."""
    return {(p, o): v for p, o, v in _read_topic(bootstrap, topic, partitions, expected)}


@dataclass
class SinkCheck:
    """Count and content of one output against the acknowledged records."""

    name: str
    read: int
    distinct: int
    lost: int
    duplicated: int  # copies beyond the first
    unknown: int  # values that were never produced
    notes: list[str] = field(default_factory=list)


def expected_copies(
    acked: dict[bytes, tuple[int, int]], log: dict[tuple[int, int], bytes]
) -> Counter[bytes]:
    """How many times each produced value must reach a sink: as often as the source log holds it
    (an idempotent producer can still write a record twice when a retry's first attempt landed
    after a leader's SIGKILL), and once for an acknowledged value the log lacks."""
    expected = Counter(v for v in log.values() if v in acked)
    for value in acked:
        expected[value] = max(expected[value], 1)
    return expected


def check_values(name: str, expected: Counter[bytes], values: list[bytes]) -> SinkCheck:
    """``values`` (a sink's output) against ``expected`` (:func:`expected_copies`): a copy beyond
    what the source holds is a duplicate, a copy short of it is lost."""
    counts = Counter(values)
    return SinkCheck(
        name,
        read=len(values),
        distinct=len(counts),
        lost=sum(max(0, n - counts[v]) for v, n in expected.items()),
        duplicated=sum(max(0, n - expected.get(v, 1)) for v, n in counts.items()),
        unknown=len(set(counts) - set(expected)),
    )


def check_dstream(
    work: Path,
    topic: str,
    acked: dict[bytes, tuple[int, int]],
    partitions: int,
    log: dict[tuple[int, int], bytes],
) -> SinkCheck:
    """The DStream's SQLite output (records and every delivery) and its offset store. ``log``
    is the source topic as the brokers hold it (:func:`read_log`): each record the DStream
    wrote must sit at its offset there."""
    from soak_driver import GROUP  # the driver's module sits beside this one

    with sqlite3.connect(work / "dstream.db") as conn:
        records = {
            (p, o): bytes(v)
            for p, o, v in conn.execute("SELECT partition, offset, value FROM dstream_records")
        }
        delivered = Counter(conn.execute("SELECT partition, offset FROM dstream_deliveries"))
    store = SqlOffsetStore.sqlite(work / "dstream.db")
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        stored = {tp.partition: o for tp, o in store.load(GROUP, tps).items()}
    finally:
        store.close()
    processed = {p: 0 for p in range(partitions)}
    for p, o in delivered:
        processed[p] = max(processed[p], o + 1)
    result = SinkCheck(
        "dstream",
        read=sum(delivered.values()),
        distinct=len(records),
        # By value; and each record at the offset the log holds it at (the DStream's offsets
        # are what its store keeps).
        lost=len(set(acked) - set(records.values()))
        + sum(1 for key, value in records.items() if log.get(key) != value),
        duplicated=sum(n - 1 for n in delivered.values()),
        unknown=len(set(records.values()) - set(acked)),
    )
    if stored != processed:
        result.notes.append(f"store offsets {stored} != processed {processed}")

    return result
