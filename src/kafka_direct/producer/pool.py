"""A pool of Kafka producers per Python worker, keyed by the producer config. Runs in Spark
executors (Python workers).

Python workers are reused between tasks, so a producer opened by one write task (its
connections, its producer id) serves the next task with the same configuration. The rules
answer the two bugs of Spark's own producer cache:

- **SPARK-21869**: Spark closed a cached producer when it expired, counted from when it was
  *acquired*, even while a task was still writing with it ("Cannot perform operation after
  producer has been closed"). Here a producer is lent to one holder at a time, and only
  producers that sit idle in the pool can expire, be evicted or be closed: expiry counts from
  the *release*. A producer in use is never closed under its holder (``close_all`` and
  invalidation mark it, and its release closes it).
- **SPARK-27042**: a task retried on the same executor got the same broken producer on every
  attempt until the query failed. Here a task reattempt (``TaskContext.attemptNumber() > 0``)
  closes every idle producer of its key and gets a new one; a task that failed closes its
  producer instead of returning it (:meth:`ProducerPool.release` with ``failed=True``); and a
  producer that is no longer usable (a fatal error) is never handed out again.

A second holder of the same key (a user's thread) gets another producer, so delivery errors
always belong to the task that sees them. Idle producers are closed after ``idle_timeout_s``
by a daemon thread that runs only while the pool holds idle producers, and beyond
``capacity`` the least recently used is closed. The factory is injected, so no Kafka client is
imported here, and keys name configurations by fingerprint, never by value (secrets).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

from kafka_direct.idle_reaper import IdleReaper
from kafka_direct.process_local import ProcessLocal

__all__ = ["PooledProducer", "ProducerKey", "ProducerLease", "ProducerPool", "get_producer_pool"]

log = logging.getLogger(__name__)

DEFAULT_IDLE_TIMEOUT_S = 600.0
DEFAULT_CAPACITY = 8


class PooledProducer(Protocol):
    """All the pool needs from what it keeps (a
    :class:`~kafka_direct.producer.batch_producer.BatchProducer`)."""

    @property
    def usable(self) -> bool: ...

    def close(self) -> None: ...


P = TypeVar("P", bound=PooledProducer)


class ProducerKey(NamedTuple):
    """What makes two producers interchangeable: the same config (by fingerprint) and the same
    implementation (``kind``: "python", or a fast path's name)."""

    config_fingerprint: str
    kind: str = "python"

    def __str__(self) -> str:
        return f"{self.kind}/{self.config_fingerprint[:12]}"


@dataclass(eq=False)
class ProducerLease(Generic[P]):
    """One holder's exclusive use of a producer, until :meth:`ProducerPool.release`."""

    producer: P
    key: ProducerKey
    #: The key's generation when lent: an invalidation since then closes it at release.
    generation: int
    reused: bool
    _released: bool = field(default=False, repr=False)


@dataclass(frozen=True)
class PoolStats:
    """Counters since the pool was created; ``idle`` and ``in_use`` are current."""

    hits: int
    creations: int
    closes: int
    idle: int
    in_use: int


class ProducerPool(Generic[P]):
    """Thread-safe pool of producers by :class:`ProducerKey`; see the module docstring."""

    def __init__(
        self,
        factory: Callable[[ProducerKey, Mapping[str, str]], P],
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
        capacity: int = DEFAULT_CAPACITY,
        clock: Callable[[], float] = time.monotonic,
        reaper: bool = True,
    ) -> None:
        self._factory = factory
        self._idle_timeout_s, self._capacity = idle_timeout_s, capacity
        self._clock = clock
        self._lock = threading.Lock()
        self._idle: list[tuple[ProducerKey, P, float]] = []  # oldest release first
        self._in_use: dict[ProducerKey, int] = {}
        self._generation: dict[ProducerKey, int] = {}
        self._hits = self._creations = self._closes = 0
        self._reaper = IdleReaper(
            "kafka-direct-producer-reaper",
            self._lock,
            self._next_due_locked,
            self.evict_idle,
            clock,
            enabled=reaper,
        )

    def configure(self, idle_timeout_s: float | None = None, capacity: int | None = None) -> None:
        with self._lock:
            shorter = idle_timeout_s is not None and idle_timeout_s < self._idle_timeout_s
            if idle_timeout_s is not None:
                self._idle_timeout_s = idle_timeout_s
            if capacity is not None:
                self._capacity = capacity
            doomed = self._expired_locked() + self._over_capacity_locked()
            if shorter:  # idle producers may be due sooner; every task configures, most alike
                self._reaper.wake()
        self._close_quietly(doomed)

    def acquire(
        self, key: ProducerKey, config: Mapping[str, str], *, reattempt: bool = False
    ) -> ProducerLease[P]:
        """Lend a producer for ``key``: the most recently released usable one, else a new one
        built from ``config``. ``reattempt`` (a task retry) closes the key's idle producers and
        makes any in use be closed at their release (SPARK-27042)."""
        with self._lock:
            doomed = self._expired_locked()
            if reattempt:
                doomed += self._invalidate_locked(key)
            lent: P | None = None
            for i in range(len(self._idle) - 1, -1, -1):
                idle_key, producer, _ = self._idle[i]
                if idle_key != key:
                    continue
                del self._idle[i]
                if producer.usable:
                    lent = producer
                    break
                doomed.append(producer)  # broken while idle: never lent again
            self._in_use[key] = self._in_use.get(key, 0) + 1
            generation = self._generation.get(key, 0)
            if lent is not None:
                self._hits += 1
        self._close_quietly(doomed)
        if lent is not None:
            log.debug("Producer pool: reusing a producer for %s", key)
            return ProducerLease(lent, key, generation, reused=True)
        try:
            producer = self._factory(key, config)
        except BaseException:
            with self._lock:
                self._in_use[key] -= 1
            raise
        with self._lock:
            self._creations += 1
        log.debug("Producer pool: new producer for %s%s", key, " (reattempt)" * reattempt)
        return ProducerLease(producer, key, generation, reused=False)

    def release(self, lease: ProducerLease[P], *, failed: bool = False) -> None:
        """Return ``lease``'s producer. It is closed instead when the task failed, when it is no
        longer usable, or when its key was invalidated (or the pool closed) while it was lent."""
        with self._lock:
            if lease._released:
                return
            lease._released = True
            self._in_use[lease.key] -= 1
            stale = self._generation.get(lease.key, 0) != lease.generation
            doomed: list[P] = []
            if failed or stale or not lease.producer.usable:
                doomed.append(lease.producer)
            else:
                self._idle.append((lease.key, lease.producer, self._clock()))
                self._reaper.start_locked()
            doomed += self._expired_locked() + self._over_capacity_locked()
        self._close_quietly(doomed)

    @contextmanager
    def lease(
        self, key: ProducerKey, config: Mapping[str, str], *, reattempt: bool = False
    ) -> Iterator[ProducerLease[P]]:
        """``acquire`` + ``release``; an exception in the body releases with ``failed=True``."""
        held = self.acquire(key, config, reattempt=reattempt)
        failed = True
        try:
            yield held
            failed = False
        finally:
            self.release(held, failed=failed)

    def invalidate(self, key: ProducerKey) -> None:
        """Close ``key``'s idle producers; those in use are closed at their release."""
        with self._lock:
            doomed = self._invalidate_locked(key)
        self._close_quietly(doomed)

    def evict_idle(self) -> None:
        """Close producers idle for longer than ``idle_timeout_s``."""
        with self._lock:
            doomed = self._expired_locked()
        self._close_quietly(doomed)

    def close_all(self) -> None:
        """Close every idle producer; producers in use are closed at their release."""
        with self._lock:
            doomed = [producer for _, producer, _ in self._idle]
            self._idle.clear()
            for key in set(self._in_use) | set(self._generation):
                self._generation[key] = self._generation.get(key, 0) + 1
            self._reaper.wake()
        self._close_quietly(doomed)

    def stats(self) -> PoolStats:
        with self._lock:
            in_use = sum(self._in_use.values())
            return PoolStats(self._hits, self._creations, self._closes, len(self._idle), in_use)

    # The *_locked helpers run under the lock and return producers to close after unlocking:
    # closing flushes and joins librdkafka's threads, which must not block other tasks.

    def _invalidate_locked(self, key: ProducerKey) -> list[P]:
        self._generation[key] = self._generation.get(key, 0) + 1
        doomed = [producer for k, producer, _ in self._idle if k == key]
        self._idle = [entry for entry in self._idle if entry[0] != key]
        return doomed

    def _expired_locked(self) -> list[P]:
        deadline = self._clock() - self._idle_timeout_s
        doomed = [producer for _, producer, released in self._idle if released < deadline]
        if doomed:
            self._idle = [entry for entry in self._idle if entry[2] >= deadline]
        return doomed

    def _over_capacity_locked(self) -> list[P]:
        excess = len(self._idle) - self._capacity
        if excess <= 0:
            return []
        doomed = [producer for _, producer, _ in self._idle[:excess]]
        del self._idle[:excess]
        return doomed

    def _close_quietly(self, producers: list[P]) -> None:
        if not producers:
            return
        with self._lock:
            self._closes += len(producers)
        for producer in producers:
            try:
                producer.close()
            # A failing close must not fail a task: its records were already delivered or not.
            except Exception as exc:  # noqa: BLE001
                log.warning("Closing a pooled Kafka producer failed, ignored: %r", exc)

    def _next_due_locked(self) -> float | None:
        """When the oldest idle producer expires; None when none is idle (the reaper's cue)."""
        if not self._idle:
            return None
        return min(released for _, _, released in self._idle) + self._idle_timeout_s


_process_pool: ProcessLocal[ProducerPool[Any]] = ProcessLocal(lambda pool: pool.close_all())


def get_producer_pool(
    factory: Callable[[ProducerKey, Mapping[str, str]], P],
    idle_timeout_s: float | None = None,
    capacity: int | None = None,
) -> ProducerPool[P]:
    """The process-wide pool: the first call in a process creates it, later ones update limits."""
    pool: ProducerPool[P] = _process_pool.get(lambda: ProducerPool(factory))
    if idle_timeout_s is not None or capacity is not None:
        pool.configure(idle_timeout_s=idle_timeout_s, capacity=capacity)
    return pool
