"""Reusable fakes for executor-side tests: one partition's log and a librdkafka-like consumer.

No broker, no threads, no real sleeping. The fakes model what librdkafka does, as far as the
fetch loop can observe it (checked against librdkafka 2.x, ``rdkafka_queue.c``
``rd_kafka_q_serve_rkmessages`` and ``rdkafka_fetcher.c``):

- ``assign([TopicPartition(t, p, offset)])`` sets the fetch position and purges the local queue
  (librdkafka bumps the partition's op version, so queued ops of the old position are dropped).
- The fetcher prefetches from the position into a local queue. Control markers take an offset but
  are never handed to the application; under ``read_committed`` neither are the records of
  aborted transactions; compacted-away offsets are simply absent.
- With ``enable.partition.eof=true``, a ``_PARTITION_EOF`` event (``offset()`` = log end) is
  queued right behind the last record each time the fetcher *arrives* at the log end. It is an
  ordinary queue entry: it may be left behind in the queue by a ``consume(n)`` that was already
  full, and come out first on the next call (a "stale" EOF).
- ``consume(n, timeout)`` returns as soon as it has ``n`` events (records *and* error events
  count, markers do not) and otherwise waits the whole ``timeout``. Waiting is simulated: the
  timeout is recorded in :attr:`FakeConsumer.waits` and added to a :class:`FakeClock`.
- With ``auto.offset.reset=error`` (the executors' setting), a position below the log start or
  above the log end queues one ``_AUTO_OFFSET_RESET`` error event and fetching stops until the
  next ``assign``.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from types import EllipsisType
from typing import Any, Literal

from confluent_kafka import KafkaError, KafkaException

__all__ = [
    "BASE_TS_MS",
    "PARTITION",
    "TOPIC",
    "CallRecord",
    "CatchingUpLeader",
    "Entry",
    "FakeClock",
    "FakeConsumer",
    "FakeGroupConsumer",
    "FakeLog",
    "FakeMessage",
    "aborted",
    "data",
    "default_key",
    "default_ts",
    "default_value",
    "error_event",
    "marker",
]

TOPIC = "orders"
PARTITION = 0
BASE_TS_MS = 1_700_000_000_000

Kind = Literal["data", "marker", "aborted"]
Isolation = Literal["read_committed", "read_uncommitted"]
Headers = list[tuple[str, bytes | None]]


def default_key(offset: int) -> bytes:
    return b"k%d" % offset


def default_value(offset: int) -> bytes:
    return b"v%d" % offset


def default_ts(offset: int) -> int:
    return BASE_TS_MS + 10 * offset


@dataclass(frozen=True)
class Entry:
    """One offset of the log: a data record, a control marker or an aborted record."""

    offset: int
    kind: Kind
    key: bytes | None = None
    value: bytes | None = None
    timestamp_ms: int = 0
    headers: Headers | None = None

    def visible(self, isolation: Isolation) -> bool:
        """Whether librdkafka hands this entry to the application."""
        if self.kind == "marker":
            return False
        return not (self.kind == "aborted" and isolation == "read_committed")


def data(
    offset: int,
    key: bytes | EllipsisType | None = ...,
    value: bytes | EllipsisType | None = ...,
    ts: int | None = None,
    headers: Headers | None = None,
) -> Entry:
    """A data record; key, value and timestamp default to ones derived from the offset."""
    return Entry(
        offset,
        "data",
        default_key(offset) if isinstance(key, EllipsisType) else key,
        default_value(offset) if isinstance(value, EllipsisType) else value,
        default_ts(offset) if ts is None else ts,
        headers,
    )


def aborted(offset: int) -> Entry:
    """A record of an aborted transaction (its abort marker is a separate :func:`marker`)."""
    return Entry(offset, "aborted", default_key(offset), default_value(offset), default_ts(offset))


def marker(offset: int) -> Entry:
    """A transaction control marker (commit or abort): takes an offset, never returned."""
    return Entry(offset, "marker")


_LAYOUT: dict[str, Callable[[int], Entry] | None] = {
    "D": data,
    "A": aborted,
    "M": marker,
    ".": None,  # compacted away
}


class FakeLog:
    """One partition's log: entries by offset, plus the log start and end offsets.

    ``start`` moves up on retention; ``end`` is the high watermark (last offset + 1, so a
    compacted or marker-terminated log still ends where its last offset says).
    """

    def __init__(self, entries: Iterable[Entry] = (), *, start: int = 0, end: int | None = None):
        self._by_offset: dict[int, Entry] = {}
        self._offsets: list[int] = []
        self.start = start
        self.end = start
        self.extend(entries)
        if end is not None:
            self.end = end

    @classmethod
    def from_layout(cls, layout: str, *, base: int = 0, end: int | None = None) -> FakeLog:
        """``"DDMA.D"``: D data, M control marker, A aborted record, ``.`` compacted away."""
        log = cls(start=base)
        log.append_layout(layout)
        if end is not None:
            log.end = end
        return log

    @classmethod
    def plain(cls, count: int, *, base: int = 0) -> FakeLog:
        return cls.from_layout("D" * count, base=base)

    def append_layout(self, layout: str) -> None:
        """Append entries after the current end, one layout character per offset."""
        base = self.end
        for i, ch in enumerate(layout):
            make = _LAYOUT[ch]
            if make is not None:
                self.extend([make(base + i)])
        self.end = base + len(layout)

    def extend(self, entries: Iterable[Entry]) -> None:
        for e in entries:
            if e.offset in self._by_offset or e.offset < self.start:
                raise ValueError(f"bad or duplicate offset {e.offset} for a log from {self.start}")
            self._by_offset[e.offset] = e
            insort(self._offsets, e.offset)
            self.end = max(self.end, e.offset + 1)

    def delete_before(self, offset: int) -> None:
        """Retention: records below ``offset`` are gone and the log starts there."""
        self.start = offset
        cut = bisect_left(self._offsets, offset)
        for off in self._offsets[:cut]:
            del self._by_offset[off]
        del self._offsets[:cut]

    def recreate(self, layout: str) -> None:
        """The topic was deleted and recreated: offsets restart at 0 with ``layout``."""
        self._by_offset.clear()
        self._offsets.clear()
        self.start = self.end = 0
        self.append_layout(layout)

    def scan(self, lo: int, hi: int) -> list[Entry]:
        """Entries with ``lo <= offset < hi``, in offset order."""
        i, j = bisect_left(self._offsets, lo), bisect_left(self._offsets, hi)
        return [self._by_offset[o] for o in self._offsets[i:j]]

    def expected(self, lo: int, hi: int, isolation: Isolation = "read_uncommitted") -> list[Entry]:
        """What a correct read of ``[lo, hi)`` returns: the visible entries still in the log."""
        lo, hi = max(lo, self.start), min(hi, self.end)
        return [e for e in self.scan(lo, hi) if e.visible(isolation)]


class FakeMessage:
    """Quacks like ``confluent_kafka.Message``: a record or an error event."""

    def __init__(
        self,
        *,
        offset: int,
        error: KafkaError | None = None,
        entry: Entry | None = None,
        topic: str = TOPIC,
        partition: int = PARTITION,
    ) -> None:
        self._offset = offset
        self._error = error
        self._entry = entry
        self._topic = topic
        self._partition = partition

    def error(self) -> KafkaError | None:
        return self._error

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._entry.key if self._entry else None

    def value(self) -> bytes | None:
        return self._entry.value if self._entry else None

    def __len__(self) -> int:
        # As confluent-kafka's: the value's length (an event's: its reason's).
        value = self.value()
        return len(value) if value else 0

    def timestamp(self) -> tuple[int, int]:
        # librdkafka: (TIMESTAMP_CREATE_TIME=1, ms); events have (TIMESTAMP_NOT_AVAILABLE=0, -1).
        return (1, self._entry.timestamp_ms) if self._entry else (0, -1)

    def headers(self) -> Headers | None:
        return list(self._entry.headers) if self._entry and self._entry.headers else None

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    @property
    def is_data(self) -> bool:
        return self._error is None

    def __repr__(self) -> str:
        if self._error is not None:
            return f"<event {self._error.name()} @{self._offset}>"
        return f"<record @{self._offset}>"


def error_event(code: int, offset: int) -> FakeMessage:
    """An error event as librdkafka queues it, e.g. ``_PARTITION_EOF`` or ``_TRANSPORT``."""
    return FakeMessage(offset=offset, error=KafkaError(code))


class FakeClock:
    """Stands in for the ``time`` module of the code under test: ``monotonic()`` only moves
    when a fake consumer simulates a wait, or when a test calls :meth:`advance`."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class CallRecord:
    """One ``consume`` call: what was asked, where the application stood, what came back."""

    n: int
    timeout: float
    position: int | None  # just past the last event handed out (None before any assign)
    events: list[FakeMessage] = field(default_factory=list)
    waited: bool = False

    @property
    def data_offsets(self) -> list[int]:
        return [m.offset() for m in self.events if m.is_data]


