"""A Spark worker SIGKILLed under a running stream, on a real standalone cluster: its executor
and Python workers die with it, Spark runs the lost tasks on the other executor, and the
idempotent sink ends with every record exactly once.

The driver runs in a subprocess (``stream_driver.py``): Spark allows one SparkContext per
process, and this one belongs to the suite's local session.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafka_direct.testing import StandaloneCluster
from tests.integration.kafka_helpers import produce_known

DRIVER = Path(__file__).with_name("stream_driver.py")
PER_PARTITION = 600


@pytest.fixture()
def standalone() -> Iterator[StandaloneCluster]:
    cluster = StandaloneCluster(workers=2).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def _count(db: Path) -> int:
    try:
        with sqlite3.connect(db) as conn:
            return int(conn.execute("SELECT count(*) FROM records").fetchone()[0])
    except sqlite3.OperationalError:
        return 0  # the driver has not created the table yet


def _wait_rows(db: Path, driver: subprocess.Popen[bytes], at_least: int, log: Path) -> int:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        n = _count(db)
        if n >= at_least:
            return n
        if driver.poll() is not None:
            pytest.fail(f"driver exited ({driver.returncode}); log:\n{log.read_text()[-4000:]}")
        time.sleep(0.2)
    pytest.fail(
        f"timed out waiting for {at_least} rows (have {_count(db)}); log:\n"
        f"{log.read_text()[-4000:]}"
    )


def test_a_worker_killed_mid_stream_loses_and_repeats_nothing(
    standalone, make_topic, kafka_bootstrap, tmp_path
):
    topic = make_topic(partitions=2)
    produced = produce_known(kafka_bootstrap, topic, per_partition=PER_PARTITION, partitions=2)
    db, log = tmp_path / "sink.db", tmp_path / "driver.log"
    args = [standalone.master_url, kafka_bootstrap, topic, str(tmp_path / "ck"), str(db)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    with open(log, "wb") as out:
        driver = subprocess.Popen(
            [sys.executable, str(DRIVER), *args],
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        seen = _wait_rows(db, driver, len(produced) // 4, log)
        standalone.kill_worker(0)
        assert standalone.alive_workers() == 1
        assert seen < len(produced), "the kill should land before the stream is done"
        _wait_rows(db, driver, len(produced), log)
        time.sleep(2)  # a duplicate or stray batch would land now
        assert driver.stdin is not None
        driver.stdin.write(b"stop\n")
        driver.stdin.flush()
        assert driver.wait(timeout=120) == 0, log.read_text()[-4000:]
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, 9)
            driver.wait()

    with sqlite3.connect(db) as conn:
        stored = sorted(conn.execute("SELECT topic, partition, offset, value FROM records"))
        delivered = {(p, o) for p, o in conn.execute("SELECT partition, offset FROM deliveries")}
    assert stored == sorted((r.topic, r.partition, r.offset, r.value) for r in produced)
    assert delivered == {(r.partition, r.offset) for r in produced}
