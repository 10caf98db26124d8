"""Helpers of the fault suite: a producer that remembers what it delivered, Spark's offset log
read from the checkpoint, and the partition leaders of a topic.

Everything is checked against what the brokers acknowledged: a record counts as produced only
when its delivery report says where it landed, so "exact" means exactly those records, each once.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient

from tests.integration.kafka_helpers import Record
from tests.integration.streams import Collector, expected_keys, start, wait_for

#: librdkafka's OFFSET_INVALID: what ListOffsets answers, with no error, for a silent leader.
OFFSET_INVALID = -1001
#: Reads in this suite hand their workers' consumer pools a short idle timeout (the default is
#: Spark's 5 minutes). Each test tears its cluster down, and a pooled consumer of a cluster that
#: is gone keeps reconnecting to its ports; once those ports are reused by Spark's own server
#: sockets for new Python workers, a stray connection fails Spark's handshake ("Python worker
#: failed to connect back"), seen once in the benchmark smoke test after this suite. The pools'
#: reaper closes idle consumers on time, so with this they are gone seconds after each test.
SHORT_LIVED_POOL = {"consumerCache.timeoutMs": "15000"}


class KnownProducer:
    """Numbered records to chosen partitions; keeps each delivered one as a :class:`Record`.

    Values are ``"{topic}|p{partition}|{i}"`` and keys ``"k{i}"``, ``i`` counting per partition.
    Idempotence keeps the order under retries; the long message timeout rides out outages.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        message_timeout_s: float = 180.0,
        numbering: dict[int, int] | None = None,
    ) -> None:
        self.topic = topic
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "linger.ms": 5,
                "acks": "all",
                "enable.idempotence": True,
                "message.timeout.ms": int(message_timeout_s * 1000),
                # Brokers taken down on purpose would fill the test's output with connect errors.
                "log_level": 0,
            }
        )
        self._lock = threading.Lock()
        self._next: dict[int, int] = dict(numbering or {})
        self._delivered: list[Record] = []
        self.failures: list[str] = []
        self.sent = 0

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        with self._lock:
            if err is not None:
                self.failures.append(f"{msg.partition()}: {err.str()} ({err.name()})")
                return
            self._delivered.append(
                Record(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(), 0)
            )

    def send(self, partition: int, count: int = 1) -> None:
        """Queue ``count`` new records for ``partition`` (delivery reports come with poll/flush)."""
        for _ in range(count):
            with self._lock:
                i = self._next.get(partition, 0)
                self._next[partition] = i + 1
                self.sent += 1
            self._producer.produce(
                self.topic,
                value=f"{self.topic}|p{partition}|{i}".encode(),
                key=f"k{i}".encode(),
                partition=partition,
                on_delivery=self._on_delivery,
            )
            self._producer.poll(0)

    def send_all(self, partitions: Iterable[int], count: int) -> None:
        for p in partitions:
            self.send(p, count)

    def flush(self, timeout_s: float = 120.0) -> list[Record]:
        """Wait for every delivery report; fail on any failed or missing one."""
        left = self._producer.flush(timeout_s)
        with self._lock:
            assert not self.failures, f"deliveries failed: {self.failures[:5]}"
            assert left == 0 and len(self._delivered) == self.sent, (
                f"{left} records still in flight after {timeout_s:g} s "
                f"({len(self._delivered)} of {self.sent} delivered)"
            )
        return self.records

    def finish(self, partitions: Iterable[int], settle_s: float = 0.0) -> list[Record]:
        """Flush, then end each partition with a record of its own, so Tansu's log end is exact
        (shared/BROKER.md item 1; the durable broker also needs ``settle_s``)."""
        self.flush()
        time.sleep(settle_s)
        for p in partitions:
            self.send(p, 1)
            self.flush()
        return self.records

    def numbering(self) -> dict[int, int]:
        """The next index per partition: pass it to another producer to number on."""
        with self._lock:
            return dict(self._next)

    @property
    def records(self) -> list[Record]:
        with self._lock:
            return sorted(self._delivered, key=lambda r: (r.partition, r.offset))

    def counts(self) -> dict[int, int]:
        with self._lock:
            out: dict[int, int] = {}
            for r in self._delivered:
                out[r.partition] = out.get(r.partition, 0) + 1
            return out


