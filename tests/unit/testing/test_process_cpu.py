"""kafka_direct.testing.process_cpu: a process tree's CPU, its live children and its reaped
ones included."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from kafka_direct.testing.process_cpu import tree_cpu

BURN = "import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end: pass\n"


#: Run as a fresh process, so that its tree holds only the child it starts: a pytest worker's own
#: tree also holds the processes earlier tests left (a Spark JVM's Python workers, which Spark's
#: daemon reaps with SIGCHLD ignored), and when one of those exits its CPU leaves the tree; the
#: check once saw the tree 0.23 CPU-seconds lighter with a burning child in it.
LIVE_THEN_REAPED = f"""
import os, subprocess, sys, time
from kafka_direct.testing.process_cpu import tree_cpu
before = tree_cpu(os.getpid())
child = subprocess.Popen([sys.executable, "-c", {BURN + "time.sleep(30)"!r}])
try:
    deadline = time.monotonic() + 20
    while tree_cpu(child.pid) < 0.5 and time.monotonic() < deadline:
        time.sleep(0.05)
    live = tree_cpu(os.getpid()) - before
    assert live >= 0.5, ("live", live)  # the child, alive, below this process
finally:
    child.kill()
    child.wait()
reaped = tree_cpu(os.getpid()) - before
assert reaped >= 0.5, ("reaped", reaped)  # reaped: in this process's children's time
assert tree_cpu(child.pid) == 0.0  # a process that is gone has no tree
print("ok", live, reaped)
"""


def test_a_live_child_and_then_a_reaped_one_are_counted() -> None:
    done = subprocess.run(
        [sys.executable, "-c", LIVE_THEN_REAPED], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout.startswith("ok"), done.stdout + done.stderr


#: A process that starts a child which burns CPU and stays alive, and waits for it.
MIDDLE = (
    f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {BURN + 'time.sleep(30)'!r}])\n"
)


def test_a_live_grandchild_is_counted_in_its_grandparents_tree() -> None:
    middle = subprocess.Popen([sys.executable, "-c", MIDDLE])
    try:
        deadline = time.monotonic() + 20
        while tree_cpu(middle.pid) < 0.5 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert tree_cpu(middle.pid) >= 0.5
    finally:
        # The grandchild first (a kill of the middle process would orphan it), then the middle.
        for pid in [*_children(middle.pid), middle.pid]:
            os.kill(pid, 9)
        middle.wait()


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []
