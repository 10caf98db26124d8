"""Small helpers every part of the benchmark uses: log lines, medians, percentiles. Runs in the
benchmark process.
"""

from __future__ import annotations

import statistics
import sys
import time


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
