"""The soak on a real three-broker Kafka cluster, in its three-minute form: the command a user
runs (``python benchmarks/soak.py --duration 180``), in a subprocess that starts its own
``KafkaCluster(brokers=3)`` and its own Spark driver.

One round of the five faults always runs (partition leader SIGKILL, active controller SIGKILL,
a leader SIGSTOPped past its session timeout, driver SIGKILL, Python worker SIGKILL), more while
the three minutes last. Then, read under ``read_committed``: the exactly-once sink's topic holds
every acknowledged record once; the at-least-once sink's topic loses none (duplicates are
allowed and reported); the DStream's output holds every record once and its offset store ends
where it processed. Nothing here waits for a time to pass or checks a speed; the subprocess
timeout only guards against a hang. If a part cannot start (the cluster, Spark), the soak
raises, exits non-zero, and this test fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.serial

ROOT = Path(__file__).resolve().parents[3]
SOAK = ROOT / "benchmarks" / "soak.py"
HANG_GUARD_S = 1800
KINDS = {"kill-leader", "kill-controller", "pause-broker", "kill-driver", "kill-worker"}


def test_soak_on_three_real_brokers_ends_exact(tmp_path: Path) -> None:
    results_path = tmp_path / "results.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]))
    command = [
        sys.executable,
        str(SOAK),
        "--duration",
        "180",
        "--seed",
        "7",
        "--work-dir",
        str(tmp_path / "work"),
        "--json",
        str(results_path),
    ]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=HANG_GUARD_S, env=env, cwd=ROOT
    )
    output = f"stdout:\n{done.stdout}\nstderr (end):\n{done.stderr[-6000:]}"
    assert results_path.exists(), f"the soak did not finish (exit {done.returncode}); {output}"
    results = json.loads(results_path.read_text())
    checks = results["checks"]

    # Every kind of fault ran, was really injected, and every pipeline recovered from it.
    assert {f["kind"] for f in results["faults"]} == KINDS, output
    assert not [f for f in results["faults"] if f["detail"].startswith("NOT INJECTED")], output
    assert all(t is not None for f in results["faults"] for t in f["recovered_s"].values())
    assert results["driver_runs"] >= 2, "the driver was killed and restarted at least once"
    assert results["deaths"] == [], output
    assert all(results["caught_up"].values()), output
    assert results["produced"] > 0 and results["producer_failures"] == []

    # Exactly-once: every acknowledged record once, nothing else.
    eos = checks["eos"]
    assert (eos["lost"], eos["duplicated"], eos["unknown"]) == (0, 0, 0), output
    assert eos["read"] == eos["distinct"] == results["produced"]
    # At-least-once: none lost; its duplicates are counted (and printed by the soak).
    alo = checks["alo"]
    assert (alo["lost"], alo["unknown"]) == (0, 0), output
    assert alo["distinct"] == results["produced"]
    assert alo["read"] == alo["distinct"] + alo["duplicated"]
    # The DStream: every record once in its output, and its store ends where it processed.
    dstream = checks["dstream"]
    assert (dstream["lost"], dstream["duplicated"], dstream["unknown"]) == (0, 0, 0), output
    assert dstream["distinct"] == dstream["read"] == results["produced"]
    assert dstream["notes"] == [], output
    assert done.returncode == 0, output
