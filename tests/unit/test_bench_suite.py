"""The pure parts of ``python benchmarks/oracle.py --suite``: the round order, the per-round
ratios, the tables, and the data sets' values. No Spark, no broker (the suite itself is a
benchmark, run by hand: its figures are in docs/performance.md)."""

from __future__ import annotations

import sys
import zlib
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from kafka_direct_bench import suite_report as sr
from kafka_direct_bench.suite_children import floor_content
from kafka_direct_bench.suite_data import DATASETS, parse_datasets, parse_kv, values


@pytest.mark.parametrize(
    ("round_", "expected"),
    [(0, ["a", "b", "c"]), (1, ["c", "b", "a"]), (2, ["a", "b", "c"]), (3, ["c", "b", "a"])],
)
def test_rounds_alternate_abba(round_: int, expected: list[str]) -> None:
    assert sr.abba(["a", "b", "c"], round_) == expected


def _run(seconds: dict[str, dict[str, list[float | None]]], failures: list[str]) -> dict[str, Any]:
    return {"dataset": "100b", "describe": "100 B random, uncompressed", "partitions": 2,
            "records": 1000, "seconds": seconds, "failures": failures,
            "load_start": (3.25, 2.0, 1.0), "load_end": (9.0, 4.0, 2.0)}  # fmt: skip


def test_ratios_are_per_round_then_median_and_skip_failed_rounds() -> None:
    run = _run(
        {"batch read": {sr.OURS: [1.0, 2.0, 1.0], sr.JVM: [2.0, 3.0, None],
                        sr.TUNED: [1.0, 1.0, 0.5], sr.FLOOR: [0.5, 1.0, 0.5]}},
        [],
    )  # fmt: skip
    s = sr.summarise(run)["batch read"]
    assert s["x_jvm"] == {"per_round": [2.0, 1.5], "median": 1.75}
    assert s["x_tuned"] == {"per_round": [1.0, 0.5, 0.5], "median": 0.5}
    assert s["of_floor"]["median"] == 0.5
    assert s[sr.OURS]["median_s"] == 1.0 and s[sr.OURS]["records_per_s"] == 1000.0
    assert s[sr.JVM]["failed_rounds"] == 1 and s[sr.JVM]["median_s"] == 2.5


def test_the_table_shows_rates_ratios_and_every_failure() -> None:
    run = _run(
        {"batch write": {sr.OURS: [0.5, 0.5], sr.JVM: [None, None], sr.TUNED: [1.0, 0.5]}},
        ["batch write, kafka: read back (0, 0, 0), expected (1000, 100000, 7)"],
    )
    report = {"command": "python benchmarks/oracle.py --suite", "started": "s", "ended": "e",
              "load": {"start": "1", "end": "2", "uptime_end": "up"}, "machine": "m",
              "versions": {"pyspark": "4.2.0", "spark_kafka_connector": "4.2.0"},
              "kafka": "4.1.1", "brokers": "one", "rounds": 2, "scale": 1.0, "warmth": "w",
              "tuned_read": "r", "tuned_write": "w", "runs": [run]}  # fmt: skip
    text = sr.render(report)
    line = next(x for x in text.splitlines() if "batch write" in x and x.startswith("| 100b"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[3:7] == ["2,000", "failed", "1,333", "—"]
    assert cells[7] == "n/a" and cells[8] == "**1.50** (2.00 · 1.00)" and cells[9] == "—"
    assert "100b x 2: 3.2 → 9.0" in text
    assert "read back (0, 0, 0)" in text and "PySpark 4.2.0" in text and "4.1.1" in text


def test_json_values_are_about_1_kb_distinct_and_compressible() -> None:
    vals = values(DATASETS["json1k-zstd"])
    assert len(set(vals)) == len(vals) == 4096
    assert all(900 <= len(v) <= 1100 for v in vals)
    blob = b"".join(vals[:500])
    assert len(zlib.compress(blob)) < len(blob) / 2  # text, not random bytes
    assert values(DATASETS["1mb"])[0] != values(DATASETS["1mb"])[1]
    assert len(values(DATASETS["1mb"])[0]) == 1 << 20


def test_the_write_floors_expected_content_follows_its_values() -> None:
    vals = values(DATASETS["100b"])
    expected_crc = sum(zlib.crc32(vals[i]) for i in range(3)) + sum(
        zlib.crc32(vals[i]) for i in range(2)
    )
    assert floor_content("100b", [3, 2]) == (5, 500, expected_crc)


def test_bad_dataset_and_option_lists_name_the_fix() -> None:
    with pytest.raises(SystemExit, match="json1k-lz4"):
        parse_datasets("100b,json")
    with pytest.raises(SystemExit, match="KEY=VALUE"):
        parse_kv("kafka.linger.ms")
    assert parse_kv(" a=1, b=x=y ,") == {"a": "1", "b": "x=y"}
