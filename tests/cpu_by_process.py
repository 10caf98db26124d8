"""Where the suite's CPU goes, by kind of process: a sampler that runs beside a whole test run.

tests/cpu_accounting.py sums CPU per test, from each pytest worker's process tree, and misses
what leaves the tree (a SIGKILLed driver's JVM) and what runs between tests. This reads every
process of the machine once a second (``/proc/<pid>/stat``); when a process ends, the CPU it had
at its last reading is logged with its command line, so a process that lives under a second is
missed (the kernel's process accounting, ``accton``, counts those). Runs in its own process:

    python -m tests.cpu_by_process record /tmp/procs.jsonl &   # until SIGTERM or SIGINT
    bash .ci/run; kill %1
    python -m tests.cpu_by_process report /tmp/procs.jsonl

The report sums the CPU-seconds by kind (Spark drivers, Python workers, Kafka brokers, ...).
"""

from __future__ import annotations

import collections
import json
import os
import signal
import sys
import time
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")

#: (kind, what the command line holds); the first match names a process.
_KINDS = [
    ("Kafka brokers (JVM)", ("kafka.Kafka ",)),
    ("schema registry (JVM)", ("quarkus-run.jar",)),
    (
        "Spark standalone master, workers, executors (JVM)",
        ("deploy.master.Master", "deploy.worker.Worker", "CoarseGrainedExecutorBackend"),
    ),
    ("Spark drivers (JVM)", ("deploy.SparkSubmit", "spark-submit", "spark-class")),
    ("Spark's Python workers and daemons", ("pyspark.daemon", "kafka_direct.executor.daemon")),
    (
        "Spark's Python stream runners",
        ("python_streaming_source_runner", "python_streaming_sink_runner"),
    ),
    ("pytest (workers and main process)", ("exec(eval(sys.stdin", "pytest")),
    ("drivers and helpers the tests start (Python)", ("tests/integration/", "benchmarks/")),
    ("pip, mypy, ruff, docs", (" pip ", "-m pip", "mypy", "ruff", "mkdocs")),
]


def kind(command: str) -> str:
    for name, needles in _KINDS:
        if any(needle in command for needle in needles):
            return name
    if command.startswith("["):
        return "kernel threads"
    return "other: " + os.path.basename(command.split(" ", 1)[0])[:40]


def _read(pid: str) -> tuple[str, int] | None:
    """(start time, CPU ticks) of one process, or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[19], int(fields[11]) + int(fields[12])


def _command(pid: str) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def record(out: Path) -> None:
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(True))
    seen: dict[tuple[str, str], list] = {}  # (pid, start) -> [command, ticks, ticks at start]
    first = True
    with out.open("a", buffering=1) as log:

        def write(key: tuple[str, str], entry: list) -> None:
            command, ticks, base = entry
            # Classified here, on the whole command line: a JVM's names its main class after
            # a classpath of thousands of characters.
            line = [int(key[0]), (ticks - base) / _TICK, kind(command), command[:300]]
            log.write(json.dumps(line) + "\n")

        while not stop:
            alive = set()
            for pid in (p for p in os.listdir("/proc") if p.isdigit()):
                got = _read(pid)
                if got is None:
                    continue
                key = (pid, got[0])
                alive.add(key)
                if key in seen:
                    seen[key][1] = got[1]
                else:
                    # A command changes at exec (spark-submit becomes java): the first one
                    # seen names the process, and the kinds above match either.
                    command = _command(pid) or f"[{pid}]"
                    seen[key] = [command, got[1], got[1] if first else 0]
            for key in [k for k in seen if k not in alive]:
                write(key, seen.pop(key))
            first = False
            time.sleep(1)
        for key, entry in seen.items():
            write(key, entry)


def report(path: Path) -> None:
    cpu: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    for line in path.read_text().splitlines():
        _pid, seconds, name, _command = json.loads(line)
        cpu[name] += seconds
        count[name] += 1
    total = sum(cpu.values())
    print(f"  CPU-s      %  processes  kind  (all: {total:,.0f} CPU-s)")
    for name, seconds in cpu.most_common():
        print(f"{seconds:7,.0f}  {100 * seconds / total:5.1f}  {count[name]:9,d}  {name}")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("record", "report"):
        sys.exit(__doc__)
    (record if sys.argv[1] == "record" else report)(Path(sys.argv[2]))
