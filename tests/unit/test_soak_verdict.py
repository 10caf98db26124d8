"""The real-Kafka soak's verdict (benchmarks/soak_report.py) from its results, table-style: what
fails the run and what is only counted. No broker, no Spark."""

from __future__ import annotations

import copy
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from soak_check import check_values, expected_copies
from soak_report import report

PRODUCED = {b"a", b"b", b"c"}


def clean() -> dict[str, Any]:
    check = {"read": 3, "distinct": 3, "lost": 0, "duplicated": 0, "unknown": 0, "notes": []}
    return {
        "seconds": 10.0,
        "faulted_s": 5.0,
        "kafka": "4.1.1",
        "brokers": 3,
        "seed": 1,
        "driver_runs": 2,
        "produced": 3,
        "producer_failures": [],
        "caught_up": {"eos": True, "alo": True, "dstream": True},
        "deaths": [],
        "faults": [
            {
                "kind": "kill-driver",
                "detail": "run 1",
                "recovered_s": {"eos": 1.0, "alo": 2.0, "dstream": 3.0},
            }
        ],
        "checks": {pipe: dict(check, name=pipe) for pipe in ("eos", "alo", "dstream")},
    }


def test_check_values_counts_loss_duplicates_and_strangers() -> None:
    got = check_values("eos", Counter(PRODUCED), [b"a", b"a", b"a", b"c", b"x"])
    assert (got.read, got.distinct, got.lost, got.duplicated, got.unknown) == (5, 3, 1, 2, 1)


ACKED = {b"a": (0, 0), b"b": (0, 2), b"c": (0, 3)}


@pytest.mark.parametrize(
    ("log", "output", "lost", "duplicated"),
    [
        # The producer wrote "a" twice (offsets 0 and 1): a sink that copies both is exact.
        ({(0, 0): b"a", (0, 1): b"a", (0, 2): b"b", (0, 3): b"c"}, [b"a", b"a", b"b", b"c"], 0, 0),
        # ... and one that copies it once lost a record.
        ({(0, 0): b"a", (0, 1): b"a", (0, 2): b"b", (0, 3): b"c"}, [b"a", b"b", b"c"], 1, 0),
        # A log with each record once: a second "a" is the sink's duplicate.
        ({(0, 0): b"a", (0, 2): b"b", (0, 3): b"c"}, [b"a", b"a", b"b", b"c"], 0, 1),
        # An acknowledged record the log lacks must still reach a sink once.
        ({(0, 0): b"a", (0, 2): b"b"}, [b"a", b"b"], 1, 0),
    ],
)
def test_a_sink_owes_each_record_as_often_as_the_source_log_holds_it(
    log: dict[tuple[int, int], bytes], output: list[bytes], lost: int, duplicated: int
) -> None:
    got = check_values("eos", expected_copies(ACKED, log), output)
    assert (got.lost, got.duplicated, got.unknown) == (lost, duplicated, 0)


def _set(path: str, value: Any) -> Any:
    def change(results: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target = results
        for key in parents:
            target = target[int(key)] if key.isdigit() else target[key]
        target[last] = value

    return change


@pytest.mark.parametrize(
    ("change", "status"),
    [
        (_set("seed", 1), 0),
        (_set("checks.alo.duplicated", 600), 0),  # at-least-once: counted, allowed
        (_set("checks.eos.duplicated", 1), 1),
        (_set("checks.eos.lost", 1), 1),
        (_set("checks.eos.unknown", 1), 1),
        (_set("checks.alo.lost", 1), 1),
        (_set("checks.dstream.duplicated", 1), 1),
        (_set("checks.dstream.notes", ["store offsets {0: 5} != processed {0: 6}"]), 1),
        (_set("faults.0.detail", "NOT INJECTED: no task failed"), 1),
        (_set("faults.0.recovered_s", {"eos": None, "alo": 1.0, "dstream": 1.0}), 1),
        (_set("caught_up", {"eos": True, "alo": False, "dstream": True}), 1),
        (_set("deaths", ["run 2 exited 2"]), 1),
        (_set("producer_failures", ["p0: timed out"]), 1),
    ],
)
def test_verdict(change: Any, status: int, capsys: pytest.CaptureFixture[str]) -> None:
    results = copy.deepcopy(clean())
    change(results)
    assert report(results) == status
    assert "output (read_committed)" in capsys.readouterr().out
