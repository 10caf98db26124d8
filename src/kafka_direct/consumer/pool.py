"""A keyed pool of Kafka consumers. Runs in: Spark executor (Python worker).

Python workers are reused between tasks, so a consumer opened by one task can serve the next one
reading the same topic-partition with the same configuration. The rules are those of Spark's
``KafkaDataConsumer`` (the SPARK-22606 fix):

- A consumer is never shared, as it is not safe for concurrent use: while the cached consumer of a
  key is in use, a second acquirer gets a fresh *non-cached* consumer, closed on release.
- A reattempt (``TaskContext.attemptNumber() > 0``) or a failed read invalidates the cached
  consumer, since the failure may come from its state: it is closed now if idle, or by its holder's
  release; the reattempt reads with a non-cached consumer.
- Past capacity, least-recently-used idle consumers are evicted; consumers in use cannot be, so the
  pool may overflow for a while (with a warning). Idle consumers expire after ``idle_timeout_s``,
  closed by a daemon thread (:class:`~kafka_direct.idle_reaper.IdleReaper`, Spark's evictor
  thread) while the worker waits for tasks, so a worker whose query has stopped does not keep
  its clients, and their reconnect attempts to a cluster that may be gone, for ever.

The factory is injected, so no Kafka client is imported here. Logs name the group and
topic-partition only, never configuration values, which may hold secrets.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, Protocol, TypeVar, cast

from kafka_direct.errors import ConfigurationError
from kafka_direct.idle_reaper import IdleReaper
from kafka_direct.process_local import ProcessLocal

__all__ = [
    "Closeable",
    "ConsumerPool",
    "Lease",
    "PoolKey",
    "PoolStats",
    "config_fingerprint",
    "get_pool",
]

log = logging.getLogger(__name__)

DEFAULT_CAPACITY = 64
DEFAULT_IDLE_TIMEOUT_S = 300.0
# A pool that stays over capacity would otherwise warn on every acquire.
_OVERFLOW_WARNING_INTERVAL_S = 60.0


class Closeable(Protocol):
    """All the pool needs from what it keeps (a
    :class:`~kafka_direct.consumer.fetch.PartitionConsumer`)."""

    def close(self) -> None: ...


C = TypeVar("C", bound=Closeable)


class PoolKey(NamedTuple):
    """What makes two consumers interchangeable: the same partition (or, for a packed task, the
    same set of partitions), the same configuration, and the same read path (``fast_path``:
    the C reader of ``consumer.native``, or not)."""

    group_id: str
    topic: str
    partition: int
    config_fingerprint: str
    fast_path: bool = False
    #: A packed task's partitions, sorted (its consumer is assigned all of them); empty for a
    #: task of one range, whose partition is ``topic``/``partition``.
    assignment: tuple[tuple[str, int], ...] = ()

    def __str__(self) -> str:
        more = f" (+{len(self.assignment) - 1} more)" if len(self.assignment) > 1 else ""
        return f"{self.group_id}/{self.topic}-{self.partition}{more}"


def config_fingerprint(config: Mapping[str, str]) -> str:
    """A stable hex digest of ``config``, so keys can tell configurations apart without holding
    (or printing) their values."""
    canonical = json.dumps(sorted(config.items()), separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class PoolStats:
    """Counters since the pool was created; ``size`` and ``in_use`` count cached entries now."""

    hits: int
    misses: int
    creations: int
    evictions: int
    closes: int
    size: int
    in_use: int


@dataclass(eq=False)
class _Entry(Generic[C]):
    consumer: C | None  # None only while the factory runs, outside the lock, with in_use set
    in_use: bool = True
    marked_for_close: bool = False
    last_used: float = 0.0


@dataclass(eq=False)
class Lease(Generic[C]):
    """One acquirer's exclusive hold on a consumer, until :meth:`ConsumerPool.release`."""

    consumer: C
    key: PoolKey
    cached: bool
    _entry: _Entry[C] | None = field(default=None, repr=False)
    _released: bool = field(default=False, repr=False)


