"""What a run records: :class:`Results`, the machine it ran on, and the summary. Runs in the
benchmark process.

:func:`summarise` turns the rounds into medians and ratios to raw (per round, then the median)
and fills the correctness checks: every mode must read exactly the data set.
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
    checks: dict[str, bool] = field(default_factory=dict)
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
    from kafka_direct import native

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
        "versions": versions,
    }


def _median_durations(progress: list[dict[str, Any]]) -> dict[str, float]:
    """Spark's ``durationMs`` breakdown of micro-batches, the median of each part."""
    return {
        k: median([p["durationMs"].get(k, 0) for p in progress])
        for k in sorted({k for p in progress for k in p["durationMs"]})
    }


def summarise(results: Results, config: Config, expected_bytes: int) -> None:
    modes = MODES
    s: dict[str, Any] = {}
    for mode in modes:
        rounds = [r[mode] for r in results.rounds]
        s[mode] = {
            "rate": median([r["rate"] for r in rounds]),
            "wall_s": median([r["wall_s"] for r in rounds]),
            "task_rate": median([r["task_rate"] for r in rounds if r.get("task_rate")]),
            "cpu_us_per_record": median([r["cpu_us_per_record"] for r in rounds]),
            "cpu_s": {
                k: median([r["cpu_s"].get(k, 0.0) for r in rounds])
                for k in sorted({k for r in rounds for k in r["cpu_s"]})
            },
        }
        s[mode]["best_rate"] = max(r["rate"] for r in rounds)
        if mode.startswith("stream"):
            s[mode]["trigger_rate"] = median([r["trigger_rate"] for r in rounds])
    for mode in modes[1:]:
        # Ratios per round (raw and the mode ran back to back), then the median.
        s[mode]["ratio"] = median([r[mode]["rate"] / r["raw"]["rate"] for r in results.rounds])
        s[mode]["task_ratio"] = median(
            [
                r[mode]["task_rate"] / r["raw"]["task_rate"]
                for r in results.rounds
                if r[mode].get("task_rate")
            ]
        )
    for mode in modes[1:]:
        # CPU efficiency: raw's CPU per record over the mode's (the broker's share included).
        s[mode]["cpu_ratio"] = median(
            [r["raw"]["cpu_us_per_record"] / r[mode]["cpu_us_per_record"] for r in results.rounds]
        )
    for mode in ("stream", "stream_noop"):
        s[mode]["trigger_ratio"] = median(
            [r[mode]["trigger_rate"] / r["raw"]["rate"] for r in results.rounds]
        )
    many = results.many_batches
    if many:
        single_ms = median([r["stream"]["trigger_s"] * 1000.0 for r in results.rounds])
        data = [p for p in many["progress"] if p["numInputRows"]]
        n = many["micro_batches"]
        s["many_batches"] = {
            "rate": many["rate"],
            "ratio": many["rate"] / s["raw"]["rate"],
            "micro_batches": n,
            "ms_per_micro_batch": many["trigger_s"] * 1000.0 / n if n else None,
            # What a micro-batch costs beyond reading its records at the one-batch rate.
            "overhead_ms_per_micro_batch": (many["trigger_s"] * 1000.0 - single_ms) / (n - 1)
            if n > 1
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
    checks = {}
    for i, rnd in enumerate(results.rounds):
        for mode in modes:
            checks[f"round{i + 1}.{mode}.rows"] = rnd[mode]["rows"] == config.records
            if rnd[mode]["bytes"] is not None:  # the noop sink cannot count bytes
                checks[f"round{i + 1}.{mode}.bytes"] = rnd[mode]["bytes"] == expected_bytes
        # Each Kafka read took the path it was meant to (the task statistics say which).
        for mode in ("batch", "stream", "stream_noop"):
            tasks, fast = rnd[mode]["tasks"], rnd[mode]["fast_path_tasks"]
            checks[f"round{i + 1}.{mode}.fast_path"] = tasks > 0 and fast == tasks
        python_fast = rnd["batch_python"]["fast_path_tasks"]
        checks[f"round{i + 1}.batch_python.python_path"] = python_fast == 0
    if many:
        checks["many_batches.rows"] = many["rows"] == config.records
        checks["many_batches.bytes"] = many["bytes"] == expected_bytes
        checks["many_batches.is_many"] = many["micro_batches"] >= min(2, config.micro_batches)
    if results.many_floor:
        floor_batches = results.many_floor["micro_batches"]
        checks["many_floor.micro_batches"] = bool(many) and floor_batches == many["micro_batches"]
        checks["many_floor.no_error"] = results.many_floor.get("error") is None
    if results.fixed:
        checks["fixed.rows"] = results.fixed["rows_ok"]
    if results.memory:
        checks["memory.rows"] = results.memory["rows"] == config.records
    if results.latency:
        checks["latency.rows"] = results.latency["rows"] == results.latency["produced"]
    if results.planning:
        checks["planning.one_list_offsets_per_trigger"] = (
            results.planning["list_offsets_per_trigger"] == 1
        )
    results.checks = checks