class Feeder:
    """Keeps records arriving: every ``interval_s``, ``per_tick`` records to each partition.

    A thread of its own; :meth:`stop` ends it and waits for every delivery.
    """

    def __init__(
        self,
        producer: KnownProducer,
        partitions: Iterable[int],
        *,
        per_tick: int = 3,
        interval_s: float = 0.2,
    ) -> None:
        self.producer = producer
        self.partitions = list(partitions)
        self.per_tick = per_tick
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="feeder", daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.producer.send_all(self.partitions, self.per_tick)
                self._stop.wait(self.interval_s)
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc

    def __enter__(self) -> Feeder:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def stop(self) -> None:
        self.__exit__()
        assert self.error is None, f"the feeder failed: {self.error!r}"


# --- Spark's offset log -------------------------------------------------------------------------


def read_offset_log(checkpoint: Path) -> dict[int, dict[str, dict[str, int]]]:
    """Batch id -> the source's offsets, from ``<checkpoint>/offsets/<id>``.

    Spark's format: a ``v1`` line, the batch metadata, then one JSON line per source (ours is
    ``{"topic": {"partition": offset}}``). Temporary files (``.<id>.<uuid>.tmp``) are skipped.
    """
    folder = checkpoint / "offsets"
    out: dict[int, dict[str, dict[str, int]]] = {}
    if not folder.is_dir():
        return out
    for path in folder.iterdir():
        if not path.name.isdigit():
            continue
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            continue  # removed by Spark's retention meanwhile
        if len(lines) < 3:
            continue  # being written (Spark renames finished files into place, but be safe)
        out[int(path.name)] = json.loads(lines[2])
    return out


def negative_offsets(log: dict[int, dict[str, dict[str, int]]]) -> list[tuple[int, str, str, int]]:
    """Every (batch, topic, partition, offset) with an offset below 0."""
    return [
        (batch, topic, partition, offset)
        for batch, offsets in sorted(log.items())
        for topic, partitions in offsets.items()
        for partition, offset in partitions.items()
        if offset < 0
    ]


def commit_ids(checkpoint: Path) -> set[int]:
    folder = checkpoint / "commits"
    if not folder.is_dir():
        return set()
    return {int(p.name) for p in folder.iterdir() if p.name.isdigit()}


def rewrite_offsets(checkpoint: Path, batch: int, change: Callable[[dict[str, Any]], None]) -> None:
    """Edit the source offsets of ``batch`` in place (the way an older kafka_direct wrote them)."""
    path = checkpoint / "offsets" / str(batch)
    lines = path.read_text(encoding="utf-8").splitlines()
    offsets = json.loads(lines[2])
    change(offsets)
    lines[2] = json.dumps(offsets, separators=(",", ":"))
    path.write_text("\n".join(lines), encoding="utf-8")
    crc = path.with_name(f".{batch}.crc")
    crc.unlink(missing_ok=True)  # Hadoop's local checksum would no longer match


