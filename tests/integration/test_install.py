"""kafka-direct installed as users install it: scripts/install-check.sh runs the README's install
lines as written (they build the sdist and the manylinux wheel, and install the wheel into a
fresh virtualenv), then installs the sdist into another fresh virtualenv with no C compiler on
the PATH, and runs the smoke set (scripts/install_smoke.py) in each, from outside the checkout,
against this session's real Kafka and a local Spark of each virtualenv's own."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.serial, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_and_the_sdist_install_and_pass_the_smoke_set(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=kafka_bootstrap, TMPDIR=str(tmp_path))
    # The test's own interpreter settings must not leak into the fresh virtualenvs.
    for name in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV"):
        env.pop(name, None)
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "install-check.sh")],
        capture_output=True,
        text=True,
        env=env,
        timeout=1200,
        check=False,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    for line in (
        "the C fast paths are loaded",
        "without a compiler: the Python path, and the line says why",
        "a stream restarted from its checkpoint reads each record once",
        "Both artifacts installed and passed the smoke set",
    ):
        assert line in output, output[-6000:]
    assert output.count("[smoke] all checks passed") == 2
