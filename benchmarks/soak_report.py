"""The real-Kafka soak's tables and verdict, from its results. Runs in the soak's own process.

Prints every fault with its recovery per pipeline, a summary by kind (injected, recovered,
median / longest recovery), and one row per output: read, distinct, lost, duplicated, never
produced. Returns the exit status.
"""

from __future__ import annotations

import statistics
import sys
from typing import Any

from soak_check import PIPES
from soak_faults import KINDS


def _table(rows: list[list[str]], header_rows: int = 1, left: int = 1) -> None:
    """A text table; the first ``left`` columns are left-justified, the others right."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    line = "+-" + "-+-".join("-" * w for w in widths) + "-+"
    print(line)
    for i, row in enumerate(rows):
        cells = [
            c.ljust(w) if i < left else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        print("| " + " | ".join(cells) + " |")
        if i == header_rows - 1:
            print(line)
    print(line)


def _seconds(value: float | None) -> str:
    return "NOT" if value is None else f"{value:.1f}"


def _slowest(fault: dict[str, Any]) -> float | None:
    times = list(fault["recovered_s"].values())
    return None if any(t is None for t in times) else max(times)


def report(results: dict[str, Any]) -> int:
    faults = results["faults"]
    print(
        f"Soak: {results['seconds']:.0f} s ({results['faulted_s']:.0f} s of faults), "
        f"Kafka {results['kafka']} x {results['brokers']} brokers, seed {results['seed']}, "
        f"{results['driver_runs']} driver runs"
    )
    rows = [["#", "fault", "what", *[f"{p} (s)" for p in PIPES]]]
    for n, f in enumerate(faults, 1):
        times = [_seconds(f["recovered_s"][p]) for p in PIPES]
        rows.append([str(n), f["kind"], f["detail"], *times])
    _table(rows, left=3)
    rows = [["fault", "injected", "recovered", "median / longest recovery"]]
    for kind, label in KINDS.items():
        of_kind = [f for f in faults if f["kind"] == kind]
        times = [t for t in map(_slowest, of_kind) if t is not None]
        rows.append([label, str(len(of_kind)), str(len(times)), _median_max(times)])
    _table(rows)
    rows = [["output (read_committed)", "read", "distinct", "lost", "duplicated", "unknown"]]
    checks = results["checks"]
    for pipe in PIPES:
        c = checks[pipe]
        cells = [c["read"], c["distinct"], c["lost"], c["duplicated"], c["unknown"]]
        rows.append([pipe, *map(str, cells)])
    print(f"records produced (acknowledged): {results['produced']}")
    _table(rows)
    problems = []
    for pipe in PIPES:
        c = checks[pipe]
        problems += [f"{pipe}: {note}" for note in c["notes"]]
        if c["lost"] or c["unknown"]:
            problems.append(f"{pipe}: {c['lost']} lost, {c['unknown']} never produced")
        if c["duplicated"] and pipe != "alo":
            problems.append(f"{pipe}: {c['duplicated']} duplicated")
    if checks["alo"]["duplicated"]:
        print(f"at-least-once: {checks['alo']['duplicated']} duplicates (allowed)")
    if any(f["detail"].startswith("NOT INJECTED") for f in faults):
        problems.append("a fault could not be injected")
    if any(_slowest(f) is None for f in faults):
        problems.append("a fault was not recovered from by every pipeline")
    if not all(results["caught_up"].values()):
        problems.append(f"did not catch up: {results['caught_up']}")
    if results["producer_failures"]:
        problems.append(f"producer failures: {results['producer_failures']}")
    for death in results["deaths"]:
        problems.append(f"a pipeline died by itself: {death}")
    for problem in problems:
        print(f"FAILED: {problem}", file=sys.stderr)
    return 1 if problems else 0


def _median_max(times: list[float]) -> str:
    if not times:
        return "-"
    return f"{statistics.median(times):.1f} s / {max(times):.1f} s"
