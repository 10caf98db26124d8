"""The write rows' summary, checks and table lines. Runs in the benchmark process.

:func:`summarise_writes` turns the write rounds (:mod:`~kafka_direct_bench.writes`) into medians
and ratios, each ratio computed per round (the modes of a round ran back to back) and then the
median of those, as for reads. Every mode must have written exactly the data set, read back and
counted; each Spark write must have taken the path it was meant to. :func:`render_writes` gives
the table's lines.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kafka_direct_bench.common import median
from kafka_direct_bench.config import WRITE_MODES, Config

#: The issue's bar: the batch write at this many times the plain producer loop.
BAR = 1.5

#: The path each Spark write must have taken (task statistics' "kind").
_KINDS = {"batch": ["native"], "batch_python": ["python"], "stream": ["native"],
          "spark_floor": ["count"]}  # fmt: skip

LABELS = (
    ("raw", "raw producer loop, sink settings"),
    ("raw_defaults", "  same loop, librdkafka defaults"),
    ("native", "librdkafka in C, no Spark (floor)"),
    ("spark_floor", "Spark floor (counting writer)"),
    ("batch", "df.write, C path"),
    ("batch_python", "df.write, Python path"),
    ("stream", "Kafka->Kafka stream, AvailableNow"),
)


def _median(values: list[Any]) -> float | None:
    known = [v for v in values if v is not None and v == v]
    return median(known) if known else None


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or not num > 0 or not den > 0:
        return None
    return num / den


def summarise_writes(
    writes: dict[str, Any], config: Config, check: Callable[[str, bool, str], None]
) -> None:
    """Fill ``writes["summary"]``, and add the write checks through ``check(name, ok, why)``."""
    rounds = writes.get("rounds") or []
    if not rounds:
        return
    expected_bytes = config.records * config.size
    for i, rnd in enumerate(rounds):
        for mode in WRITE_MODES:
            got, name = rnd[mode], f"write{i + 1}.{mode}"
            check(
                f"{name}.rows",
                got["rows"] == config.records,
                f"write mode {mode!r}: {got['rows']:,} of {config.records:,} records read back",
            )
            check(f"{name}.bytes", got["bytes"] == expected_bytes,
                  f"write mode {mode!r}: {got['bytes']:,} value bytes read back, "
                  f"not {expected_bytes:,}")  # fmt: skip
            if mode in _KINDS:
                check(f"{name}.path", got.get("tasks", 0) > 0 and got.get("kinds") == _KINDS[mode],
                      f"write mode {mode!r}: task(s) wrote through {got.get('kinds')}, "
                      f"expected {_KINDS[mode]}")  # fmt: skip
    memory = writes.get("memory")
    if memory:
        check(
            "write_memory.rows",
            memory["rows"] == config.records,
            f"the write memory run wrote {memory['rows']:,} of {config.records:,} records",
        )
    s: dict[str, Any] = {}
    for mode in WRITE_MODES:
        per = [r[mode] for r in rounds]
        s[mode] = {
            "rate": _median([r["rate"] for r in per]),
            "task_rate": _median([r.get("task_rate") for r in per]),
            "cpu_us_per_record": _median([r["cpu_us_per_record"] for r in per]),
            "cpu_s": {
                k: median([r["cpu_s"].get(k, 0.0) for r in per])
                for k in sorted({k for r in per for k in r["cpu_s"]})
            },
            "ratio": _median([_ratio(r[mode]["rate"], r["raw"]["rate"]) for r in rounds]),
            "task_ratio": _median(
                [_ratio(r[mode].get("task_rate"), r["raw"].get("task_rate")) for r in rounds]
            ),
            "cpu_ratio": _median(
                [
                    _ratio(r["raw"]["cpu_us_per_record"], r[mode]["cpu_us_per_record"])
                    for r in rounds
                ]
            ),
        }
    for mode in ("batch", "batch_python", "stream"):
        s[mode]["x_native"] = _median(
            [_ratio(r[mode]["rate"], r["native"]["rate"]) for r in rounds]
        )
        s[mode]["x_spark_floor"] = _median(
            [_ratio(r[mode]["rate"], r["spark_floor"]["rate"]) for r in rounds]
        )
    s["bar"] = {"required": BAR, "batch_x_raw": s["batch"]["ratio"],
                "met": (s["batch"]["ratio"] or 0.0) >= BAR}  # fmt: skip
    writes["summary"] = s


def _fmt(value: Any, spec: str = ",.0f") -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "n/a"
    return format(value, spec)


def render_writes(writes: dict[str, Any], config: dict[str, Any]) -> list[str]:
    s = writes.get("summary")
    if not s:
        return []
    lines = [
        "",
        f"writes: {config['records']:,} records x {config['size']} B into {config['partitions']} "
        f"partitions, {len(writes['rounds'])} round(s); raw = {config['partitions']} plain "
        "confluent-kafka producer loops with the sink's settings (idempotence, acks=all)",
        f"{'mode':<34}{'records/s':>12}{'x raw':>8}{'in-task/s':>12}{'x raw':>8}"
        f"{'CPU us/rec':>12}{'x raw':>8}",
        "-" * 94,
    ]
    for mode, label in LABELS:
        row = s[mode]
        lines.append(
            f"{label:<34}{_fmt(row['rate']):>12}{_fmt(row['ratio'], '.2f'):>8}"
            f"{_fmt(row['task_rate']):>12}{_fmt(row['task_ratio'], '.2f'):>8}"
            f"{_fmt(row['cpu_us_per_record'], '.2f'):>12}{_fmt(row['cpu_ratio'], '.2f'):>8}"
        )
    for mode in ("batch", "batch_python", "stream"):
        lines.append(
            f"  {mode}: x the C floor {_fmt(s[mode]['x_native'], '.2f')}, "
            f"x Spark's floor {_fmt(s[mode]['x_spark_floor'], '.2f')}"
        )
    bar = s["bar"]
    lines.append(
        f"bar: df.write (C path) at >= {bar['required']:g} x raw: "
        f"{_fmt(bar['batch_x_raw'], '.2f')} x, {'met' if bar['met'] else 'NOT met'}"
    )
    memory = writes.get("memory")
    if memory:
        for w in memory["workers"]:
            lines.append(
                f"write memory: worker {w['pid']} ({w['rows']:,} records, {w['arrow_batches']} "
                f"Arrow batches): idle {_fmt(w['rss_idle_before_mb'])} MB, task start "
                f"{_fmt(w['rss_task_start_mb'])} MB, peak {_fmt(w['rss_peak_mb'])} MB, end "
                f"{_fmt(w['rss_end_mb'])} MB (late-early peak "
                f"{_fmt(w['late_minus_early_peak_mb'], '+.0f')} MB)"
            )
    lines.append(
        "CPU seconds per write mode (median round), by process: "
        + "; ".join(
            f"{mode}: "
            + ", ".join(f"{k} {v:.2f}" for k, v in s[mode]["cpu_s"].items() if v >= 0.01)
            for mode in WRITE_MODES
        )
    )
    return lines
