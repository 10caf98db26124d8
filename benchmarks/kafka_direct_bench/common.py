"""Small helpers every part of the benchmark uses: log lines, medians, percentiles. Runs in the
benchmark process.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any


class BenchmarkError(RuntimeError):
    """A phase or mode of the run failed; the message names it."""


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values."""
    if not sorted_values:
        return float("nan")
    rank = max(1, min(len(sorted_values), round(q / 100.0 * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1]


def loadavg() -> str:
    """The 1, 5 and 15 minute load averages, as ``uptime`` prints them."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def finish_run(
    script: str,
    argv: list[str],
    load_before: str,
    report: Any,
    json_path: str | None,
    **parts: Any,
) -> int:
    """A run's record (date, command, load before and after, then ``parts``): printed by
    ``report`` and written to ``json_path`` when given. Returns the exit status."""
    results = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "command": f"python benchmarks/{script} " + " ".join(argv),
        "load_before": load_before,
        "load_after": loadavg(),
        **parts,
    }
    report(results)
    if json_path:
        Path(json_path).write_text(json.dumps(results, indent=2))
    return 0


def run_on_kafka(script: str, argv: list[str], args: Any, run: Any, report: Any) -> int:
    """``run(args, bootstrap)`` on ``args.bootstrap_servers``, else on a ``KafkaCluster`` started
    for the run, then :func:`finish_run` with its results (``args.json``: where to write them)."""
    before = loadavg()
    if args.bootstrap_servers:
        results = run(args, args.bootstrap_servers)
    else:
        from kafka_direct.testing import KafkaCluster

        with KafkaCluster() as cluster:
            results = run(args, cluster.bootstrap_servers)
    return finish_run(script, argv, before, report, args.json, **results)


def run_header(results: dict[str, Any]) -> str:
    """A report's first line: the command, its date and the load before and after."""
    return (
        f"\n{results['command']}  ({results['date']}; load {results['load_before']} -> "
        f"{results['load_after']})"
    )
