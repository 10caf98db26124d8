"""CPU time of a process tree, read from ``/proc`` (Linux). Plain library: the process that
calls it (the test suite's CPU log, tests/cpu_accounting.py; benchmarks that measure CPU).

A process that ends is counted in its parent once reaped, so a tree's sum stays whole; one that
outlives its parent (reparented to init) leaves the tree with the CPU it used.
"""

from __future__ import annotations

import collections
import os
from pathlib import Path

__all__ = ["tree_cpu"]

_TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: str) -> tuple[int, float] | None:
    """(parent pid, CPU seconds of the process and of its reaped children)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    fields = text[text.rindex(")") + 2 :].split()
    ppid = int(fields[1])
    utime, stime, cutime, cstime = (int(f) for f in fields[11:15])
    return ppid, (utime + stime + cutime + cstime) / _TICKS


def tree_cpu(root: int) -> float:
    """CPU seconds used so far by ``root`` and every live process below it."""
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(entry)
            if stat is not None:
                stats[int(entry)] = stat
    children: dict[int, list[int]] = collections.defaultdict(list)
    for pid, (ppid, _) in stats.items():
        children[ppid].append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            total += stats[pid][1]
        todo.extend(children.get(pid, ()))
    return total
