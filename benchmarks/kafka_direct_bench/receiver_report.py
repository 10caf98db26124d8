"""The receiver benchmark's table, and what each approach needs. Runs in the benchmark process.

:func:`render` prints one table per phase of ``python benchmarks/receiver.py``: throughput (with
the ratio to raw librdkafka from the same run), latency, repeats and losses after a crash, and
:func:`needs`, the requirements of each approach that are facts rather than measurements.
"""

from __future__ import annotations

from typing import Any


def needs(config: Any) -> dict[str, dict[str, str]]:
    """What each approach needs to run: what each costs."""
    return {
        "direct": {
            "task slots": "only while a batch runs",
            "shared storage": "none",
            "Kafka ACLs": "Read, Describe on the topics; Read on the group to commit "
            "(commits go through the admin client: the group has no members)",
            "guarantee": "at-least-once; exactly-once with output and offsets in one transaction",
        },
        "receiver": {
            "task slots": f"numReceivers ({config.receivers}) for as long as the stream runs, "
            "plus at least one for the batches",
            "shared storage": "walDir, mounted at the same path on every node (the log: at most "
            "maxPendingBlocks + numReceivers blocks of up to 8 MB)",
            "Kafka ACLs": "Read, Describe on the topics; Read on the group (receivers join it "
            "and commit)",
            "guarantee": "at-least-once (repeats after a crash); offsets live in the group",
        },
        "receiver-nowal": {
            "task slots": "as the receiver",
            "shared storage": "a scratch directory every node shares (blocks are not fsynced)",
            "Kafka ACLs": "as the receiver",
            "guarantee": "none after a driver crash: received, unprocessed records are lost",
        },
    }


def _row(cells: list[str], widths: list[int]) -> str:
    pairs = enumerate(zip(cells, widths, strict=True))
    return "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in pairs)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return [_row(header, widths), _row(["-" * w for w in widths], widths)] + [
        _row(r, widths) for r in rows
    ]


def render(results: dict[str, Any]) -> str:
    config = results["config"]
    lines = [
        f"Receiver or direct? ({results['command']})",
        f"{config['records']:,} records x {config['size']} B, {config['partitions']} partitions, "
        f"{config['receivers']} receivers, batchInterval {config['batch_interval']:g} s; "
        f"run took {results['seconds']:.0f} s",
        "",
    ]
    if "throughput" in results:
        raw = results["raw"]["rate"]
        rows = [["raw librdkafka", f"{raw:,.0f}", "1.00", "", "", "", ""]]
        for mode, t in results["throughput"].items():
            after = t["rate_after_first"]
            rows.append([
                mode, f"{t['rate']:,.0f}", f"{t['rate'] / raw:.3f}", f"{t['first_batch_s']:.1f}",
                "n/a" if after is None else f"{after:,.0f}", str(t["batches"]),
                f"{t['peak_log_mb']:.1f}",
            ])  # fmt: skip
        lines += [
            "Throughput: records/s from start() to the last record in fn; the first batch with "
            "records ends after 'first s'; records/s after it; peak disk used by the log"
        ]
        lines += _table(
            ["mode", "records/s", "x raw", "first s", "after first", "batches", "log MB"], rows
        )
        lines.append("")
    if "latency" in results:
        rows = [
            [m, f"{v['p50_ms']:.0f}", f"{v['p95_ms']:.0f}", f"{v['max_ms']:.0f}", f"{v['rows']:,}"]
            for m, v in results["latency"].items()
        ]
        lines += [
            f"Latency, record timestamp -> row in fn (ms), {config['latency_rate']:,} records/s"
        ]
        lines += _table(["mode", "p50", "p95", "max", "rows"], rows)
        lines.append("")
    if "crash" in results:
        rows = [
            [m, f"{v['records']:,}", f"{v['processed_at_kill']:,}", f"{v['repeats']:,}",
             f"{v['lost']:,}"]
            for m, v in results["crash"].items()
        ]  # fmt: skip
        lines += ["After a driver SIGKILL at 40% and a restart"]
        lines += _table(["mode", "records", "done at kill", "repeats", "lost"], rows)
        lines.append("")
    lines.append("What each needs")
    for mode, facts in results["needs"].items():
        lines.append(f"  {mode}:")
        lines += [f"    {k}: {v}" for k, v in facts.items()]
    return "\n".join(lines)
