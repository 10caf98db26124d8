"""A daemon thread that closes a pool's idle clients on time. Runs in Spark executors (Python
workers), for the lease pool (:mod:`~kafka_direct.executor.lease_pool`) of both wings.

A Python worker waits between tasks, often for minutes, and one that gets no more tasks (its
query stopped) waits until Spark ends it. Expiry checked only when a task acquires would keep
every idle Kafka client of such a worker alive: its threads, its connections, and its reconnect
attempts to a cluster that may be gone. Spark's consumer cache has an evictor thread for the
same reason (``spark.kafka.consumer.cache.evictorThreadRunInterval``).

The thread runs only while the pool holds something idle: it sleeps until the oldest idle
client is due (at most a minute, so a shortened timeout takes effect), evicts, and exits when
nothing is left idle. It holds no client itself; the pool's own ``evict_idle`` closes them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["IdleReaper"]

#: The longest sleep between checks, so that a timeout shortened meanwhile is noticed.
_MAX_SLEEP_S = 60.0
#: Past the due time, so the check does not run a hair early and sleep again.
_SLACK_S = 0.05


class IdleReaper:
    """Calls ``evict()`` when ``next_due()`` (a ``clock()`` time, or None when nothing is idle)
    comes, from a daemon thread started by :meth:`start_locked`.

    ``lock`` is the pool's lock: ``next_due`` is read under it, ``evict`` takes it itself.
    """

    def __init__(
        self,
        name: str,
        lock: threading.Lock,
        next_due: Callable[[], float | None],
        evict: Callable[[], None],
        clock: Callable[[], float],
        *,
        enabled: bool = True,
    ) -> None:
        self._name = name
        self._lock = lock
        self._next_due = next_due
        self._evict = evict
        self._clock = clock
        self._enabled = enabled
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start_locked(self) -> None:
        """Something became idle (the caller holds the pool's lock): make sure the thread runs."""
        if not self._enabled or (self._thread is not None and self._thread.is_alive()):
            return
        self._wake.clear()
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Check now (the pool was emptied or its timeout shortened) instead of at the due time."""
        self._wake.set()

    def _run(self) -> None:
        while True:
            with self._lock:
                due = self._next_due()
                if due is None:
                    self._thread = None
                    return
                wait = max(due - self._clock(), 0.0) + _SLACK_S
            if self._wake.wait(min(wait, _MAX_SLEEP_S)):
                self._wake.clear()
            self._evict()
