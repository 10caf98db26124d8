#!/usr/bin/env python
"""Time from ``kafka-direct wordcount``'s start to its first micro-batch with words, on each
broker the command can start itself (one Apache Kafka node, the default; Tansu), and on a
running cluster when one is given.

    python benchmarks/wordcount_first_batch.py [HOST:PORT]

Runs in the benchmark process: the CLI runs as a child process, and each line it prints is
timestamped; one JSON line per broker.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time


def run(label: str, extra: list[str]) -> dict[str, object]:
    began = time.monotonic()
    child = subprocess.Popen(
        ["kafka-direct", "wordcount", "--seconds", "10", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert child.stdout is not None
    first = started = None
    last = ""
    for line in child.stdout:
        now = time.monotonic() - began
        last = line.strip()[:80]
        if started is None and line.startswith("Counting words"):
            started = now
        words = re.match(r"Batch \d+: (\d+) words", line)
        if first is None and words and int(words.group(1)) > 0:
            first = now
    child.wait()
    return {
        "broker": label,
        "query_started_s": None if started is None else round(started, 1),
        "first_batch_with_words_s": None if first is None else round(first, 1),
        "total_s": round(time.monotonic() - began, 1),
        "exit": child.returncode,
        "last_line": last,
    }


def main() -> int:
    results = [
        run("Apache Kafka (one node, started by the command)", ["--broker", "kafka"]),
        run("tansu (embedded, started by the command)", ["--broker", "tansu"]),
    ]
    if len(sys.argv) > 1:
        results.append(run("a running cluster", ["--bootstrap-servers", sys.argv[1]]))
    for result in results:
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