class FakeConsumer:
    """A ``confluent_kafka.Consumer`` over one :class:`FakeLog` (see the module docstring).

    Knobs:
      ``isolation_level``  hides aborted records under ``read_committed``, as librdkafka does.
      ``fetch_span``       offsets scanned per fetch round (``None``: up to the log end).
      ``fetches_per_call`` fetch rounds a ``consume`` may run while waiting (``None``: any).
      ``watermarks``       override ``get_watermark_offsets``' answer (a stalled broker).
      ``overdeliver``      return up to this many queued events beyond ``n`` (a misbehaving
                           client; librdkafka never does this).
      ``clock``            advanced by every simulated wait; patch it in as the code's clock.
    """

    def __init__(
        self,
        log: FakeLog,
        *,
        topic: str = TOPIC,
        partition: int = PARTITION,
        isolation_level: Isolation = "read_uncommitted",
        fetch_span: int | None = None,
        fetches_per_call: int | None = None,
        watermarks: tuple[int, int] | None = None,
        overdeliver: int = 0,
        clock: FakeClock | None = None,
        max_calls: int = 100_000,
    ) -> None:
        self.log = log
        self.topic = topic
        self.partition = partition
        self.isolation_level: Isolation = isolation_level
        self.fetch_span = fetch_span
        self.fetches_per_call = fetches_per_call
        self.watermarks = watermarks
        self.overdeliver = overdeliver
        self.clock = clock
        self.max_calls = max_calls  # a safety net, so a broken fetch loop fails instead of hanging
        # What tests look at.
        self.assigns: list[int] = []
        self.calls: list[CallRecord] = []
        self.waits: list[float] = []
        self.watermark_calls = 0
        self.closed = False
        # Failure injection.
        self.paused = False  # the broker answers no fetch at all
        self.held_rounds = 0  # the next N fetch rounds bring nothing (fetch in flight)
        self.raise_on_consume: BaseException | None = None  # one-shot
        self.on_consume: Callable[[], None] | None = None  # e.g. a client event per call
        self.raise_on_assign: BaseException | None = None  # one-shot
        self.raise_on_watermarks: BaseException | None = None  # one-shot
        # Internal state.
        self._queue: deque[FakeMessage] = deque()
        self._fetch_pos: int | None = None
        self._app_pos: int | None = None
        self._stopped = False
        self._eof_at: int | None = None

    # -- the confluent_kafka.Consumer surface ------------------------------------------------

    def assign(self, partitions: Sequence[Any]) -> None:
        self._check_open()
        if self.raise_on_assign is not None:
            exc, self.raise_on_assign = self.raise_on_assign, None
            raise exc
        if len(partitions) != 1:
            raise AssertionError(f"executors assign exactly one partition, got {partitions}")
        (tp,) = partitions
        if (tp.topic, tp.partition) != (self.topic, self.partition):
            raise AssertionError(f"assigned {tp.topic}-{tp.partition}, the fake only has one")
        if tp.offset < 0:
            raise AssertionError(f"the fetcher must assign absolute offsets, got {tp.offset}")
        self.assigns.append(tp.offset)
        self._queue.clear()
        self._fetch_pos = self._app_pos = tp.offset
        self._stopped = False
        self._eof_at = None

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[FakeMessage]:
        self._check_open()
        if not 1 <= num_messages <= 1_000_000:
            raise ValueError(f"num_messages must be between 1 and 1000000, got {num_messages}")
        if timeout is None or timeout < 0:
            raise AssertionError("the fetcher must never consume without a timeout")
        record = CallRecord(num_messages, timeout, self._app_pos)
        self.calls.append(record)
        if self.on_consume is not None:
            self.on_consume()
        if len(self.calls) > self.max_calls:
            raise AssertionError(f"runaway fetch loop: {len(self.calls)} consume calls")
        if self.raise_on_consume is not None:
            exc, self.raise_on_consume = self.raise_on_consume, None
            raise exc
        out: list[FakeMessage] = []
        rounds = 0
        while True:
            while self._queue and len(out) < num_messages:
                out.append(self._queue.popleft())
            if len(out) >= num_messages:
                break
            if self.fetches_per_call is not None and rounds >= self.fetches_per_call:
                break
            rounds += 1
            if not self._fetch_round():
                break
        for _ in range(self.overdeliver):
            if not self._queue:
                break
            out.append(self._queue.popleft())
        if len(out) < num_messages:
            record.waited = True
            self.waits.append(timeout)
            if self.clock is not None:
                self.clock.advance(timeout)
        for m in out:
            if m.is_data:
                self._app_pos = m.offset() + 1
            elif m.error() is not None and m.error().code() == KafkaError._PARTITION_EOF:
                self._app_pos = max(self._app_pos or 0, m.offset())
        record.events = out
        return out

    def get_watermark_offsets(
        self, partition: Any, timeout: float | None = None, cached: bool = False
    ) -> tuple[int, int]:
        self._check_open()
        self.watermark_calls += 1
        if self.raise_on_watermarks is not None:
            exc, self.raise_on_watermarks = self.raise_on_watermarks, None
            raise exc
        if (partition.topic, partition.partition) != (self.topic, self.partition):
            raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION))
        if self.watermarks is not None:
            return self.watermarks
        return self.log.start, self.log.end

    def close(self) -> None:
        self.closed = True

    # -- helpers for tests ------------------------------------------------------------------

    def inject(self, code: int, offset: int = -1) -> None:
        """Queue an error event behind whatever is queued (e.g. ``KafkaError._TRANSPORT``)."""
        self._queue.append(error_event(code, offset))

    def queued(self) -> list[FakeMessage]:
        """What is prefetched but not yet consumed."""
        return list(self._queue)

    @property
    def delivered(self) -> list[int]:
        """Offsets of every data record handed out, in order."""
        return [o for c in self.calls for o in c.data_offsets]

    # -- internals --------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError("Consumer closed")

    def _fetch_round(self) -> bool:
        """One fetch response into the queue; False if nothing could be fetched."""
        if self._fetch_pos is None or self._stopped or self.paused:
            return False
        if self.held_rounds > 0:
            self.held_rounds -= 1
            return False
        pos, log = self._fetch_pos, self.log
        if pos < log.start or pos > log.end:
            self._queue.append(error_event(KafkaError._AUTO_OFFSET_RESET, pos))
            self._stopped = True
            return True
        if pos == log.end:
            return self._arrive_at_end()
        limit = log.end if self.fetch_span is None else min(log.end, pos + self.fetch_span)
        for e in log.scan(pos, limit):
            if e.visible(self.isolation_level):
                msg = FakeMessage(
                    offset=e.offset, entry=e, topic=self.topic, partition=self.partition
                )
                self._queue.append(msg)
        self._fetch_pos = limit
        if limit == log.end:
            self._arrive_at_end()
        return True

    def _arrive_at_end(self) -> bool:
        end = self.log.end
        if self._eof_at == end:
            return False  # once per arrival at the end
        self._eof_at = end
        self._queue.append(error_event(KafkaError._PARTITION_EOF, end))
        return True


class FakeGroupConsumer:
    """A ``confluent_kafka.Consumer`` assigned several partitions at once (a packed task's), each
    a :class:`FakeConsumer` over its own :class:`FakeLog`, whose records share one queue.

    ``consume(n, timeout)`` takes what each assigned partition has queued, in turn, fetching a
    round for every assigned partition while it has fewer than ``n`` events, and waits (on the
    clock) as :class:`FakeConsumer` does when it comes up short. ``assign`` replaces the whole
    assignment (unassigned partitions stop fetching and lose their queue, as librdkafka's
    ``assign``). ``before_consume``: called before each call (a partition that keeps receiving
    records, say). Per-partition knobs (``paused``, ``watermarks``...) are set on
    :attr:`parts`.
    """

    def __init__(
        self,
        logs: dict[tuple[str, int], FakeLog],
        *,
        clock: FakeClock | None = None,
        max_calls: int = 100_000,
        **kwargs: Any,
    ) -> None:
        self.parts = {
            tp: FakeConsumer(log, topic=tp[0], partition=tp[1], **kwargs)
            for tp, log in logs.items()
        }
        self.clock = clock
        self.max_calls = max_calls
        self.assignments: list[list[tuple[str, int, int]]] = []
        self.calls = 0
        self.waits: list[float] = []
        self.closed = False
        self.before_consume: Callable[[], None] | None = None
        self._assigned: list[tuple[str, int]] = []

    def assign(self, partitions: Sequence[Any]) -> None:
        if self.closed:
            raise RuntimeError("Consumer closed")
        wanted = [(tp.topic, tp.partition, tp.offset) for tp in partitions]
        self.assignments.append(wanted)
        for part in self.parts.values():
            part._queue.clear()
            part._fetch_pos = part._app_pos = None
        for t, p, offset in wanted:
            self.parts[(t, p)].assign([_TopicPartition(t, p, offset)])
        self._assigned = [(t, p) for t, p, _ in wanted]

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[FakeMessage]:
        if self.closed:
            raise RuntimeError("Consumer closed")
        if timeout is None or timeout < 0:
            raise AssertionError("the fetcher must never consume without a timeout")
        self.calls += 1
        if self.calls > self.max_calls:
            raise AssertionError(f"runaway fetch loop: {self.calls} consume calls")
        if self.before_consume is not None:
            self.before_consume()
        parts = [self.parts[tp] for tp in self._assigned]
        out: list[FakeMessage] = []
        while True:
            for part in parts:
                while part._queue and len(out) < num_messages:
                    out.append(_of_partition(part._queue.popleft(), part))
            if len(out) >= num_messages:
                break
            fetched = [part._fetch_round() for part in parts]
            if not any(fetched):
                break
        if len(out) < num_messages:
            self.waits.append(timeout)
            if self.clock is not None:
                self.clock.advance(timeout)
        return out

    def get_watermark_offsets(
        self, partition: Any, timeout: float | None = None, cached: bool = False
    ) -> tuple[int, int]:
        return self.parts[(partition.topic, partition.partition)].get_watermark_offsets(
            partition, timeout, cached
        )

    @property
    def watermark_calls(self) -> int:
        return sum(part.watermark_calls for part in self.parts.values())

    def close(self) -> None:
        self.closed = True


