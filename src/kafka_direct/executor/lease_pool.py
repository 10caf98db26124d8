"""A keyed pool of Kafka clients lent one holder at a time. Runs in Spark executors (Python
workers), under both wings: the consumer pool (:mod:`kafka_direct.consumer.pool`) and the
producer pool (:mod:`kafka_direct.producer.pool`).

Python workers are reused between tasks, so a client opened by one task (its connections, its
prefetched queue, its producer id) can serve the next task with the same key. The contract both
wings share, with the fixes for Spark's own caches:

- **Lent to one holder at a time.** A client is not safe for concurrent use, so a lent client
  is never handed to anyone else. :meth:`LeasePool.lease` is the context manager: its body
  raising releases with ``failed=True``, which closes the client instead of keeping it.
- **Never closed under its holder** (SPARK-21869): only idle clients expire, are evicted or
  closed. Invalidation (a key's, or :meth:`LeasePool.close_all`) closes idle clients now and
  marks lent ones, which their release then closes.
- **Idle expiry from the release**, after ``idle_timeout_s``, by a daemon thread
  (:class:`~kafka_direct.executor.idle_reaper.IdleReaper`, Spark's evictor thread) that runs
  only while something is idle: a worker whose query has stopped does not keep its clients for
  ever.
- **Capacity**: beyond ``capacity`` pooled clients the least recently used idle one is closed;
  lent ones cannot be, so the pool may overflow for a while (with a warning). Beyond
  ``idle_bytes`` held by idle clients (what each holds, as its policy estimates it: a
  consumer's prefetched records), the least recently used idle ones are closed too.
- **Adoption**, where the policy allows it: on a miss, an idle client pooled under another key
  that can serve this one (a packed task's consumer, re-assigned by its holder) is re-keyed
  and lent instead of a new client being made, so keys that rarely recur do not fill the pool
  with idle clients.
- **One pool per process** (:class:`WorkerPool`): a forked child drops its parent's pool and
  makes its own. Nothing is closed when a Spark worker ends: PySpark's daemon ends its forked
  workers with ``os._exit`` (or ``SIGKILL``), which runs no exit hooks. The operating system
  then closes their sockets; executors' consumers only assign, so they hold no group
  membership to leave, and a producer's records were flushed by the task that wrote them. A
  process that exits normally (a driver, a user's program, a test) closes its idle clients.

What differs between the wings is a :class:`Policy`: how many clients a key may pool, what a
second holder or a task reattempt gets, whether a client may still be handed out, what an idle
one holds, and which keys may adopt another key's client.

Closing happens outside the lock (a librdkafka close may flush, leave a group or join threads),
and a failing close is logged, never raised. The factory is injected, so no Kafka client is
imported here; keys name configurations by fingerprint, so logs never show a config value.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

from kafka_direct.errors import ConfigurationError
from kafka_direct.executor.idle_reaper import IdleReaper
from kafka_direct.executor.pool_policy import Closeable, Policy, PoolStats
from kafka_direct.executor.process_local import ProcessLocal

__all__ = ["Closeable", "Lease", "LeasePool", "Policy", "PoolStats", "WorkerPool"]

# A pool that stays over capacity would otherwise warn on every acquire.
_OVERFLOW_WARNING_INTERVAL_S = 60.0


K = TypeVar("K", bound=Hashable)
R = TypeVar("R", bound=Closeable)


@dataclass(eq=False)
class _Entry(Generic[K, R]):
    key: K
    client: R | None  # None only while the factory runs, outside the lock, with in_use set
    in_use: bool = True
    #: Invalidated while lent: its release closes it.
    doomed: bool = False
    last_used: float = 0.0
    #: What the client holds while idle (Policy.idle_bytes_of at its last release).
    idle_bytes: int = 0


@dataclass(eq=False)
class Lease(Generic[K, R]):
    """One holder's exclusive use of a client, until :meth:`LeasePool.release`."""

    client: R
    key: K
    #: Whether the client belongs to the pool (else it is closed at its release).
    cached: bool
    #: Whether the client served an earlier holder (a hit), rather than being created.
    reused: bool
    _entry: _Entry[K, R] | None = field(default=None, repr=False)
    _released: bool = field(default=False, repr=False)


