"""CPU seconds and RSS per process, read from ``/proc``. Runs in the benchmark process (the
RSS sampler in a thread of it).

:func:`process_cpu_s` reads one process's CPU seconds; :func:`cpu_snapshot` and
:func:`cpu_used` attribute the CPU used by this process and every
descendant to a role: the broker, the JVM, Spark's Python workers, the raw children (readers
and writers), this driver.
:class:`RssSampler` samples the RSS of Spark's Python workers (:func:`python_worker_pids`).
Linux only.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                kids.setdefault(ppid, []).append(int(entry))
    return kids


#: The modules Spark's Python daemons run: Spark's own, and kafka_direct's for the task workers
#: (``spark.python.daemon.module``, which ``local_spark`` sets).
DAEMON_MODULES = (b"pyspark.daemon", b"kafka_direct.executor.daemon")


def _is_daemon(cmd: bytes) -> bool:
    args = cmd.split(b"\0")
    return any(args[i] == b"-m" and args[i + 1] in DAEMON_MODULES for i in range(len(args) - 1))


def python_worker_pids() -> list[int]:
    """Spark's Python workers under this driver: the children of its Python daemons."""
    kids = _children()
    stack, daemons = [os.getpid()], []
    while stack:
        pid = stack.pop()
        for child in kids.get(pid, []):
            with contextlib.suppress(OSError):
                cmd = Path(f"/proc/{child}/cmdline").read_bytes()
                if _is_daemon(cmd) and not _is_daemon(Path(f"/proc/{pid}/cmdline").read_bytes()):
                    daemons.append(child)
                    continue
            stack.append(child)
    return [w for d in daemons for w in kids.get(d, [])]


def rss_mb(pid: int, field: str = "VmRSS") -> float | None:
    """A process's resident memory in MB: all of it (``VmRSS``), or only its anonymous pages
    (``RssAnon``: the heap, what it holds of data, without the code and files it maps)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    return None


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_group(pid: int, cmd: bytes) -> str:
    if pid == os.getpid():
        return "driver"
    if b"tansu" in cmd:
        return "broker"
    if b"java" in cmd.split(b"\0", 1)[0]:
        return "jvm"
    if b"pyspark" in cmd:
        return "python_workers"
    if b"multiprocessing" in cmd:
        return "raw_children"
    return "other"


Snapshot = dict[int, tuple[str, float, float]]


def _stat_cpu_s(pid: int) -> tuple[float, float]:
    """Process ``pid``'s own CPU seconds (user + system) and those of its reaped children."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    own = (int(fields[11]) + int(fields[12])) / _TICKS
    reaped = (int(fields[13]) + int(fields[14])) / _TICKS
    return own, reaped


def process_cpu_s(pid: int | None) -> float | None:
    """User + system CPU seconds of process ``pid`` so far (None: no such process here)."""
    if pid is None:
        return None
    try:
        return _stat_cpu_s(pid)[0]
    except (OSError, IndexError, ValueError):
        return None


def cpu_snapshot() -> Snapshot:
    """Per process (this one and every descendant): its role (the broker, the JVM, Spark's
    Python workers, the raw children, this driver), its own CPU seconds (user + system), and the
    CPU seconds of its children that have exited and been reaped."""
    kids = _children()
    out: Snapshot = {}
    stack = [os.getpid()]
    while stack:
        pid = stack.pop()
        stack.extend(kids.get(pid, []))
        with contextlib.suppress(OSError, IndexError, ValueError):
            own, reaped = _stat_cpu_s(pid)
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            out[pid] = (_cpu_group(pid, cmd) if cmd else "exited", own, reaped)
    return out


def cpu_used(before: Snapshot, rows: int) -> dict[str, Any]:
    """CPU used since ``before``, by role.

    Spark starts short-lived Python processes (a streaming query's source runner on the driver
    lives as long as the query). Once reaped, their CPU shows up only in their parent's count of
    reaped children; it is reported as ``short_lived``, minus what they had used before the
    window, so it is neither lost nor counted twice.
    """
    after = cpu_snapshot()
    by_role: Counter[str] = Counter()
    for pid, (role, own, reaped) in after.items():
        # A process that started and exited in the window (a zombie now) was short-lived too.
        old_role, old_own, old_reaped = before.get(pid, ("short_lived", 0.0, 0.0))
        by_role[old_role if role == "exited" else role] += own - old_own
        by_role["short_lived"] += reaped - old_reaped
    for pid, (_role, own, reaped) in before.items():
        if pid not in after:  # reaped meanwhile: its parent's count includes what it had used
            by_role["short_lived"] -= own + reaped
    total = sum(v for v in by_role.values() if v > 0)
    return {
        "cpu_s": {k: round(v, 3) for k, v in by_role.items() if abs(v) >= 0.005},
        "cpu_total_s": total,
        # None when nothing was read (the rows check fails), and when the processes used less
        # than /proc counts: it counts whole clock ticks (10 ms) per process, and a small read
        # (--quick, with the broker not a child of this process) can use less than one tick in
        # every process. Zero is "too little to measure", never a figure to divide by.
        "cpu_us_per_record": total / rows * 1e6 if rows and total > 0 else None,
    }


class RssSampler:
    """Samples the RSS of every Python worker every ``interval_s`` in a thread."""

    def __init__(self, interval_s: float = 0.05) -> None:
        self.interval_s = interval_s
        self.samples: list[tuple[float, int, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        pids: list[int] = []
        refreshed = 0.0
        while not self._stop.is_set():
            now = time.time()
            if now - refreshed > 0.5:
                pids, refreshed = python_worker_pids(), now
            for pid in pids:
                rss = rss_mb(pid)
                if rss is not None:
                    self.samples.append((now, pid, rss))
            self._stop.wait(self.interval_s)
