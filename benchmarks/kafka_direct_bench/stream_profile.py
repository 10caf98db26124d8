"""Where a streaming micro-batch's time goes, from Spark's event log and kafka_direct's task
statistics. Runs in the benchmark process, after the queries (``benchmarks/latency.py
--profile DIR``).

Spark's own ``durationMs`` splits a micro-batch into the source's calls (``latestOffset``), the
checkpoint writes (``walCommit``, ``commitOffsets``) and the sink's job (``addBatch``). The sink's
job is where the formats differ most, so this goes one level down, per query, with the same
figures for both formats:

- from the event log (``spark.eventLog.enabled``): each job's wall time (submission to
  completion), its tasks, and per task the scheduler's delay (launch to the executor's start of
  deserialisation), deserialisation, run time, and result time;
- for kafka_direct, from ``KAFKA_DIRECT_STATS_DIR``: the Python read of each task (from the
  reader's first call to its last batch) and what the consumer pool did (hits, misses, consumers
  created), and each task's Python worker, so re-use of a worker shows.
"""

from __future__ import annotations

import contextlib
import json
import statistics
from pathlib import Path
from typing import Any


def _events(log_dir: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted(log_dir.rglob("*")):
        if path.is_file() and not path.name.startswith("."):
            for line in path.read_text(errors="replace").splitlines():
                with contextlib.suppress(ValueError):
                    out.append(json.loads(line))
    return out


def _median(values: list[float]) -> float | None:
    return float(statistics.median(values)) if values else None


def job_profile(
    log_dir: Path, since_ms: float, until_ms: float, reads: dict[int, dict[str, Any]] | None = None
) -> dict[str, Any]:
    """Jobs submitted in ``[since_ms, until_ms]`` and their tasks, as medians. ``reads``:
    kafka_direct's read statistics by Spark task id (:func:`reads_by_task`), to split a task
    into the time before the Python read starts, the read, and the time after it."""
    jobs: dict[int, dict[str, Any]] = {}
    stage_job: dict[int, int] = {}
    tasks: list[dict[str, Any]] = []
    for ev in _events(log_dir):
        kind = ev.get("Event")
        if kind == "SparkListenerJobStart":
            t = ev["Submission Time"]
            if since_ms <= t <= until_ms:
                jobs[ev["Job ID"]] = {"start": t, "end": None, "tasks": 0}
                for sid in ev.get("Stage IDs", []):
                    stage_job[sid] = ev["Job ID"]
        elif kind == "SparkListenerJobEnd" and ev["Job ID"] in jobs:
            jobs[ev["Job ID"]]["end"] = ev["Completion Time"]
        elif kind == "SparkListenerTaskEnd" and ev.get("Stage ID") in stage_job:
            info, metrics = ev["Task Info"], ev.get("Task Metrics") or {}
            jobs[stage_job[ev["Stage ID"]]]["tasks"] += 1
            launch, finish = info["Launch Time"], info["Finish Time"]
            deser = metrics.get("Executor Deserialize Time", 0)
            run = metrics.get("Executor Run Time", 0)
            result = metrics.get("Result Serialization Time", 0) + info.get(
                "Getting Result Time", 0
            )
            task = {
                "duration": finish - launch,
                "deserialize": deser,
                "run": run,
                "overhead": finish - launch - deser - run - result,
            }
            read = (reads or {}).get(info["Task ID"])
            if read is not None:
                task["before_read"] = read["start"] * 1000.0 - launch
                task["after_read"] = finish - read["end"] * 1000.0
            tasks.append(task)
    walls = [j["end"] - j["start"] for j in jobs.values() if j["end"] is not None]
    return {
        "jobs": len(jobs),
        "job_ms": _median(walls),
        "tasks_per_job": _median([j["tasks"] for j in jobs.values()]),
        "task_ms": _median([t["duration"] for t in tasks]),
        "task_deserialize_ms": _median([t["deserialize"] for t in tasks]),
        "task_run_ms": _median([t["run"] for t in tasks]),
        "task_overhead_ms": _median([t["overhead"] for t in tasks]),
        "launch_to_read_ms": _median([t["before_read"] for t in tasks if "before_read" in t]),
        "read_to_finish_ms": _median([t["after_read"] for t in tasks if "after_read" in t]),
    }


def reads_by_task(stats_dir: Path) -> dict[int, dict[str, Any]]:
    """kafka_direct's read statistics lines by Spark task id (their first line each)."""
    out: dict[int, dict[str, Any]] = {}
    for path in stats_dir.glob("tasks-*.jsonl"):
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                rec = json.loads(line)
                if rec.get("spark_task") is not None:
                    out.setdefault(rec["spark_task"], rec)
    return out


def read_profile(stats_dir: Path, topic: str) -> dict[str, Any]:
    """kafka_direct's read tasks of ``topic``: the Python read and the pool, as medians/sums."""
    lines = []
    for path in stats_dir.glob("tasks-*.jsonl"):
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                rec = json.loads(line)
                if rec.get("topic") == topic:
                    lines.append(rec)
    firsts = {}
    for rec in lines:  # one entry per task (its first line carries the pool's deltas)
        firsts.setdefault(rec["task"], rec)
    tasks = list(firsts.values())
    if not tasks:
        return {"read_tasks": 0}
    return {
        "read_tasks": len(tasks),
        "read_ms": _median([(t["end"] - t["start"]) * 1000.0 for t in tasks]),
        "read_p90_ms": sorted((t["end"] - t["start"]) * 1000.0 for t in tasks)[
            int(0.9 * (len(tasks) - 1))
        ],
        "ranges_per_task": _median([t["ranges"] for t in tasks]),
        "pool_hits": sum(t["pool_hits"] for t in lines),
        "pool_misses": sum(t["pool_misses"] for t in lines),
        "pool_creations": sum(t["pool_creations"] for t in lines),
        **{
            f"position_{how}": sum(t.get(f"position_{how}", 0) for t in lines)
            for how in ("kept", "skipped", "assigned", "renewed")
        },
        "python_workers": len({t["pid"] for t in tasks}),
    }


def driver_profile(stats_dir: Path, since_ms: float, until_ms: float) -> dict[str, Any]:
    """kafka_direct's stream reader calls on the driver (the stream runner process) in the
    window: how many of each, and their median time in Python."""
    calls: dict[str, list[float]] = {}
    for path in stats_dir.glob("driver-*.jsonl"):
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                rec = json.loads(line)
                if "driver" in rec and since_ms <= rec["start"] * 1000.0 <= until_ms:
                    calls.setdefault(rec["driver"], []).append((rec["end"] - rec["start"]) * 1000.0)
    out: dict[str, Any] = {}
    for name, took in sorted(calls.items()):
        out[f"{name}_n"] = len(took)
        out[f"{name}_ms"] = _median(took)
    return out
