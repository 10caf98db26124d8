"""The README's main job as written: ``kafka-direct wordcount`` (what scripts/wordcount.sh runs)
on each embedded broker it can start, in a subprocess like a user's shell.

The job checks its own result: every word produced is counted exactly once, or it exits 1 with
MISMATCH. Here the test checks that exit status and the closing line, and that the demo broker
was started and stopped by the job itself (no cluster is given).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest


@pytest.mark.serial
@pytest.mark.parametrize("broker", ["kafka", "tansu"])
def test_the_main_job_counts_every_word_exactly_on_its_own_broker(broker: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP_SERVERS"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kafka_direct.cli",
            "wordcount",
            "--broker",
            broker,
            "--seconds",
            "4",
            "--rate",
            "100",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    out = proc.stdout
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{out}\nstderr:\n{proc.stderr}"
    started = "Apache Kafka" if broker == "kafka" else "Tansu"
    assert "Starting " in out and started in out.splitlines()[0], out
    done = re.search(
        r"Done: (\d+) micro-batches, (\d+) words produced and counted; "
        r"every word's count matches exactly\.",
        out,
    )
    assert done is not None, out
    assert int(done.group(2)) > 0
    assert "MISMATCH" not in out