class LeasePool(Generic[K, R]):
    """Thread-safe pool of clients by key, under a :class:`Policy`; see the module docstring."""

    def __init__(
        self,
        factory: Callable[[K, Mapping[str, str]], R],
        policy: Policy,
        *,
        capacity: int | None = None,
        idle_timeout_s: float | None = None,
        idle_bytes: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        reaper: bool = True,
    ) -> None:
        self._factory = factory
        self._policy = policy
        self._log = policy.log
        self._capacity, self._idle_timeout_s = policy.capacity, policy.idle_timeout_s
        #: The most bytes idle clients may hold together (None: no bound but the capacity).
        self._idle_bytes: int | None = None
        self._clock = clock
        self._lock = threading.Lock()
        self._reaper = IdleReaper(
            f"kafka-direct-{policy.noun}-reaper",
            self._lock,
            self._next_due_locked,
            self.evict_idle,
            clock,
            enabled=reaper,
        )
        # Order doubles as recency: an entry moves to the end when lent and when released.
        self._entries: OrderedDict[_Entry[K, R], None] = OrderedDict()
        self._hits = self._misses = self._creations = self._evictions = self._closes = 0
        self._adoptions = 0
        self._last_overflow_warning: float | None = None
        self.configure(capacity=capacity, idle_timeout_s=idle_timeout_s, idle_bytes=idle_bytes)

    def configure(
        self,
        *,
        capacity: int | None = None,
        idle_timeout_s: float | None = None,
        idle_bytes: int | None = None,
    ) -> None:
        """Change the limits; shrinking them closes idle clients right away."""
        capacity = self._capacity if capacity is None else capacity
        idle_timeout_s = self._idle_timeout_s if idle_timeout_s is None else idle_timeout_s
        noun = self._policy.noun
        if capacity < 1:
            raise ConfigurationError(f"{noun} pool capacity", capacity, "an integer >= 1")
        if idle_timeout_s <= 0:
            raise ConfigurationError(f"{noun} pool idle timeout", idle_timeout_s, "seconds > 0")
        if idle_bytes is not None and idle_bytes < 0:
            raise ConfigurationError(f"{noun} pool idle bytes", idle_bytes, "bytes >= 0")
        with self._lock:
            shorter = idle_timeout_s < self._idle_timeout_s
            self._capacity, self._idle_timeout_s = capacity, idle_timeout_s
            if idle_bytes is not None:
                self._idle_bytes = idle_bytes
            doomed = self._expired_locked() + self._make_room_locked(incoming=0)
            if shorter:  # idle clients may be due sooner; every task configures, most alike
                self._reaper.wake()
        self._close_quietly(doomed)

    def acquire(self, key: K, config: Mapping[str, str], *, reattempt: bool = False) -> Lease[K, R]:
        """Lend a client for ``key``, built from ``config`` if none can be reused.
        ``reattempt`` (a Spark task's retry) invalidates the key first (SPARK-27042)."""
        policy = self._policy
        reserved: _Entry[K, R] | None = None
        lease: Lease[K, R] | None = None
        with self._lock:
            doomed = self._expired_locked()
            if reattempt:
                doomed += self._invalidate_locked(key)
            if policy.one_per_key:
                entry = next((e for e in self._entries if e.key == key), None)
                if entry is not None and not entry.in_use and not reattempt:
                    lease = self._lend_locked(entry)
                    outcome = "hit"
                elif reattempt or entry is not None:
                    outcome = "miss (uncached)"
                else:
                    lease = self._adopt_locked(key)
                    outcome = "miss (new pooled)" if lease is None else "miss (adopted)"
            else:
                for entry in reversed(list(self._entries)):
                    if entry.key != key or entry.in_use:
                        continue
                    if policy.usable(entry.client):
                        lease = self._lend_locked(entry)
                        break
                    del self._entries[entry]  # turned unusable while idle: never lent again
                    doomed.append(cast(R, entry.client))
                if lease is not None:
                    outcome = "hit"
                else:
                    lease = None if reattempt else self._adopt_locked(key)
                    outcome = "miss (new pooled)" if lease is None else "miss (adopted)"
            if outcome != "hit":
                self._misses += 1
            if outcome == "miss (new pooled)":
                doomed += self._make_room_locked(incoming=1)
                # Reserved in use, so concurrent holders do not take it while it is built.
                reserved = _Entry(key, None)
                self._entries[reserved] = None
            hits, misses = self._hits, self._misses
        self._close_quietly(doomed)
        self._log.debug(
            "%s pool %s for %s%s (hits=%d, misses=%d)",
            policy.noun.capitalize(), outcome, key, " (reattempt)" * reattempt, hits, misses,
        )  # fmt: skip
        if lease is not None:
            return lease
        return self._create(key, config, reserved)

    def _lend_locked(self, entry: _Entry[K, R]) -> Lease[K, R]:
        entry.in_use = True
        self._entries.move_to_end(entry)
        self._hits += 1
        return Lease(cast(R, entry.client), entry.key, cached=True, reused=True, _entry=entry)

    def _adopt_locked(self, key: K) -> Lease[K, R] | None:
        """Re-key and lend the idle client of another key that serves ``key`` best (see
        :attr:`Policy.adopt`), or None."""
        policy = self._policy
        if policy.adopt is None:
            return None
        best: _Entry[K, R] | None = None
        best_score = -1
        candidates = 0
        # Least recently used first: a positive tie goes to the most recent, a tie at 0 (a key
        # that likely stopped recurring) to the least recent.
        for entry in self._entries:
            if entry.in_use or entry.key == key or not policy.usable(entry.client):
                continue
            score = policy.adopt(entry.key, key)
            if score is None:
                continue
            candidates += 1
            if score > best_score or (score == best_score and score > 0):
                best, best_score = entry, score
        if best is None or (best_score <= 0 and candidates < policy.adopt_unrelated_from):
            return None
        self._log.debug(
            "%s pool: %s adopts the idle %s of %s (%d in common)",
            policy.noun.capitalize(), key, policy.noun, best.key, best_score,
        )  # fmt: skip
        best.key = key
        best.in_use = True
        self._entries.move_to_end(best)
        self._adoptions += 1
        return Lease(cast(R, best.client), key, cached=True, reused=True, _entry=best)

    def _create(self, key: K, config: Mapping[str, str], entry: _Entry[K, R] | None) -> Lease[K, R]:
        try:
            client = self._factory(key, config)
        except BaseException:
            # Drop the reservation, so the next holder tries again instead of going uncached.
            with self._lock:
                if entry is not None:
                    self._entries.pop(entry, None)
            raise
        with self._lock:
            self._creations += 1
            if entry is not None:
                entry.client = client
        return Lease(client, key, cached=entry is not None, reused=False, _entry=entry)

    def release(self, lease: Lease[K, R], *, failed: bool = False) -> None:
        """Give ``lease`` back. It is closed instead when ``failed`` (its holder's work raised),
        when it is uncached, invalidated while lent, or no longer usable."""
        doomed: list[R] = []
        with self._lock:
            if lease._released:
                return
            lease._released = True
            entry = lease._entry
            ours = entry if entry is not None and entry in self._entries else None
            if ours is not None and not failed and not ours.doomed and self._usable(lease):
                ours.in_use = False
                ours.last_used = self._clock()
                ours.idle_bytes = self._policy.idle_bytes_of(lease.client)
                self._entries.move_to_end(ours)
                self._reaper.start_locked()
            else:
                doomed.append(lease.client)
                if ours is not None:
                    del self._entries[ours]
                if failed and self._policy.one_per_key:
                    # The failure may come from the key's state: its cached client goes too.
                    doomed += self._invalidate_locked(lease.key)
            doomed += self._expired_locked() + self._make_room_locked(incoming=0)
        self._close_quietly(doomed)

    def _usable(self, lease: Lease[K, R]) -> bool:
        return self._policy.usable(lease.client)

    @contextmanager
    def lease(
        self, key: K, config: Mapping[str, str], *, reattempt: bool = False
    ) -> Iterator[Lease[K, R]]:
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

    def invalidate(self, key: K) -> None:
        """Close ``key``'s idle clients; those lent are closed at their release."""
        with self._lock:
            doomed = self._invalidate_locked(key)
        self._close_quietly(doomed)

    def evict_idle(self) -> None:
        """Close clients idle for longer than ``idle_timeout_s``."""
        with self._lock:
            doomed = self._expired_locked()
        self._close_quietly(doomed)

    def close_all(self) -> None:
        """Close every idle client; clients lent are closed at their release."""
        with self._lock:
            for entry in self._entries:
                entry.doomed = True
            doomed = self._pop_idle_locked(lambda e: True)
            self._reaper.wake()
        self._close_quietly(doomed)

    def stats(self) -> PoolStats:
        with self._lock:
            in_use = sum(1 for e in self._entries if e.in_use)
            counters = (self._hits, self._misses, self._creations, self._evictions, self._closes)
            return PoolStats(
                *counters, size=len(self._entries), in_use=in_use, adoptions=self._adoptions
            )

    def log_stats(self) -> None:
        self._log.info(
            "%s pool %s, capacity=%d", self._policy.noun.capitalize(), self.stats(), self._capacity
        )

    # The *_locked helpers run under self._lock and return clients to close after unlocking,
    # so a slow close never blocks other holders.

    def _pop_idle_locked(self, which: Callable[[_Entry[K, R]], bool]) -> list[R]:
        # Only a lent entry can still be under construction, so an idle one holds a client.
        gone = [e for e in self._entries if not e.in_use and which(e)]
        for entry in gone:
            del self._entries[entry]
        return [cast(R, e.client) for e in gone]

    def _invalidate_locked(self, key: K) -> list[R]:
        for entry in self._entries:
            if entry.key == key and entry.in_use:
                entry.doomed = True
        return self._pop_idle_locked(lambda e: e.key == key)

    def _expired_locked(self) -> list[R]:
        deadline = self._clock() - self._idle_timeout_s
        expired = self._pop_idle_locked(lambda e: e.last_used < deadline)
        self._evictions += len(expired)
        return expired

    def _next_due_locked(self) -> float | None:
        """When the least recently used idle client expires; None when none is idle."""
        idle = [e.last_used for e in self._entries if not e.in_use]
        return min(idle) + self._idle_timeout_s if idle else None

    def _make_room_locked(self, incoming: int) -> list[R]:
        evicted: list[R] = []
        if self._idle_bytes is not None:
            # Least recently used first, until what the idle clients hold fits.
            idle = [e for e in self._entries if not e.in_use]
            held = sum(e.idle_bytes for e in idle)
            for oldest in idle:
                if held <= self._idle_bytes:
                    break
                held -= oldest.idle_bytes
                del self._entries[oldest]
                evicted.append(cast(R, oldest.client))
                self._evictions += 1
        while len(self._entries) + incoming > self._capacity:
            lru = next((e for e in self._entries if not e.in_use), None)
            if lru is not None:
                del self._entries[lru]
                evicted.append(cast(R, lru.client))
                self._evictions += 1
                continue
            now, last = self._clock(), self._last_overflow_warning
            if last is None or now - last >= _OVERFLOW_WARNING_INTERVAL_S:
                self._last_overflow_warning = now
                self._log.warning(
                    "%s pool over capacity (%d pooled, capacity %d): every pooled %s is in "
                    "use, so none can be closed. Raise the capacity if this persists.",
                    self._policy.noun.capitalize(), len(self._entries) + incoming,
                    self._capacity, self._policy.noun,
                )  # fmt: skip
            break
        return evicted

    def _close_quietly(self, clients: list[R]) -> None:
        if not clients:
            return
        with self._lock:
            self._closes += len(clients)
        for client in clients:
            try:
                client.close()
            # A failing close must not fail a task: its work already succeeded or failed.
            except Exception as exc:  # noqa: BLE001
                self._log.warning(
                    "Closing a pooled Kafka %s failed, ignored: %r", self._policy.noun, exc
                )


class WorkerPool(Generic[K]):
    """A wing's pool for this process: made on first use, dropped in a forked child (whose
    librdkafka threads did not survive the fork). Its idle clients are closed when the process
    exits normally; a Spark worker does not (see the module docstring)."""

    def __init__(self, policy: Policy) -> None:
        self._policy = policy
        self.local: ProcessLocal[LeasePool[Any, Any]] = ProcessLocal(lambda p: p.close_all())

    def get(
        self,
        factory: Callable[[K, Mapping[str, str]], R],
        *,
        capacity: int | None = None,
        idle_timeout_s: float | None = None,
        idle_bytes: int | None = None,
    ) -> LeasePool[K, R]:
        """The process's pool: the first call creates it with ``factory``; later ones update
        the limits given."""
        pool = cast(LeasePool[K, R], self.local.get(lambda: LeasePool(factory, self._policy)))
        if capacity is not None or idle_timeout_s is not None or idle_bytes is not None:
            pool.configure(capacity=capacity, idle_timeout_s=idle_timeout_s, idle_bytes=idle_bytes)
        return pool
