"""One value per process, created on first use, dropped in a forked child, closed when the
process exits normally.

Plain library: the lease pool (:mod:`~kafka_direct.executor.lease_pool`) uses it for each
wing's pool, and those run in Spark's Python workers (executors), which the PySpark daemon forks
from one parent.

The close at exit is an ``atexit`` hook, so it runs only where Python exits normally: a driver,
a user's program, a test. PySpark's daemon ends its forked workers with ``os._exit`` (after
their last task, or when one fails), ``SIGKILL`` (a worker Spark no longer wants) or
``SIGHUP`` (the daemon shutting down), none of which runs exit hooks. There the operating
system closes the clients' sockets; what the pools hold needs nothing more: executors'
consumers only assign partitions, so there is no group membership to leave, and every write
task flushes its producer before it ends.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class ProcessLocal(Generic[T]):
    """A lazily created value that belongs to the process that created it.

    A forked child inherits the parent's value, but librdkafka's threads did not survive the fork
    and the sockets are the parent's, so the child drops it (never closes it) and makes its own.
    At a normal exit, only the value this process created is closed (a Spark worker's exit is
    not normal: see the module docstring).
    """

    def __init__(self, close: Callable[[T], None]) -> None:
        self._close = close
        self._lock = threading.Lock()
        self._value: T | None = None
        self._pid: int | None = None
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self.reset)
        atexit.register(self.close_at_exit)

    def get(self, create: Callable[[], T]) -> T:
        """This process's value, made with ``create`` if there is none yet."""
        with self._lock:
            if self._value is None or self._pid != os.getpid():
                self._value, self._pid = create(), os.getpid()
            return self._value

    def reset(self) -> None:
        """Forget the value without closing it (a forked child, or a test)."""
        # Another thread may have held the lock at fork time; in the child it would never be
        # released, so the child gets a new one.
        self._lock = threading.Lock()
        self._value, self._pid = None, None

    def close_at_exit(self) -> None:
        """The ``atexit`` hook: close this process's value, if it made one."""
        if self._value is not None and self._pid == os.getpid():
            self._close(self._value)
