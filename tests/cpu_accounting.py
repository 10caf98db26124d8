"""Where the suite's CPU goes: a pytest plugin, on when ``KAFKA_DIRECT_TEST_CPU_LOG`` names a file.

Runs in each pytest process (every xdist worker). Around each test (setup, call and teardown) it
reads the CPU time of this process and of every process below it: the Spark JVM it started, that
JVM's Python workers, the driver subprocesses a test starts and kills, the brokers of the session.
A process that ends is counted in its parent once reaped; one that outlives its parent leaves
the tree (the JVM of a driver that a test SIGKILLs is reparented to init), so the SIGKILL tests
are under-counted. Wall time in a parallel run says how long a test waited for the machine; this
says how much of the machine it used. Each test appends one JSON line to ``<file>.<worker>``;
``python -m tests.cpu_accounting <file>`` sums them by file.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from kafka_direct.testing.process_cpu import tree_cpu

ENV = "KAFKA_DIRECT_TEST_CPU_LOG"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, Any, None]:
    log = os.environ.get(ENV)
    if not log:
        yield
        return
    cpu0, wall0 = tree_cpu(os.getpid()), time.monotonic()
    yield
    cpu, wall = tree_cpu(os.getpid()) - cpu0, time.monotonic() - wall0
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    line = {"test": item.nodeid, "cpu": round(cpu, 2), "wall": round(wall, 2)}
    with open(f"{log}.{worker}", "a") as out:
        out.write(json.dumps(line) + "\n")


def main(argv: list[str]) -> None:
    """Print each test file's CPU and wall seconds from the logs of one run, most CPU first."""
    base = Path(argv[0])
    cpu: dict[str, float] = collections.Counter()
    wall: dict[str, float] = collections.Counter()
    tests: dict[str, int] = collections.Counter()
    for log in sorted(base.parent.glob(base.name + ".*")):
        for text in log.read_text().splitlines():
            line = json.loads(text)
            name = line["test"].split("::")[0]
            cpu[name] += line["cpu"]
            wall[name] += line["wall"]
            tests[name] += 1
    total = sum(cpu.values())
    sys.stdout.write(f"{'CPU-s':>8} {'wall-s':>8} {'tests':>5}  file  (all: {total:,.0f} CPU-s)\n")
    for name, seconds in sorted(cpu.items(), key=lambda kv: -kv[1]):
        sys.stdout.write(f"{seconds:8.0f} {wall[name]:8.0f} {tests[name]:5d}  {name}\n")


if __name__ == "__main__":
    main(sys.argv[1:])
