"""What a run records: :class:`Results`, the machine it ran on, and the summary. Runs in the
benchmark process.

:func:`summarise` turns the rounds into medians and ratios to raw (per round, then the median)
and fills the correctness checks: every mode must read exactly the data set (and every write
mode write it: :mod:`~kafka_direct_bench.write_summary`).
"""

from __future__ import annotations

import contextlib
import os
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafka_direct_bench.common import median
from kafka_direct_bench.config import MODES, Config
from kafka_direct_bench.write_summary import summarise_writes


@dataclass
class Results:
    config: dict[str, Any]
    command: str
    machine: dict[str, Any]
    dataset: dict[str, Any] = field(default_factory=dict)
    rounds: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    fixed: dict[str, Any] = field(default_factory=dict)
    many_batches: dict[str, Any] = field(default_factory=dict)
    #: The same micro-batches from the no-Kafka source (Spark's cost per micro-batch).
    many_floor: dict[str, Any] = field(default_factory=dict)
    latency: dict[str, Any] = field(default_factory=dict)
    memory: dict[str, Any] = field(default_factory=dict)
    pool: dict[str, Any] = field(default_factory=dict)
    planning: dict[str, Any] = field(default_factory=dict)
    #: The write rounds, their memory run and summary (kafka_direct_bench.writes, write_summary).
    writes: dict[str, Any] = field(default_factory=dict)
    checks: dict[str, bool] = field(default_factory=dict)
    #: Why each failed check failed, by check name: the mode and what went wrong.
    failures: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0


def machine_info() -> dict[str, Any]:
    cpu = platform.processor() or ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_gb = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        first = Path("/proc/meminfo").read_text().splitlines()[0]
        mem_gb = round(int(first.split()[1]) / 1024 / 1024, 1)
    versions: dict[str, str] = {"python": platform.python_version()}
    import confluent_kafka
    import pyarrow

    versions["confluent_kafka"] = str(confluent_kafka.__version__)
    versions["librdkafka"] = confluent_kafka.libversion()[0]
    versions["pyarrow"] = pyarrow.__version__
    with contextlib.suppress(ImportError):
        import pyspark

        versions["pyspark"] = pyspark.__version__
    from kafka_direct.consumer import native
    from kafka_direct.producer import native as write_native

    load = None
    with contextlib.suppress(OSError):
        load = os.getloadavg()[0]
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": mem_gb,
        "os": platform.platform(),
        "load_average_1m_at_start": load,
        # This interpreter's; Spark's Python workers run the same one (PYSPARK_PYTHON).
        "read_path": native.status(),
        "write_path": write_native.status(),
        "versions": versions,
    }


def _median_durations(progress: list[dict[str, Any]]) -> dict[str, float]:
    """Spark's ``durationMs`` breakdown of micro-batches, the median of each part."""
    return {
        k: median([p["durationMs"].get(k, 0) for p in progress])
        for k in sorted({k for p in progress for k in p["durationMs"]})
    }


def _median(values: list[Any]) -> float | None:
    """The median of the known values (None and NaN left out), or None if there is none."""
    known = [v for v in values if v is not None and v == v]
    return median(known) if known else None


def _ratio(num: float | None, den: float | None) -> float | None:
    """``num / den``, or None (shown as n/a) unless both were measured and are positive: a mode
    whose figure is missing or zero has no ratio."""
    if num is None or den is None or not num > 0 or not den > 0:
        return None
    return num / den


class _Checks:
    """The correctness checks, each with the reason it failed: the run's exit status and its
    report name the mode and what went wrong."""

    def __init__(self) -> None:
        self.passed: dict[str, bool] = {}
        self.failures: dict[str, str] = {}

    def add(self, name: str, ok: bool, why: str) -> None:
        self.passed[name] = bool(ok)
        if not ok:
            self.failures[name] = why


