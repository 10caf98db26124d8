"""The benchmark suite's quick mode, so ``benchmarks/run.py`` cannot rot.

It runs the one command a user runs (``python benchmarks/run.py --quick``) against the test
broker, in a subprocess with its own local Spark, and checks only correctness: every mode read
exactly the records of the data set, every write mode wrote exactly as many (read back and
counted) through the path it was meant to take, the latency run saw every record it produced,
the planner made one ``list_offsets`` request per trigger, and no streaming query died when the
benchmark ended it. Speed is never asserted: rates on a shared machine say little, and the
benchmark reports them for people to read. The last tests check, without a broker, that the
summary reports a figure it could not measure as n/a and a mode that read nothing by name.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest

# Timing-sensitive or CPU-heavy: runs alone, after the parallel part (scripts/test.sh).
pytestmark = pytest.mark.serial

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "benchmarks" / "run.py"
RECORDS, SIZE = 20_000, 100  # the quick mode's data set (Config.quick_mode)
# Only a hang guard: the quick run takes about a minute, longer on a busy machine. Nothing here
# waits for a time to pass or checks a speed.
HANG_GUARD_S = 900


@dataclass(frozen=True)
class QuickRun:
    results: dict[str, Any]
    stderr: str  # the benchmark's log lines, and whatever Spark's JVM printed


@pytest.fixture(scope="module")
def quick_run(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> QuickRun:
    out = tmp_path_factory.mktemp("bench") / "quick.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.run(
        [sys.executable, str(RUN), "--quick", "--bootstrap-servers", kafka_bootstrap,
         "--json", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )  # fmt: skip
    assert proc.returncode == 0, f"benchmark failed:\n{proc.stdout}\n{proc.stderr[-4000:]}"
    assert "checks:" in proc.stdout and "FAILED" not in proc.stdout, proc.stdout
    return QuickRun(dict(json.loads(out.read_text())), proc.stderr)


@pytest.fixture(scope="module")
def quick_results(quick_run: QuickRun) -> dict[str, Any]:
    return quick_run.results


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
def test_every_write_mode_writes_exactly_the_data_set_and_takes_its_path(
    quick_results: dict[str, Any],
) -> None:
    """Each write mode's topic is read back and counted: the plain producer loops, the C path
    without Spark, Spark's counting writer, df.write on both paths and the Kafka-to-Kafka
    stream; each Spark write's tasks say which path they took."""
    writes = quick_results["writes"]
    assert writes["rounds"], "no measured write round"
    kinds = {"batch": ["native"], "batch_python": ["python"], "stream": ["native"]}
    for rnd in writes["rounds"]:
        assert set(rnd) == {"raw", "raw_defaults", "native", "spark_floor", "batch",
                            "batch_python", "stream"}  # fmt: skip
        for mode, got in rnd.items():
            assert (got["rows"], got["bytes"]) == (RECORDS, RECORDS * SIZE), mode
            assert got["rate"] > 0, mode
        for mode, kind in kinds.items():
            assert rnd[mode]["kinds"] == kind and rnd[mode]["tasks"] >= 1, mode
    summary = writes["summary"]
    assert summary["bar"]["required"] == 1.5
    assert summary["batch"]["ratio"] is not None and summary["batch"]["x_native"] is not None
    assert writes["memory"]["rows"] == RECORDS and writes["memory"]["workers"]
    assert all(v for k, v in quick_results["checks"].items() if k.startswith("write")), (
        quick_results["failures"]
    )


@pytest.mark.slow
def test_latency_run_sees_every_produced_record(quick_results: dict[str, Any]) -> None:
    latency = quick_results["latency"]
    assert latency["produced"] > 0
    assert latency["rows"] == latency["produced"]
    assert latency["p50_ms"] <= latency["p95_ms"] <= latency["p99_ms"]


