"""Who owns a walDir, and what the driver keeps of its receivers' reports
(kafka_direct.dstream.receiver.control, .supervisor, .stream), without Kafka or Spark.

A review found that a second run started on a walDir still in use recovered the log and ran its
first batch before it took the directory over, so the two processed the same blocks and the
newer one crashed; and that a restarted receiver overwrote its dead attempt's status before the
driver had added up that attempt's lock counters.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from kafka_direct.config.receiver import receiver_stream_config
from kafka_direct.dstream.receiver.control import (
    DriverBeacon,
    ReceiverStatus,
    read_status,
    write_status,
)
from kafka_direct.dstream.receiver.loop import ReceiverSpec
from kafka_direct.dstream.receiver.policy import RestartPolicy
from kafka_direct.dstream.receiver.share_acks import LockWatch
from kafka_direct.dstream.receiver.supervisor import ReceiverSupervisor
from kafka_direct.errors import ConfigurationError
from tests.unit.dstream.test_receiver_stream_loop import FakeSupervisor, Harness


class Clock:
    def __init__(self, on_sleep: Any = None) -> None:
        self.now, self.slept, self.on_sleep = 0.0, 0.0, on_sleep

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.slept += seconds
        if self.on_sleep is not None:
            self.on_sleep()


def control(tmp_path: Path) -> str:
    (tmp_path / "control").mkdir(exist_ok=True)
    return str(tmp_path)


def test_a_start_is_refused_while_another_runs_heartbeat_advances(tmp_path: Path) -> None:
    root = control(tmp_path)
    running = DriverBeacon(root, "A")
    running.beat()
    clock = Clock(on_sleep=running.beat)  # the running driver beats while the new one watches
    with pytest.raises(ConfigurationError) as info:
        DriverBeacon(root, "B").claim(wait_s=6.0, clock=clock, sleep=clock.sleep)
    assert info.value.option == "walDir" and "(A, pid" in str(info.value)
    assert "Stop that stream first, or give this one its own walDir" in str(info.value)
    assert running.owner() == "A"  # left alone


@pytest.mark.parametrize(
    ("last_words", "waits"),
    [
        pytest.param("silent", True, id="its beat stands still: taken over after the wait"),
        pytest.param("stopped", False, id="it stopped: at once"),
        pytest.param("process gone", False, id="its process is gone: at once"),
    ],
)
def test_a_directory_whose_run_is_over_is_taken_over(
    tmp_path: Path, last_words: str, waits: bool
) -> None:
    root = control(tmp_path)
    earlier = DriverBeacon(root, "A")
    earlier.beat()
    if last_words == "stopped":
        earlier.release()
    elif last_words == "process gone":
        ended = subprocess.run(
            [sys.executable, "-c", "import os; print(os.getpid())"],
            capture_output=True,
            text=True,
            check=True,
        )
        seen = json.loads(Path(earlier.path).read_text())
        Path(earlier.path).write_text(json.dumps({**seen, "pid": int(ended.stdout)}))
    clock = Clock()
    new = DriverBeacon(root, "B")
    assert new.claim(wait_s=6.0, clock=clock, sleep=clock.sleep) == (
        None if last_words == "stopped" else "A"
    )
    assert new.owner() == "B"
    assert (clock.slept >= 6.0) is waits


def test_start_takes_the_directory_before_it_recovers_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = Harness(tmp_path)
    partial = tmp_path / "blocks" / ".00000000000000000001-r000-x.arrow.tmp"

    def refuse(_self: Any) -> None:
        partial.write_bytes(b"a running receiver's block, half written")
        raise ConfigurationError("walDir", str(tmp_path), "a directory no running stream uses")

    monkeypatch.setattr(FakeSupervisor, "claim", refuse)
    with pytest.raises(ConfigurationError):
        harness.stream.start()
    assert partial.exists()  # recovery never ran: the running stream's log is untouched


# -- one status file per receiver attempt --------------------------------------------------------


class FakeRdd:
    def __init__(self, data: list[Any]) -> None:
        self.data = data

    def foreachPartition(self, fn: Any) -> None:
        fn(iter(self.data))


class FakeSc:
    master, defaultParallelism, applicationId = "local[4]", 4, "app-1"

    def addJobTag(self, _tag: str) -> None:
        pass

    def setLocalProperty(self, _key: str, _value: str) -> None:
        pass

    def cancelJobsWithTag(self, _tag: str) -> None:
        pass

    def parallelize(self, data: list[Any], _n: int) -> FakeRdd:
        return FakeRdd(data)


class FakeSpark:
    sparkContext = FakeSc()


def test_a_dead_attempts_last_counts_survive_its_restart(tmp_path: Path) -> None:
    root = control(tmp_path)
    config = receiver_stream_config(
        {"bootstrap.servers": "b:9092", "group.id": "g"},
        ["t"],
        batch_interval=1.0,
        num_receivers=1,
        write_ahead_log=True,
        wal_dir=root,
        max_rate_per_receiver=None,
        max_pending_blocks=None,
        block_interval=0.2,
        include_headers=False,
        retained_batches=10,
    )
    release = threading.Event()

    def task(spec: ReceiverSpec, _rows: Any) -> None:
        status = ReceiverStatus(spec.receiver, spec.run, attempt=spec.attempt, state="running")
        status.accept_refused = 3 if spec.attempt == 0 else 1
        write_status(spec.root, status)
        if spec.attempt == 0:
            raise RuntimeError("the worker died")  # its counts are in its last report only
        release.wait(10.0)

    supervisor = ReceiverSupervisor(
        FakeSpark(),
        config,
        root,
        "run-1",
        on_failure=lambda exc: None,
        policy=lambda: RestartPolicy(delay_s=0.0),
        task=task,
    )
    supervisor.start()
    try:
        deadline = time.monotonic() + 10.0
        while read_status(root, 0, 1) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        counts = LockWatch().since_last(
            [(s.receiver, s.attempt, 0, s.accept_refused) for s in supervisor.all_statuses()]
        )
        assert counts.refused_accepts == 4  # 3 from the dead attempt, 1 from the new one
        assert [s.attempt for s in supervisor.statuses()] == [1]
        assert read_status(root, 0, 0) is None  # read once, kept by the driver
    finally:
        release.set()
        supervisor.stop(graceful=False)
    # Stopped: marked so in driver.json, and the next start need not wait for its beat.
    clock = Clock()
    assert DriverBeacon(root, "next").claim(wait_s=6.0, clock=clock, sleep=clock.sleep) is None
    assert clock.slept == 0


def test_a_receiver_given_up_on_still_shows_its_error(tmp_path: Path) -> None:
    root = control(tmp_path)
    config = receiver_stream_config(
        {"bootstrap.servers": "b:9092", "group.id": "g"},
        ["t"],
        batch_interval=1.0,
        num_receivers=1,
        write_ahead_log=True,
        wal_dir=root,
        max_rate_per_receiver=None,
        max_pending_blocks=None,
        block_interval=0.2,
        include_headers=False,
        retained_batches=10,
    )
    failures: list[BaseException] = []

    def task(spec: ReceiverSpec, _rows: Any) -> None:
        status = ReceiverStatus(spec.receiver, spec.run, attempt=spec.attempt, state="failed")
        status.error, status.fatal = "ConfigurationError: a bad setting", True
        write_status(spec.root, status)
        raise RuntimeError("failed")

    supervisor = ReceiverSupervisor(
        FakeSpark(), config, root, "run-1", on_failure=failures.append, task=task
    )
    supervisor.start()
    try:
        deadline = time.monotonic() + 10.0
        while not failures and time.monotonic() < deadline:
            time.sleep(0.01)
        [status] = supervisor.statuses()
        assert status.state == "failed" and status.error == "ConfigurationError: a bad setting"
        assert len(supervisor.all_statuses()) == 1
    finally:
        supervisor.stop(graceful=False)
