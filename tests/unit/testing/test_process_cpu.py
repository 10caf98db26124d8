"""kafka_direct.testing.process_cpu: a process tree's CPU, its live children and its reaped
ones included."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from kafka_direct.testing.process_cpu import tree_cpu

BURN = "import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end: pass\n"


def test_a_live_child_and_then_a_reaped_one_are_counted() -> None:
    before = tree_cpu(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", BURN + "time.sleep(30)"])
    try:
        deadline = time.monotonic() + 20
        while tree_cpu(child.pid) < 0.5 and time.monotonic() < deadline:
            time.sleep(0.05)
        live = tree_cpu(os.getpid()) - before
        assert live >= 0.5, live  # the child, alive, below this process
    finally:
        child.kill()
        child.wait()
    assert tree_cpu(os.getpid()) - before >= 0.5  # reaped: in this process's children's time
    assert tree_cpu(child.pid) == 0.0  # a process that is gone has no tree


def test_another_tree_is_not_counted() -> None:
    before = tree_cpu(os.getpid())
    sibling = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import os\nif os.fork() == 0:\n{BURN.replace(chr(10), chr(10) + '    ')}",
        ]
    )
    sibling.wait()  # its grandchild, reparented to init once the child exits, burns elsewhere
    time.sleep(1.0)
    assert tree_cpu(os.getpid()) - before < 0.4