class ConsumerPool(Generic[C]):
    """Thread-safe pool of consumers keyed by :class:`PoolKey`; see the module docstring."""

    def __init__(
        self,
        factory: Callable[[PoolKey, Mapping[str, str]], C],
        capacity: int = DEFAULT_CAPACITY,
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
        reaper: bool = True,
    ) -> None:
        self._factory = factory
        self._capacity, self._idle_timeout_s = DEFAULT_CAPACITY, DEFAULT_IDLE_TIMEOUT_S
        self._clock = clock
        self._lock = threading.Lock()
        self._reaper = IdleReaper(
            "kafka-direct-consumer-reaper",
            self._lock,
            self._next_due_locked,
            self.evict_idle,
            clock,
            enabled=reaper,
        )
        # Insertion order doubles as recency: entries move to the end whenever they are used.
        self._entries: OrderedDict[PoolKey, _Entry[C]] = OrderedDict()
        self._hits = self._misses = self._creations = self._evictions = self._closes = 0
        self._last_overflow_warning: float | None = None
        self.configure(capacity, idle_timeout_s)

    def configure(self, capacity: int | None = None, idle_timeout_s: float | None = None) -> None:
        """Change the limits; shrinking them evicts idle consumers right away."""
        capacity = self._capacity if capacity is None else capacity
        idle_timeout_s = self._idle_timeout_s if idle_timeout_s is None else idle_timeout_s
        if capacity < 1:
            raise ConfigurationError("consumer pool capacity", capacity, "an integer >= 1")
        if idle_timeout_s <= 0:
            raise ConfigurationError("consumer pool idle timeout", idle_timeout_s, "seconds > 0")
        with self._lock:
            shorter = idle_timeout_s < self._idle_timeout_s
            self._capacity, self._idle_timeout_s = capacity, idle_timeout_s
            doomed = self._expired_locked() + self._make_room_locked(incoming=0)
            if shorter:  # idle consumers may be due sooner; every task configures, most alike
                self._reaper.wake()
        self._close_quietly(doomed)

    def acquire(
        self, key: PoolKey, config: Mapping[str, str], *, reattempt: bool = False
    ) -> Lease[C]:
        """Lend a consumer for ``key``, built from ``config`` if none can be reused."""
        new_entry: _Entry[C] | None = None
        with self._lock:
            doomed = self._expired_locked()
            if reattempt:
                doomed += self._invalidate_locked(key)
            entry = self._entries.get(key)
            if entry is not None and not entry.in_use and not reattempt:
                entry.in_use = True
                self._entries.move_to_end(key)
                self._hits += 1
                outcome = "hit"
                lease: Lease[C] | None = Lease(cast(C, entry.consumer), key, True, entry)
            else:
                self._misses += 1
                lease = None
                if reattempt or entry is not None:
                    outcome = "miss (non-cached consumer)"
                else:
                    outcome = "miss (new cached consumer)"
                    doomed += self._make_room_locked(incoming=1)
                    # Reserve the key in use, so concurrent acquirers go non-cached meanwhile.
                    new_entry = _Entry(None)
                    self._entries[key] = new_entry
            hits, misses = self._hits, self._misses
        self._close_quietly(doomed)
        log.debug("Consumer pool %s for %s (hits=%d, misses=%d)", outcome, key, hits, misses)
        return lease if lease is not None else self._create(key, config, new_entry)

    def _create(self, key: PoolKey, config: Mapping[str, str], entry: _Entry[C] | None) -> Lease[C]:
        try:
            consumer = self._factory(key, config)
        except BaseException:
            # Drop the reservation so the next acquire tries again instead of going uncached.
            with self._lock:
                if entry is not None and self._entries.get(key) is entry:
                    del self._entries[key]
            raise
        with self._lock:
            self._creations += 1
            if entry is not None:
                entry.consumer = consumer
        return Lease(consumer, key, entry is not None, entry)

    def release(self, lease: Lease[C], *, failed: bool = False) -> None:
        """Give ``lease`` back. ``failed=True`` means its read raised: close and invalidate."""
        doomed: list[C] = []
        with self._lock:
            if lease._released:
                return
            lease._released = True
            entry = lease._entry
            ours = entry is not None and self._entries.get(lease.key) is entry
            if failed or entry is None or entry.marked_for_close or not ours:
                doomed.append(lease.consumer)
                if ours:
                    del self._entries[lease.key]
                if failed:
                    doomed += self._invalidate_locked(lease.key)
            else:
                entry.in_use = False
                entry.last_used = self._clock()
                self._entries.move_to_end(lease.key)
                self._reaper.start_locked()
            doomed += self._expired_locked() + self._make_room_locked(incoming=0)
        self._close_quietly(doomed)

    @contextmanager
    def lease(
        self, key: PoolKey, config: Mapping[str, str], *, reattempt: bool = False
    ) -> Iterator[Lease[C]]:
        """``acquire`` + ``release``; an exception in the body releases with ``failed=True``."""
        held = self.acquire(key, config, reattempt=reattempt)
        failed = True
        try:
            yield held
            failed = False
        except GeneratorExit:
            # A reader generator closed early (e.g. a LIMIT) stopped cleanly; nothing went wrong.
            failed = False
            raise
        finally:
            self.release(held, failed=failed)

    def invalidate(self, key: PoolKey) -> None:
        """Close the cached consumer of ``key`` if idle, or have its holder's release close it."""
        with self._lock:
            doomed = self._invalidate_locked(key)
        self._close_quietly(doomed)

    def evict_idle(self) -> None:
        """Close consumers idle for longer than ``idle_timeout_s``."""
        with self._lock:
            doomed = self._expired_locked()
        self._close_quietly(doomed)

    def close_all(self) -> None:
        """Close every idle consumer; consumers in use are closed when released."""
        with self._lock:
            doomed = [k for k, e in self._entries.items() if not e.in_use]
            for entry in self._entries.values():
                entry.marked_for_close = True
            closing = [self._pop_idle_locked(k) for k in doomed]
            self._reaper.wake()
        self._close_quietly(closing)

    def stats(self) -> PoolStats:
        with self._lock:
            in_use = sum(1 for e in self._entries.values() if e.in_use)
            counters = (self._hits, self._misses, self._creations, self._evictions, self._closes)
            return PoolStats(*counters, size=len(self._entries), in_use=in_use)

    def log_stats(self) -> None:
        log.info("Consumer pool %s, capacity=%d", self.stats(), self._capacity)

    # The *_locked helpers run under self._lock and return consumers to close after unlocking,
    # so a slow librdkafka close (it may flush and leave the group) never blocks other acquirers.

    def _pop_idle_locked(self, key: PoolKey) -> C:
        # Only an in-use entry can still be under construction, so an idle one holds a consumer.
        return cast(C, self._entries.pop(key).consumer)

    def _invalidate_locked(self, key: PoolKey) -> list[C]:
        entry = self._entries.get(key)
        if entry is not None and entry.in_use:
            entry.marked_for_close = True
            return []
        return [] if entry is None else [self._pop_idle_locked(key)]

    def _expired_locked(self) -> list[C]:
        deadline = self._clock() - self._idle_timeout_s
        expired = [k for k, e in self._entries.items() if not e.in_use and e.last_used < deadline]
        self._evictions += len(expired)
        return [self._pop_idle_locked(k) for k in expired]

    def _next_due_locked(self) -> float | None:
        """When the least recently used idle consumer expires; None when none is idle."""
        idle = [e.last_used for e in self._entries.values() if not e.in_use]
        return min(idle) + self._idle_timeout_s if idle else None

    def _make_room_locked(self, incoming: int) -> list[C]:
        evicted: list[C] = []
        while len(self._entries) + incoming > self._capacity:
            lru = next((k for k, e in self._entries.items() if not e.in_use), None)
            if lru is not None:
                evicted.append(self._pop_idle_locked(lru))
                self._evictions += 1
                continue
            now, last = self._clock(), self._last_overflow_warning
            if last is None or now - last >= _OVERFLOW_WARNING_INTERVAL_S:
                self._last_overflow_warning = now
                log.warning(
                    "Consumer pool over capacity (%d cached, capacity %d): every cached consumer "
                    "is in use, so none can be closed. Raise the capacity if this persists.",
                    len(self._entries) + incoming, self._capacity,
                )  # fmt: skip
            break
        return evicted

    def _close_quietly(self, consumers: list[C]) -> None:
        with self._lock:
            self._closes += len(consumers)
        for consumer in consumers:
            try:
                consumer.close()
            # A failing close must not fail the task: the read itself already succeeded or failed.
            except Exception as exc:  # noqa: BLE001
                log.warning("Closing a pooled Kafka consumer failed, ignored: %r", exc)


_process_pool: ProcessLocal[ConsumerPool[Any]] = ProcessLocal(lambda pool: pool.close_all())


def get_pool(
    factory: Callable[[PoolKey, Mapping[str, str]], C],
    capacity: int | None = None,
    idle_timeout_s: float | None = None,
) -> ConsumerPool[C]:
    """The process-wide pool: the first call in a process creates it, later ones update limits."""
    pool: ConsumerPool[C] = _process_pool.get(lambda: ConsumerPool(factory))
    if capacity is not None or idle_timeout_s is not None:
        pool.configure(capacity=capacity, idle_timeout_s=idle_timeout_s)
    return pool