def _checks(results: Results, config: Config, expected_bytes: int) -> _Checks:
    checks = _Checks()
    records = f"{config.records:,}"
    for i, rnd in enumerate(results.rounds):
        for mode in MODES:
            name, got = f"round{i + 1}.{mode}", rnd[mode]
            checks.add(
                f"{name}.rows",
                got["rows"] == config.records,
                f"mode {mode!r} read {got['rows']:,} of the data set's {records} records",
            )
            if got["bytes"] is not None:  # the noop sink cannot count bytes
                checks.add(
                    f"{name}.bytes",
                    got["bytes"] == expected_bytes,
                    f"mode {mode!r} read {got['bytes']:,} value bytes, not {expected_bytes:,}",
                )
        # Each Kafka read took the path it was meant to (the task statistics say which).
        for mode in ("batch", "stream", "stream_noop"):
            tasks, fast = rnd[mode]["tasks"], rnd[mode]["fast_path_tasks"]
            checks.add(
                f"round{i + 1}.{mode}.fast_path",
                tasks > 0 and fast == tasks,
                f"mode {mode!r}: {fast} of {tasks} read task(s) took the C fast path "
                "(expected all, and at least one)",
            )
        python_fast = rnd["batch_python"]["fast_path_tasks"]
        checks.add(
            f"round{i + 1}.batch_python.python_path",
            python_fast == 0,
            f"mode 'batch_python': {python_fast} read task(s) took the C fast path "
            "despite fastPath.enabled=false",
        )
    many = results.many_batches
    if many:
        checks.add(
            "many_batches.rows",
            many["rows"] == config.records,
            f"the maxOffsetsPerTrigger stream read {many['rows']:,} of {records} records",
        )
        checks.add(
            "many_batches.bytes",
            many["bytes"] == expected_bytes,
            f"the maxOffsetsPerTrigger stream read {many['bytes']:,} value bytes, "
            f"not {expected_bytes:,}",
        )
        checks.add(
            "many_batches.is_many",
            many["micro_batches"] >= min(2, config.micro_batches),
            f"maxOffsetsPerTrigger gave {many['micro_batches']} micro-batch(es)",
        )
    floor = results.many_floor
    if floor:
        expected = many["micro_batches"] if many else None
        checks.add(
            "many_floor.micro_batches",
            floor["micro_batches"] == expected,
            f"the floor stream ran {floor['micro_batches']} micro-batch(es) with data, "
            f"not {expected}",
        )
        checks.add(
            "many_floor.no_error",
            floor.get("error") is None,
            f"the floor stream failed: {floor.get('error')}",
        )
    if results.fixed:
        checks.add(
            "fixed.rows",
            results.fixed["rows_ok"],
            "a fixed-cost query did not read its one record per partition",
        )
    if results.memory:
        checks.add(
            "memory.rows",
            results.memory["rows"] == config.records,
            f"the memory run read {results.memory['rows']:,} of {records} records",
        )
    lat = results.latency
    if lat:
        checks.add(
            "latency.rows",
            lat["rows"] == lat["produced"],
            f"the latency query saw {lat['rows']:,} of the {lat['produced']:,} records produced",
        )
        checks.add(
            "latency.no_error",
            lat.get("error") is None,
            f"the latency query failed: {lat.get('error')}",
        )
    if results.planning:
        plan = results.planning
        n = plan["list_offsets_per_kind_per_trigger"]
        checks.add(
            "planning.one_list_offsets_per_kind_per_trigger",
            n == 1 and plan["partitions_per_list_offsets"] == plan["partitions"],
            f"the planner made up to {n} list_offsets request(s) of one kind in one trigger, for "
            f"up to {plan['partitions_per_list_offsets']} of {plan['partitions']} partitions "
            f"(the last: {', '.join(plan.get('list_offsets_of_last_trigger', [])) or 'none'})",
        )
    return checks


def summarise(results: Results, config: Config, expected_bytes: int) -> None:
    """The checks (first: a failed mode must be reported, whatever its figures), then the
    medians and ratios. A figure that was not measured is None, and so is every ratio to it."""
    checks = _checks(results, config, expected_bytes)
    summarise_writes(results.writes, config, checks.add)
    results.checks, results.failures = checks.passed, checks.failures
    rounds_ = results.rounds
    s: dict[str, Any] = {}
    for mode in MODES:
        rounds = [r[mode] for r in rounds_]
        s[mode] = {
            "rate": _median([r["rate"] for r in rounds]),
            "wall_s": _median([r["wall_s"] for r in rounds]),
            "task_rate": _median([r.get("task_rate") for r in rounds]),
            "cpu_us_per_record": _median([r["cpu_us_per_record"] for r in rounds]),
            "cpu_s": {
                k: median([r["cpu_s"].get(k, 0.0) for r in rounds])
                for k in sorted({k for r in rounds for k in r["cpu_s"]})
            },
            "best_rate": max((r["rate"] for r in rounds), default=None),
        }
        if mode.startswith("stream"):
            s[mode]["trigger_rate"] = _median([r["trigger_rate"] for r in rounds])
    for mode in MODES[1:]:
        # Ratios per round (raw and the mode ran back to back), then the median.
        s[mode]["ratio"] = _median([_ratio(r[mode]["rate"], r["raw"]["rate"]) for r in rounds_])
        s[mode]["task_ratio"] = _median(
            [_ratio(r[mode].get("task_rate"), r["raw"].get("task_rate")) for r in rounds_]
        )
        # CPU efficiency: raw's CPU per record over the mode's (the broker's share included).
        s[mode]["cpu_ratio"] = _median(
            [_ratio(r["raw"]["cpu_us_per_record"], r[mode]["cpu_us_per_record"]) for r in rounds_]
        )
        s[mode]["best_ratio"] = _ratio(s[mode]["best_rate"], s["raw"]["best_rate"])
    for mode in ("stream", "stream_noop"):
        s[mode]["trigger_ratio"] = _median(
            [_ratio(r[mode]["trigger_rate"], r["raw"]["rate"]) for r in rounds_]
        )
    many = results.many_batches
    if many:
        single_ms = _median([r["stream"]["trigger_s"] * 1000.0 for r in rounds_])
        data = [p for p in many["progress"] if p["numInputRows"]]
        n = many["micro_batches"]
        s["many_batches"] = {
            "rate": many["rate"],
            "ratio": _ratio(many["rate"], s["raw"]["rate"]),
            "micro_batches": n,
            "ms_per_micro_batch": many["trigger_s"] * 1000.0 / n if n else None,
            # What a micro-batch costs beyond reading its records at the one-batch rate.
            "overhead_ms_per_micro_batch": (many["trigger_s"] * 1000.0 - single_ms) / (n - 1)
            if n > 1 and single_ms is not None
            else None,
            # Spark's own breakdown of a micro-batch (median ms): latestOffset is our planning.
            "median_duration_ms": _median_durations(data),
        }
        floor = [p for p in results.many_floor.get("progress", []) if p["numInputRows"]]
        if floor:
            # Compared median to median: the micro-batches of both runs have the same size.
            durations = _median_durations(floor)
            s["many_batches"]["floor_median_duration_ms"] = durations
            s["many_batches"]["kafka_direct_ms_per_micro_batch_beyond_floor"] = s["many_batches"][
                "median_duration_ms"
            ].get("triggerExecution", 0.0) - durations.get("triggerExecution", 0.0)
    results.summary = s
