"""The executors' per-task statistics. Runs in the benchmark process.

When ``KAFKA_DIRECT_STATS_DIR`` is set, every read task of ``kafka_direct.consumer.read`` appends
one JSON line to ``<dir>/tasks-<pid>.jsonl``. :func:`task_stats` reads a topic's lines in a time
window, :func:`task_window` turns them into the in-task rate, and :func:`pool_summary` into the
consumer pool's hits and creations per micro-batch.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

STATS_DIR_ENV = "KAFKA_DIRECT_STATS_DIR"  # kafka_direct.executor.task.STATS_DIR_ENV


def task_stats(stats_dir: Path, topic: str, since: float, until: float) -> list[dict[str, Any]]:
    """The executors' per-task lines (kafka_direct.executor) for ``topic`` in a time window."""
    out = []
    for path in stats_dir.glob("tasks-*.jsonl"):
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                rec = json.loads(line)
                if rec["topic"] == topic and rec["start"] >= since and rec["end"] <= until:
                    out.append(rec)
    return out


def task_window(tasks: list[dict[str, Any]]) -> dict[str, Any]:
    if not tasks:
        return {"task_window_s": None, "task_rate": None, "tasks": 0, "fast_path_tasks": 0}
    rows = sum(t["rows"] for t in tasks)
    window = max(t["end"] for t in tasks) - min(t["start"] for t in tasks)
    return {
        "task_window_s": window,
        "task_rate": rows / window if window > 0 else None,
        "tasks": len(tasks),
        # Tasks that read through the C fast path (kafka_direct.consumer.native).
        "fast_path_tasks": sum(1 for t in tasks if t.get("fast_path")),
    }


def pool_summary(tasks: list[dict[str, Any]], micro_batches: int) -> dict[str, Any]:
    hits = sum(t["pool_hits"] for t in tasks)
    misses = sum(t["pool_misses"] for t in tasks)
    creations = sum(t["pool_creations"] for t in tasks)
    return {
        "tasks": len(tasks),
        "micro_batches": micro_batches,
        "hits": hits,
        "misses": misses,
        "hit_rate": hits / (hits + misses) if hits + misses else None,
        "creations": creations,
        "creations_per_micro_batch": creations / micro_batches if micro_batches else None,
        "workers": len({t["pid"] for t in tasks}),
    }
