"""Regression: a task that fails *upstream* of the sink must never commit its transaction.

When an operator upstream of a Python data source writer fails (a Python UDF raises, an Arrow
UDF raises, the UDF's worker is SIGKILLed, a task after a shuffle fails), Spark stops feeding the
writer's Python worker, whose input then ends as if it were complete. The exactly-once sink used
to commit that partial input (1,900 of a task's 2,500 rows), and every retry of the task then
failed with a ReplayMismatchError. Now the sink checks that Spark's finish signal follows the
input (kafka_direct.executor.task_input) and aborts otherwise.

Each guarantee runs its scenarios (upstream_driver.py) in one Spark of its own (``local[2,4]``:
task retries on) against real Apache Kafka, then reads every output topic back:

- exactly-once: under read_committed each of the 10,000 values appears exactly once;
- at-least-once: none is lost; the duplicates the failed attempts wrote are counted.

Neither can pass by luck: each scenario must show, in the workers' log, a failed attempt whose
sink had received rows before its input was cut off (the case the bug needed), and, for
exactly-once, read_uncommitted readers must see the aborted rows of that attempt in the log.
"""

from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.integration.kafka_helpers import create_topic, read_values

pytestmark = [pytest.mark.serial, pytest.mark.slow]

HERE = Path(__file__).parent
DRIVER = HERE / "upstream_driver.py"
sys.path.insert(0, str(HERE))
from upstream_driver import PARTITIONS, ROWS, WIDTH  # noqa: E402

SCENARIOS = ["python", "arrow", "shuffle", "kill", "stream", "restart"]
#: At-least-once needs no transaction to get wrong: its Spark-facing path is the same, so a
#: subset shows that nothing is lost (and keeps the suite's time down).
AT_LEAST_ONCE = ["python", "kill", "restart"]
STREAMS = {"stream", "restart"}


def _expected(name: str) -> list[bytes]:
    return [f"{name}-{i:05d}".ljust(WIDTH, ".").encode() for i in range(ROWS)]


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i, value in enumerate(values):
        producer.produce(topic, value, partition=i * PARTITIONS // len(values))
    assert producer.flush(60) == 0


class Run:
    """One guarantee's scenarios, run once by the driver: their results, the workers' log, and
    each scenario's output topic."""

    def __init__(self, results: dict[str, dict[str, Any]], log: str, outs: dict[str, str]) -> None:
        self.results, self.log, self.outs = results, log, outs

    def check(self, scenario: str) -> tuple[str, list[bytes]]:
        """The scenario finished, and one of its attempts had its input cut off after the sink
        had rows (the case the bug needed: without it, a pass could just mean that every
        attempt failed before the sink saw a row); its output topic and expected values."""
        result = self.results[scenario]
        assert result["ok"], f"{result.get('error')}\n{result.get('trace')}"
        out = self.outs[scenario]
        cut = [
            int(n)
            for n in re.findall(
                rf"The input of write task \d+ \(attempt 0\) to topic '{out}' ended before "
                r"Spark finished sending it.*? It had received (\d+) row",
                self.log,
            )
        ]
        assert cut and max(cut) > 0, f"no cut-off input with rows was seen for {out}"
        if scenario == "restart":
            assert "injected upstream failure" in result["first_run"], result["first_run"]
        return out, _expected(scenario)


def _run(bootstrap: str, guarantee: str, names: list[str], tmp: Path) -> Run:
    worker_log, results_path, driver_log = tmp / "workers.log", tmp / "results.jsonl", tmp / "d.log"
    specs, outs = [], {}
    for name in names:
        source = "-"
        if name in STREAMS:
            source = f"up-src-{name}-{uuid.uuid4().hex[:8]}"
            create_topic(bootstrap, source, partitions=PARTITIONS)
            _produce(bootstrap, source, _expected(name))
        out = f"up-out-{name}-{uuid.uuid4().hex[:8]}"
        create_topic(bootstrap, out, partitions=PARTITIONS)
        outs[name] = out
        specs.append(f"{name}:{source}:{out}")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    env["KAFKA_DIRECT_LOG_FILE"] = str(worker_log)
    with open(driver_log, "wb") as out_file:
        proc = subprocess.run(
            [sys.executable, str(DRIVER), bootstrap, guarantee, str(results_path), *specs],
            stdout=out_file,
            stderr=subprocess.STDOUT,
            env=env,
            timeout=900,
            check=False,
        )
    assert proc.returncode == 0, driver_log.read_text(errors="replace")[-4000:]
    results = {}
    for line in results_path.read_text().splitlines():
        entry = json.loads(line)
        results[entry["scenario"]] = entry
    log = worker_log.read_text(errors="replace") if worker_log.exists() else ""
    return Run(results, log, outs)


@pytest.fixture(scope="module")
def exactly_once(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Run:
    return _run(kafka_bootstrap, "exactly-once", SCENARIOS, tmp_path_factory.mktemp("eos"))


@pytest.fixture(scope="module")
def at_least_once(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Run:
    return _run(kafka_bootstrap, "at-least-once", AT_LEAST_ONCE, tmp_path_factory.mktemp("alo"))


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_exactly_once_never_commits_a_task_cut_off_upstream(
    exactly_once: Run, kafka_bootstrap: str, scenario: str
) -> None:
    out, expected = exactly_once.check(scenario)
    committed = read_values(kafka_bootstrap, out, "read_committed", PARTITIONS, at_least=ROWS)
    counts = collections.Counter(committed)
    duplicates = sum(n - 1 for n in counts.values() if n > 1)
    assert duplicates == 0, f"{duplicates} duplicate(s) under read_committed"
    assert sorted(committed) == expected


@pytest.mark.parametrize("scenario", AT_LEAST_ONCE)
def test_at_least_once_loses_nothing_when_cut_off_upstream(
    at_least_once: Run, kafka_bootstrap: str, scenario: str
) -> None:
    out, expected = at_least_once.check(scenario)
    seen = read_values(kafka_bootstrap, out, "read_uncommitted", PARTITIONS, at_least=ROWS)
    counts = collections.Counter(seen)
    assert set(counts) == set(expected), "lost or foreign values"
    # A failed attempt's rows that reached Kafka before it failed stay there, and its retry
    # writes them again: duplicates are allowed, and counted, never a loss.
    duplicates = sum(n - 1 for n in counts.values())
    print(f"{scenario}: {duplicates} duplicate(s) from the failed attempts (at-least-once)")
