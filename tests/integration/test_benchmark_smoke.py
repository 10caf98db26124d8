"""The benchmark suite's quick mode, so ``benchmarks/run.py`` cannot rot.

It runs the one command a user runs (``python benchmarks/run.py --quick``) against the test
broker, in a subprocess with its own local Spark, and checks only correctness: every mode read
exactly the records of the data set, the latency run saw every record it produced, and the
planner made one ``list_offsets`` request per trigger. Speed is never asserted: rates on a shared
machine say little, and the benchmark reports them for people to read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "benchmarks" / "run.py"
RECORDS, SIZE = 20_000, 100  # the quick mode's data set (Config.quick_mode)


@pytest.fixture(scope="module")
def quick_results(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("bench") / "quick.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.run(
        [sys.executable, str(RUN), "--quick", "--bootstrap-servers", kafka_bootstrap,
         "--json", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, f"benchmark failed:\n{proc.stdout}\n{proc.stderr[-4000:]}"
    assert "checks:" in proc.stdout and "FAILED" not in proc.stdout, proc.stdout
    return dict(json.loads(out.read_text()))


@pytest.mark.slow
def test_every_mode_reads_exactly_the_data_set(quick_results: dict[str, Any]) -> None:
    config = quick_results["config"]
    assert (config["records"], config["size"], config["quick"]) == (RECORDS, SIZE, True)
    assert quick_results["rounds"], "no measured round"
    for rnd in quick_results["rounds"]:
        for mode in ("raw", "batch", "stream", "floor"):
            assert (rnd[mode]["rows"], rnd[mode]["bytes"]) == (RECORDS, RECORDS * SIZE), mode
        assert rnd["stream_noop"]["rows"] == RECORDS  # Spark's no-op sink cannot count bytes
    many = quick_results["many_batches"]
    assert (many["rows"], many["bytes"]) == (RECORDS, RECORDS * SIZE)
    assert many["micro_batches"] >= 2, "maxOffsetsPerTrigger should have split the read"
    assert quick_results["memory"]["rows"] == RECORDS
    assert quick_results["fixed"]["rows_ok"]


@pytest.mark.slow
def test_latency_run_sees_every_produced_record(quick_results: dict[str, Any]) -> None:
    latency = quick_results["latency"]
    assert latency["produced"] > 0
    assert latency["rows"] == latency["produced"]
    assert latency["p50_ms"] <= latency["p95_ms"] <= latency["p99_ms"]


@pytest.mark.slow
def test_planning_makes_one_list_offsets_request_per_trigger(
    quick_results: dict[str, Any],
) -> None:
    planning = quick_results["planning"]
    assert planning["list_offsets_per_trigger"] == 1
    assert planning["partitions_per_list_offsets"] == planning["partitions"] == 100


@pytest.mark.slow
def test_pool_statistics_come_from_the_executors(quick_results: dict[str, Any]) -> None:
    pool = quick_results["pool"]
    assert pool["tasks"] >= quick_results["many_batches"]["micro_batches"]
    assert pool["hits"] + pool["misses"] == pool["tasks"]
    assert all(quick_results["checks"].values()), quick_results["checks"]
