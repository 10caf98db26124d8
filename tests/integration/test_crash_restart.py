"""The hard one: SIGKILL the driver mid-stream, restart from the checkpoint, and show with an
idempotent sink keyed by (topic, partition, offset) that every record arrived exactly once."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.kafka_helpers import produce_known

DRIVER = Path(__file__).with_name("crash_driver.py")


def _count(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db) as conn:
            return int(conn.execute("SELECT count(*) FROM records").fetchone()[0])
    except sqlite3.OperationalError:
        return 0  # the driver has not created the table yet


def _run_driver(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, str(DRIVER), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # so the kill takes the JVM child too
        )


def _wait_rows(
    db: Path, proc: subprocess.Popen[bytes], at_least: int, timeout_s: float, log: Path
) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        n = _count(db)
        if n >= at_least:
            return n
        if proc.poll() is not None:
            pytest.fail(f"driver exited early ({proc.returncode}); log:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
    pytest.fail(
        f"timed out waiting for {at_least} rows (have {_count(db)}); log:\n"
        f"{log.read_text()[-3000:]}"
    )


def _kill(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


@pytest.mark.slow
def test_sigkill_mid_stream_then_restart_delivers_every_record_exactly_once(
    make_topic, kafka_bootstrap, tmp_path
):
    topic = make_topic(partitions=2)
    produced = produce_known(kafka_bootstrap, topic, per_partition=300, partitions=2)
    db, checkpoint, log = tmp_path / "sink.db", tmp_path / "ck", tmp_path / "driver.log"
    args = [kafka_bootstrap, topic, str(checkpoint), str(db)]

    kills = 0
    for target in (120, 360):  # kill twice, at different points of the stream
        proc = _run_driver(args, log)
        try:
            seen = _wait_rows(db, proc, target, 180, log)
        finally:
            _kill(proc)
        kills += 1
        assert seen < len(produced), "the kill should land before the stream is done"

    proc = _run_driver(args, log)
    try:
        _wait_rows(db, proc, len(produced), 180, log)
        time.sleep(2)  # a duplicate or stray batch would land now
    finally:
        _kill(proc)

    with sqlite3.connect(db) as conn:
        stored = sorted(conn.execute("SELECT topic, partition, offset, value FROM records"))
        delivered = dict(
            conn.execute("SELECT offset, count(*) FROM deliveries GROUP BY offset").fetchall()
        )
    expected = sorted((r.topic, r.partition, r.offset, r.value) for r in produced)
    assert stored == expected  # every record, exactly once, with the right value
    assert kills == 2
    assert set(delivered) == {r.offset for r in produced}
