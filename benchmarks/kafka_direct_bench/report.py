"""The output: the table printed at the end of a run, and the ``--json`` file. Runs in the
benchmark process.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from kafka_direct_bench.config import MODES
from kafka_direct_bench.results import Results
from kafka_direct_bench.write_summary import render_writes


def _fmt(value: Any, spec: str = ",.0f", missing: str = "-") -> str:
    if value is None or (isinstance(value, float) and value != value):
        return missing
    return format(value, spec)


def _cpu(value: Any, spec: str = ".2f") -> str:
    """A CPU figure, or n/a: too little CPU to measure (see procstats.cpu_used)."""
    return _fmt(value, spec, "n/a")


def render(results: Results) -> str:
    c, s, m = results.config, results.summary, results.machine
    modes = MODES
    lines = [
        f"kafka_direct benchmark: {c['records']:,} records x {c['size']} B, "
        f"{c['partitions']} partitions, {c['rounds']} round(s){' (quick)' if c['quick'] else ''}",
        f"machine: {m['cpu']}, {m['cores']} cores, {m['memory_gb']} GB; "
        + ", ".join(f"{k} {v}" for k, v in m["versions"].items()),
        f"read path: {m['read_path']}; write path: {m.get('write_path', 'n/a')}",
        f"command: {results.command}",
        "",
        f"{'mode':<34}{'records/s':>12}{'x raw':>8}{'in-task/s':>12}{'x raw':>8}"
        f"{'CPU us/rec':>12}{'x raw':>8}",
        "-" * 94,
    ]
    raw = s["raw"]
    lines.append(
        f"{'raw confluent-kafka (P processes)':<34}{_fmt(raw['rate']):>12}{'1.00':>8}"
        f"{_fmt(raw['task_rate']):>12}{'1.00':>8}"
        f"{_cpu(raw['cpu_us_per_record']):>12}"
        f"{'1.00' if raw['cpu_us_per_record'] is not None else 'n/a':>8}"
    )
    for label, key in (
        ("raw librdkafka -> Arrow, no Spark", "raw_arrow"),
        ("batch read", "batch"),
        ("batch read, Python path", "batch_python"),
        ("stream AvailableNow, foreachBatch", "stream"),
        ("stream AvailableNow, noop sink", "stream_noop"),
        ("Spark floor (no-Kafka source)", "floor"),
    ):
        row = s[key]
        lines.append(
            f"{label:<34}{_fmt(row['rate']):>12}{_fmt(row['ratio'], '.2f'):>8}"
            f"{_fmt(row['task_rate']):>12}{_fmt(row['task_ratio'], '.2f'):>8}"
            f"{_cpu(row['cpu_us_per_record']):>12}{_cpu(row['cpu_ratio']):>8}"
        )
    for label, key in (("  foreachBatch, Spark trigger time", "stream"),
                       ("  noop sink, Spark trigger time", "stream_noop")):  # fmt: skip
        lines.append(
            f"{label:<34}{_fmt(s[key]['trigger_rate']):>12}"
            f"{_fmt(s[key]['trigger_ratio'], '.2f'):>8}"
        )
    if any(s[m]["cpu_us_per_record"] is None or s[m].get("cpu_ratio", 1) is None for m in modes):
        lines.append(
            "CPU n/a: a mode read nothing (see the checks), or used too little CPU to measure: "
            "/proc counts whole 10 ms ticks per process"
        )
    best = ", ".join(
        f"{mode} {_fmt(s[mode]['best_rate'])}/s"
        + ("" if mode == "raw" else f" ({_fmt(s[mode]['best_ratio'], '.2f')})")
        for mode in modes
    )
    mb = s.get("many_batches")
    if mb:
        lines.append(
            f"{'stream, ' + str(mb['micro_batches']) + ' micro-batches':<34}"
            f"{_fmt(mb['rate']):>12}{_fmt(mb['ratio'], '.2f'):>8}"
        )
        lines.append(
            f"  per micro-batch: {_fmt(mb['ms_per_micro_batch'], '.0f')} ms, of which "
            f"{_fmt(mb['overhead_ms_per_micro_batch'], '.0f')} ms overhead beyond reading; "
            "Spark's median breakdown (ms): "
            + ", ".join(f"{k} {v:.0f}" for k, v in mb["median_duration_ms"].items())
        )
        if "floor_median_duration_ms" in mb:
            floor = mb["floor_median_duration_ms"]
            lines.append(
                "  the same micro-batches from the no-Kafka source (Spark's floor, ms): "
                + ", ".join(f"{k} {v:.0f}" for k, v in floor.items())
                + f"; kafka_direct's median micro-batch is "
                f"{_fmt(mb['kafka_direct_ms_per_micro_batch_beyond_floor'], '.0f')} ms longer"
            )
    lines.append(f"best round of each mode (x best raw): {best}")
    fixed = results.fixed
    if fixed:
        lines.append(
            f"fixed cost per query (one record per partition): batch "
            f"{fixed['batch_wall_s']:.2f} s, stream AvailableNow {fixed['stream_wall_s']:.2f} s"
        )
    lat = results.latency
    if lat:
        lines += [
            "",
            f"latency at {lat['rate']:,} records/s, {lat['trigger_ms']} ms trigger "
            f"({lat['rows']:,} of {lat['produced']:,} records seen): "
            f"p50 {_fmt(lat['p50_ms'])} ms, p95 {_fmt(lat['p95_ms'])} ms, "
            f"p99 {_fmt(lat['p99_ms'])} ms",
        ]
    mem = results.memory
    if mem:
        lines.append(
            f"memory: {mem['backlog_arrow_batches_per_task']:.0f} Arrow batches of "
            f"{mem['arrow_batch_size']:,} rows per task"
        )
        for w in mem["workers"]:
            lines.append(
                f"  worker {w['pid']} (partition {w['partition']}): idle "
                f"{_fmt(w['rss_idle_before_mb'])} MB, task start {_fmt(w['rss_task_start_mb'])} "
                f"MB, peak {_fmt(w['rss_peak_mb'])} MB, end {_fmt(w['rss_end_mb'])} MB "
                f"(late-early peak {_fmt(w['late_minus_early_peak_mb'], '+.0f')} MB)"
            )
    pool = results.pool
    if pool:
        whole = pool.get("whole_run") or {}
        lines.append(
            f"pool over {pool['micro_batches']} micro-batches ({pool['tasks']} tasks): hit rate "
            f"{_fmt(pool['hit_rate'], '.1%')}, {pool['creations']} consumers created "
            f"({_fmt(pool['creations_per_micro_batch'], '.2f')} per micro-batch); whole run: "
            f"{whole.get('tasks', 0)} tasks, {whole.get('creations', 0)} consumers created, "
            f"hit rate {_fmt(whole.get('hit_rate'), '.1%')}"
        )
    plan = results.planning
    if plan:
        lines.append(
            f"planning, {plan['partitions']} partitions: median {_fmt(plan['median_ms'], '.1f')} "
            f"ms per trigger (max {_fmt(plan['max_ms'], '.1f')}), "
            f"{plan['list_offsets_per_trigger']} list_offsets call(s) per trigger "
            f"for {plan['partitions_per_list_offsets']} partitions; requests per trigger: "
            + ", ".join(f"{k} {v}" for k, v in sorted(plan["requests_per_trigger"].items()))
            + f" (list_offsets: {', '.join(plan.get('list_offsets_of_last_trigger', []))})"
        )
    lines += render_writes(results.writes, c)
    lines.append("")
    lines.append(
        "CPU seconds per mode (median round), by process: "
        + "; ".join(
            f"{mode}: "
            + ", ".join(f"{k} {v:.2f}" for k, v in s[mode]["cpu_s"].items() if v >= 0.01)
            for mode in modes
        )
    )
    failed = [k for k, ok in results.checks.items() if not ok]
    lines += [
        "",
        f"checks: {len(results.checks) - len(failed)}/{len(results.checks)} passed"
        + (f"; FAILED: {', '.join(failed)}" if failed else ""),
        *(f"  {name}: {results.failures.get(name, 'failed')}" for name in failed),
        f"total time {results.seconds:.0f} s",
    ]
    return "\n".join(lines)


def _json_safe(value: Any) -> Any:
    """NaN (a median of nothing) becomes null: the JSON file stays standard JSON."""
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def write_json(results: Results, path: str) -> None:
    """Every figure, per round, with the machine and versions."""
    data = _json_safe(asdict(results))
    Path(path).write_text(json.dumps(data, indent=2, default=str, allow_nan=False))
