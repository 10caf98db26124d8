"""Which local Sparks get kafka_direct's worker daemon: only those whose Python workers run the
driver's interpreter, where kafka_direct is installed."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from kafka_direct.testing.local import DAEMON_MODULE, worker_daemon_conf

DAEMON = {"spark.python.daemon.module": DAEMON_MODULE}


def _link(tmp_path: Path) -> str:
    link = tmp_path / "python"
    link.symlink_to(sys.executable)
    return str(link)


@pytest.mark.parametrize(
    ("pyspark_python", "expected"),
    [
        (None, DAEMON),  # unset: local_spark makes it this interpreter
        (sys.executable, DAEMON),
        ("link", DAEMON),  # another name for this interpreter
        ("python3", {}),  # looked up on the workers' PATH: maybe another interpreter
        ("/nonexistent/python", {}),
        ("other", {}),  # another interpreter, where kafka_direct may be missing
    ],
)
def test_the_daemon_only_for_this_interpreter(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    pyspark_python: str | None,
    expected: dict[str, str],
) -> None:
    if pyspark_python is None:
        monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    elif pyspark_python == "link":
        monkeypatch.setenv("PYSPARK_PYTHON", _link(tmp_path))
    elif pyspark_python == "other":
        other = tmp_path / "other-python"
        other.write_text("#!/bin/sh\n")
        os.chmod(other, 0o755)
        monkeypatch.setenv("PYSPARK_PYTHON", str(other))
    else:
        monkeypatch.setenv("PYSPARK_PYTHON", pyspark_python)
    assert worker_daemon_conf() == expected