class OffsetLogWatcher:
    """Reads the offset log every ``interval_s`` while a query runs, so that no batch written
    during a fault escapes the check (Spark's retention could remove it before the end)."""

    def __init__(self, checkpoint: Path, interval_s: float = 0.1) -> None:
        self.checkpoint = checkpoint
        self.interval_s = interval_s
        self.seen: dict[int, dict[str, dict[str, int]]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="offset-log-watcher", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.scan()
            self._stop.wait(self.interval_s)

    def scan(self) -> None:
        for batch, offsets in read_offset_log(self.checkpoint).items():
            self.seen.setdefault(batch, offsets)

    def __enter__(self) -> OffsetLogWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.scan()

    def negative(self) -> list[tuple[int, str, str, int]]:
        return negative_offsets(self.seen)


# --- cluster metadata ---------------------------------------------------------------------------


#: How long :func:`leaders` keeps asking. A fault's checks call it while a broker is frozen.
METADATA_PATIENCE_S = 60.0


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """Partition -> leader broker id, from a fresh client's metadata.

    While a broker is SIGSTOPped its port still accepts connections, so a client whose first
    bootstrap broker is the frozen one waits on it and its metadata request times out (a CI run
    failed a pause-leader test on exactly that). A fresh client is therefore asked again, up to
    :data:`METADATA_PATIENCE_S`: another client may start from a live broker, and librdkafka
    moves on to one anyway. Only a time-out or a lost connection is retried.
    """
    deadline = time.monotonic() + METADATA_PATIENCE_S
    while True:
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        try:
            metadata = admin.list_topics(topic, timeout=10)
        except KafkaException as exc:
            code = exc.args[0].code() if exc.args else None
            transient = code in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT)
            if not transient or time.monotonic() >= deadline:
                raise
            continue
        return {p: int(m.leader) for p, m in metadata.topics[topic].partitions.items()}


def wait_until(
    condition: Callable[[], bool],
    timeout_s: float,
    what: str,
    *,
    explain: Callable[[], str] | None = None,
) -> None:
    """Polls ``condition`` until it holds; on time-out, fails with ``explain()``'s account of what
    was seen instead, so that a failure in CI can be read without re-running it."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            seen = f"; seen: {explain()}" if explain is not None else ""
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}{seen}")
        time.sleep(0.1)


# --- one stream through one fault ---------------------------------------------------------------


def exact_through_fault(
    fault: Callable[[], None],
    *,
    producer: KnownProducer,
    partitions: int,
    make_stream: Callable[[], Any],
    track: Callable[[Any], Any],
    checkpoint: Path,
    timeout_s: float = 90.0,
) -> Any:
    """Run a stream into a :class:`~tests.integration.streams.Collector` while records keep
    arriving and ``fault()`` runs; then check that every delivered record was read exactly once,
    that the query is still running, and that no offset in the checkpoint is negative.

    Returns the collector, for checks of the batches.
    """
    producer.send_all(range(partitions), 20)
    first = len(producer.flush())
    sink = Collector()
    with OffsetLogWatcher(checkpoint) as watcher:
        query = track(start(make_stream(), sink, str(checkpoint)))
        wait_for(lambda: len(sink.rows) >= first, query, timeout_s, "the records before the fault")
        with Feeder(producer, range(partitions)) as feeder:
            time.sleep(0.5)
            fault()
            time.sleep(0.5)
        feeder.stop()
        produced = producer.flush()
        wait_for(lambda: len(sink.rows) >= len(produced), query, timeout_s, "every record")
        time.sleep(1.0)  # a duplicate or a stray batch would land now
        assert query.isActive and query.exception() is None
        query.stop()
    assert len(produced) > first, "records must arrive during the fault"
    assert sink.keys() == expected_keys(produced)
    assert sink.mismatches == []
    assert watcher.negative() == []
    return sink


class HookedCollector(Collector):
    """A :class:`~tests.integration.streams.Collector` that runs ``before(batch_id)`` when a
    batch reaches the sink, before its rows are read, and ``after(batch_id)`` once they are.

    In ``foreachBatch`` the batch is planned (its offsets in the offset log) but not read until
    the function collects it, and the next batch is planned only after the function returns. So
    ``before`` injects a fault between a batch's planning and its read, ``after`` one between
    two batches.
    """

    def __init__(
        self,
        before: Callable[[int], None] | None = None,
        after: Callable[[int], None] | None = None,
    ) -> None:
        super().__init__()
        self.before = before
        self.after = after

    def __call__(self, df: Any, batch_id: int) -> None:
        if self.before is not None:
            self.before(batch_id)
        super().__call__(df, batch_id)
        if self.after is not None:
            self.after(batch_id)