@pytest.mark.slow
def test_planning_makes_one_list_offsets_request_per_kind_per_trigger(
    quick_results: dict[str, Any],
) -> None:
    """latestOffset asks for latest offsets, partitions() for the log start (the data-loss
    check): one request each, for all 100 partitions, never one per partition."""
    planning = quick_results["planning"]
    assert planning["list_offsets_per_kind_per_trigger"] == 1
    assert planning["list_offsets_per_trigger"] == 2
    assert planning["partitions_per_list_offsets"] == planning["partitions"] == 100


@pytest.mark.slow
def test_pool_statistics_come_from_the_executors(quick_results: dict[str, Any]) -> None:
    pool = quick_results["pool"]
    assert pool["tasks"] >= quick_results["many_batches"]["micro_batches"]
    assert pool["hits"] + pool["misses"] == pool["tasks"]
    assert all(quick_results["checks"].values()), quick_results["checks"]


@pytest.mark.slow
def test_no_streaming_query_dies_when_the_benchmark_stops_it(quick_run: QuickRun) -> None:
    """Regression: the floor stream was an endless query stopped from the driver. A stop during
    its foreachBatch job made Spark match the long Py4J error against StreamExecution's
    PROXY_ERROR regex, whose recursion overflowed the stack: the stream thread died with a
    StackOverflowError, and the Python workers of the cancelled tasks with BrokenPipeError."""
    assert "StackOverflowError" not in quick_run.stderr, quick_run.stderr[-4000:]
    assert 'Exception in thread "stream execution thread' not in quick_run.stderr


def _bench_module(name: str) -> Any:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def _mode(rows: int, cpu_us: float | None) -> dict[str, Any]:
    return {"rows": rows, "bytes": rows * SIZE, "rate": float(rows), "wall_s": 1.0,
            "task_rate": None, "cpu_us_per_record": cpu_us, "cpu_s": {}, "trigger_rate": None,
            "trigger_s": 0.0, "tasks": 2, "fast_path_tasks": 2}  # fmt: skip


def _summarised(**modes: dict[str, Any]) -> Any:
    config_mod = _bench_module("kafka_direct_bench.config")
    results_mod = _bench_module("kafka_direct_bench.results")
    config = config_mod.Config.quick_mode()
    rnd = {mode: _mode(RECORDS, 1.0) for mode in config_mod.MODES}
    rnd["batch_python"]["fast_path_tasks"] = 0
    rnd.update(modes)
    machine = {"cpu": "test", "cores": 2, "memory_gb": 1, "versions": {}, "read_path": "test"}
    results = results_mod.Results(asdict(config), "test", machine, rounds=[rnd])
    results_mod.summarise(results, config, RECORDS * SIZE)
    return results


def test_summary_reports_cpu_too_small_to_measure_as_not_available() -> None:
    """Regression: in --quick, a mode can use less CPU than /proc counts (10 ms per process);
    its 0 us/record crashed the summary with ZeroDivisionError. It is n/a, not a failure."""
    results = _summarised(raw_arrow=_mode(RECORDS, None))
    assert results.summary["raw_arrow"]["cpu_us_per_record"] is None
    assert results.summary["raw_arrow"]["cpu_ratio"] is None
    assert results.summary["batch"]["cpu_ratio"] == 1.0
    assert all(results.checks.values()), results.failures
    table = _bench_module("kafka_direct_bench.report").render(results)
    assert "n/a" in table and "too little CPU to measure" in table


def test_summary_of_a_mode_that_read_nothing_fails_its_check_by_name() -> None:
    results = _summarised(raw=_mode(0, None), stream=_mode(0, None))
    assert results.summary["batch"]["cpu_ratio"] is None  # raw's CPU is unknown
    failed = {name for name, ok in results.checks.items() if not ok}
    assert {"round1.raw.rows", "round1.stream.rows"} <= failed
    assert "mode 'stream' read 0 of" in results.failures["round1.stream.rows"]
    table = _bench_module("kafka_direct_bench.report").render(results)
    assert "FAILED" in table and "mode 'raw' read 0 of" in table