def _of_partition(message: FakeMessage, part: FakeConsumer) -> FakeMessage:
    """``message`` as librdkafka hands it out of a shared queue: an event names its partition
    too (:func:`error_event` makes them for the default partition)."""
    if message.is_data:
        return message
    return FakeMessage(
        offset=message.offset(), error=message.error(), topic=part.topic, partition=part.partition
    )


@dataclass(frozen=True)
class _TopicPartition:
    """What :meth:`FakeConsumer.assign` reads of confluent-kafka's ``TopicPartition``."""

    topic: str
    partition: int
    offset: int


class CatchingUpLeader(FakeConsumer):
    """A partition whose new leader's high watermark lags its predecessor's (KAFKA-7703): the
    log ends ``behind`` records short until the leader has answered ``lagging`` watermark
    requests; then its followers have caught up, and the records are there to fetch."""

    def __init__(self, log: FakeLog, *, behind: int, lagging: int, **kwargs: Any) -> None:
        super().__init__(log, **kwargs)
        self.behind = behind
        self.lagging = lagging

    def get_watermark_offsets(
        self, partition: Any, timeout: float | None = None, cached: bool = False
    ) -> tuple[int, int]:
        answer = super().get_watermark_offsets(partition, timeout, cached)
        self.lagging -= 1
        if self.lagging == 0:
            self.log.append_layout("D" * self.behind)
        return answer
