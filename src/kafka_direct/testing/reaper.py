"""Kill a test kit's broker process groups when the process that started them dies, however it
dies. Runs in the user's (or the test suite's) process, and starts one small reaper process.

Linux's ``PR_SET_PDEATHSIG`` cannot do this: it follows the *thread* that forked the child, so a
broker started from a helper thread (a fixture helper, a notebook's background thread, a timeout
wrapper) was SIGKILLed when that thread ended. Forking every broker from one long-lived thread
instead was tried and reverted: with a SparkSession running, a broker forked from another thread
made the next ``format("kafka_direct")`` write fail with DATA_SOURCE_NOT_FOUND.

So the owner forks brokers from whichever thread it likes, without ``preexec_fn``, and tells a
reaper process about each process group. The reaper reads its stdin, a pipe whose write end only
the owning process holds (Python makes it close-on-exec, and ``subprocess`` closes it in every
child it starts). When the owner dies, in any thread and even by SIGKILL, the kernel closes that
end; the reaper reads end-of-file and SIGKILLs every group it still knows. A normal exit closes
the pipe too, after ``atexit`` has stopped the clusters, and the reaper then finds nothing to do.

One reaper serves the whole process (started on first use, again after a fork). A child made by
a plain ``os.fork`` (multiprocessing's "fork" start method) inherits the write end, so the reaper
then waits for that child too: the brokers still die, only later.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

__all__ = ["forget", "reaper_pid", "watch"]

# The reaper's program: `add PGID` / `remove PGID` lines until end-of-file, then SIGKILL.
# Its own session, and SIGINT ignored, so a Ctrl-C in the owner's terminal does not end it before
# the owner has stopped the brokers in order.
_REAPER = """\
import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
groups = set()
for line in sys.stdin:
    verb, _, pgid = line.partition(" ")
    if verb == "add":
        groups.add(int(pgid))
    elif verb == "remove":
        groups.discard(int(pgid))
for pgid in groups:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
"""


class _Reaper:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[str] | None = None
        self._owner = 0
        self._groups: set[int] = set()

    def _send(self, line: str) -> None:
        """Write one line to a live reaper, starting (or restarting) it first if needed."""
        if self._owner != os.getpid():
            # A forked child: the parent's reaper and groups are the parent's.
            self._process, self._owner, self._groups = None, os.getpid(), set()
        for _ in range(2):
            if self._process is None or self._process.poll() is not None:
                self._start()
            assert self._process is not None and self._process.stdin is not None
            try:
                self._process.stdin.write(line)
                self._process.stdin.flush()
                return
            except (BrokenPipeError, OSError):
                self._process = None  # it died (someone killed it): start another, re-tell it
        raise OSError("the kafka_direct broker reaper process could not be started")

    def _start(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _REAPER],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        assert self._process.stdin is not None
        self._process.stdin.write("".join(f"add {g}\n" for g in sorted(self._groups)))
        self._process.stdin.flush()

    def watch(self, pgid: int) -> None:
        with self._lock:
            self._groups.add(pgid)
            self._send(f"add {pgid}\n")

    def forget(self, pgid: int) -> None:
        with self._lock:
            if pgid in self._groups and self._owner == os.getpid():
                self._groups.discard(pgid)
                self._send(f"remove {pgid}\n")

    def pid(self) -> int | None:
        with self._lock:
            live = self._process is not None and self._process.poll() is None
            return self._process.pid if live and self._process is not None else None


_reaper = _Reaper()


def watch(pgid: int) -> None:
    """SIGKILL process group ``pgid`` when this process dies, unless :func:`forget` came first."""
    _reaper.watch(pgid)


def forget(pgid: int) -> None:
    """The owner has ended group ``pgid`` itself: never signal it (its id may be reused)."""
    _reaper.forget(pgid)


def reaper_pid() -> int | None:
    """The reaper process's pid, if one runs (for tests)."""
    return _reaper.pid()
