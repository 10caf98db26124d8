"""Speculative tasks on a real Spark: a batch write with ``spark.speculation=true`` on a
standalone cluster whose two workers are on distinct loopback hosts, into real Apache Kafka.

Spark partition 0's first attempt writes rows into its open transaction and stalls upstream
of the sink (``speculation_driver.py``); Spark starts a speculative copy on the other
host, which fences the first attempt (the same transactional id) and commits. The test checks
that speculation really happened (two attempts of partition 0, on two hosts), that the first
attempt's rows did reach Kafka (aborted, seen under ``read_uncommitted``), and that
``read_committed`` readers see every row exactly once.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafka_direct.testing import StandaloneCluster
from tests.integration.kafka_helpers import create_topic, read_values
from tests.integration.speculation_driver import value

pytestmark = pytest.mark.serial

DRIVER = Path(__file__).with_name("speculation_driver.py")
ROWS = 200
HOSTS = ("127.0.0.1", "127.0.0.2")


@pytest.fixture()
def two_hosts() -> Iterator[StandaloneCluster]:
    cluster = StandaloneCluster(workers=2, worker_hosts=HOSTS).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def test_a_speculative_copy_and_its_original_commit_once(
    two_hosts: StandaloneCluster, kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = f"speculation-{uuid.uuid4().hex[:10]}"
    create_topic(kafka_bootstrap, topic, partitions=1)
    attempts = tmp_path / "attempts"
    attempts.mkdir()
    log = tmp_path / "driver.log"
    args = [two_hosts.master_url, kafka_bootstrap, topic, str(attempts), "exactly-once"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    with open(log, "wb") as out:
        driver = subprocess.run(
            [sys.executable, str(DRIVER), *args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            timeout=300,
            check=False,
        )
    said = log.read_text(errors="replace")
    assert driver.returncode == 0 and "WRITTEN" in said, said[-4000:]

    # Speculation happened: partition 0 ran twice, on both hosts.
    seen = sorted(p.name for p in attempts.iterdir())
    first = sorted(name.split("-", 2)[2] for name in seen if name.startswith("0-"))
    assert len(first) == 2 and set(first) == set(HOSTS), seen

    expected = sorted(value(i) for i in range(ROWS))
    committed = read_values(kafka_bootstrap, topic, "read_committed")
    counts = collections.Counter(committed)
    assert sum(n - 1 for n in counts.values()) == 0, "duplicates under read_committed"
    assert sorted(committed) == expected
    # The stalled attempt's first rows reached Kafka before its copy fenced it: both copies
    # wrote, and only one copy's rows count.
    everything = read_values(kafka_bootstrap, topic, "read_uncommitted")
    aborted = collections.Counter(everything) - counts
    assert aborted, f"the first attempt wrote nothing before its copy: nothing was proven ({seen})"
    assert set(aborted) <= {value(i) for i in range(50)}, "aborted rows of another task"
    print(f"{sum(aborted.values())} row(s) of the fenced first attempt, aborted")
