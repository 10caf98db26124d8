"""What ``python benchmarks/oracle.py --suite`` reports: the round order, the per-round ratios
and their medians, and the Markdown tables. Pure (no Spark, no Kafka); runs in the benchmark
process, and in unit tests.

Ratios are taken per round, between queries that ran back to back, then their median:

- ``× JVM defaults`` and ``× JVM tuned``: the JVM row's seconds over kafka_direct's (above 1:
  kafka_direct is faster);
- ``of floor``: the floor's seconds over kafka_direct's, the share of librdkafka's speed with no
  Spark that kafka_direct reaches (1.0: as fast as the floor).
"""

from __future__ import annotations

import statistics
from typing import Any

OURS, JVM, TUNED, FLOOR = "kafka_direct", "kafka", "kafka tuned", "floor"
MODES = ("batch read", "stream read", "batch write", "stream write")
ROW_LABELS = {
    OURS: "kafka_direct",
    JVM: "JVM defaults",
    TUNED: "JVM tuned",
    FLOOR: "librdkafka floor",
}


def abba(rows: list[str], round_: int) -> list[str]:
    """The order of ``rows`` in round ``round_``: as given in even rounds, reversed in odd ones,
    so over two rounds every row has run as often before as after each other."""
    return list(rows) if round_ % 2 == 0 else list(reversed(rows))


def ratios(numerators: list[float | None], denominators: list[float | None]) -> list[float]:
    """Per-round ``n / d``, skipping rounds where either failed."""
    return [n / d for n, d in zip(numerators, denominators, strict=False) if n and d]


def _median(values: list[float]) -> float | None:
    return float(statistics.median(values)) if values else None


def summarise(dataset_run: dict[str, Any]) -> dict[str, Any]:
    """Per mode: each row's median seconds and records/s, kafka_direct's ratios to the others."""
    records = dataset_run.get("records", 0)
    out: dict[str, Any] = {}
    for mode, by_row in dataset_run.get("seconds", {}).items():
        ours = by_row.get(OURS, [])
        entry: dict[str, Any] = {}
        for row, secs in by_row.items():
            ok = [s for s in secs if s]
            med = _median(ok)
            entry[row] = {
                "median_s": med,
                "records_per_s": records / med if med else None,
                "failed_rounds": len(secs) - len(ok),
            }
        for row, key in ((JVM, "x_jvm"), (TUNED, "x_tuned"), (FLOOR, "of_floor")):
            if row in by_row:
                per_round = ratios(by_row[row], ours)
                entry[key] = {"per_round": per_round, "median": _median(per_round)}
        out[mode] = entry
    return out


def _rate(value: float | None) -> str:
    if value is None:
        return "failed"
    return f"{value:,.0f}"


def _ratio(entry: dict[str, Any] | None) -> str:
    if entry is None:
        return "—"
    if entry["median"] is None:
        return "n/a"
    rounds = " · ".join(f"{r:.2f}" for r in entry["per_round"])
    return f"**{entry['median']:.2f}** ({rounds})"


def table(runs: list[dict[str, Any]]) -> str:
    """One Markdown table: a line per data set, partition count and mode."""
    lines = [
        "| data set | P | mode | kafka_direct rec/s | JVM defaults rec/s | JVM tuned rec/s "
        "| floor rec/s | × JVM defaults | × JVM tuned | of floor |",
        "|---|---:|---|---:|---:|---:|---:|---|---|---|",
    ]
    for run in runs:
        summary = summarise(run)
        for mode in MODES:
            if mode not in summary:
                continue
            s = summary[mode]
            rate = {
                row: _rate(s[row]["records_per_s"]) if row in s else "—"
                for row in (OURS, JVM, TUNED, FLOOR)
            }
            lines.append(
                f"| {run['dataset']} ({run['describe']}) | {run['partitions']} | {mode} "
                f"| {rate[OURS]} | {rate[JVM]} | {rate[TUNED]} | {rate[FLOOR]} "
                f"| {_ratio(s.get('x_jvm'))} | {_ratio(s.get('x_tuned'))} "
                f"| {_ratio(s.get('of_floor'))} |"
            )
    return "\n".join(lines)


def render(report: dict[str, Any]) -> str:
    """The Markdown report: when, on what, under which load, the tables, the failures."""
    v = report["versions"]
    load = report["load"]
    lines = [
        f"`{report['command']}` — {report['started']} to {report['ended']} UTC.",
        "",
        f"- Load average (1, 5, 15 min): {load['start']} at the start, {load['end']} at the "
        f"end (`uptime`: {load['uptime_end']}); {report['machine']}.",
        f"- PySpark {v.get('pyspark')}, Spark's connector spark-sql-kafka-0-10 "
        f"{v.get('spark_kafka_connector')}, Apache Kafka {report['kafka']} "
        f"({report['brokers']}), confluent-kafka {v.get('confluent_kafka')} "
        f"(librdkafka {v.get('librdkafka')}), pyarrow {v.get('pyarrow')}, Python "
        f"{v.get('python')}, kafka_direct {v.get('kafka_direct_commit')}.",
        f"- {report['rounds']} rounds (ABBA order), scale {report['scale']}; "
        f"warmth: {report['warmth']}",
        f"- JVM tuned, reads: `{report['tuned_read']}`; writes: `{report['tuned_write']}` "
        "plus the topic's codec as `kafka.compression.type`.",
        "",
        table(report["runs"]),
        "",
        "Rates are records/s from the median seconds per query; × JVM = JVM seconds / "
        "kafka_direct seconds per round (above 1: kafka_direct faster), median in bold, the "
        "rounds after it; of floor = floor seconds / kafka_direct seconds.",
    ]
    loads = [
        f"{r['dataset']} x {r['partitions']}: {r['load_start'][0]:.1f} → {r['load_end'][0]:.1f}"
        for r in report["runs"]
        if r.get("load_start") and r.get("load_end")
    ]
    if loads:
        lines += ["", "Load average (1 min) at each data set's start and end: " + "; ".join(loads)]
    failures = [
        f"{r['dataset']} x {r['partitions']}: {f}"
        for r in report["runs"]
        for f in r.get("failures", [])
    ]
    if failures:
        lines += ["", "**Failures:**", ""] + [f"- {f}" for f in failures]
    return "\n".join(lines) + "\n"
