"""Which interpreter Spark's Python workers run for kafka_direct, in a real local Spark started
the way users start it: a driver script run with the virtualenv's Python, without
``PYSPARK_PYTHON`` and without the virtualenv on ``PATH`` (issue "Faults": the read failed after
7 s with a 34-line traceback ending in "No module named 'kafka_direct'")."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.integration.kafka_helpers import produce_known

DRIVER = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession
    import kafka_direct

    spark = (SparkSession.builder.master("local[1]")
             .config("spark.ui.enabled", "false")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.driver.host", "127.0.0.1").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    kafka_direct.register(spark)
    try:
        n = (spark.read.format("kafka_direct")
             .option("kafka.bootstrap.servers", sys.argv[1])
             .option("subscribe", sys.argv[2]).load().count())
        print("COUNT", n)
    except Exception as exc:
        print("ERROR", " ".join(str(exc).split()))
    spark.stop()
    """
)


def _run(tmp_path: Path, bootstrap: str, topic: str, pyspark_python: str | None) -> str:
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    venv_bin = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "VIRTUAL_ENV")}
    env.pop("PYSPARK_DRIVER_PYTHON", None)
    # As in a shell where the virtualenv is not activated: its bin is not on PATH.
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if p and p != venv_bin
    )
    if pyspark_python is not None:
        env["PYSPARK_PYTHON"] = pyspark_python
    out = subprocess.run(
        [sys.executable, str(script), bootstrap, topic],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=240,
    )  # fmt: skip
    lines = [line for line in out.stdout.splitlines() if line.startswith(("COUNT", "ERROR"))]
    assert lines, f"driver printed nothing:\n{out.stdout}\n{out.stderr[-3000:]}"
    return lines[-1]


def test_without_pyspark_python_a_local_spark_runs_the_drivers_interpreter(
    tmp_path, kafka_bootstrap, make_topic
):
    topic = make_topic(partitions=2, prefix="worker-python")
    produce_known(kafka_bootstrap, topic, per_partition=7, partitions=2)
    assert _run(tmp_path, kafka_bootstrap, topic, None) == "COUNT 14"


def test_a_worker_interpreter_without_kafka_direct_names_the_fix(
    tmp_path, kafka_bootstrap, make_topic
):
    topic = make_topic(prefix="worker-python")
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    line = _run(tmp_path, kafka_bootstrap, topic, str(base))
    assert line.startswith("ERROR"), line
    started = "kafka_direct is not installed in the Python interpreter Spark started for its"
    assert f"{started} workers, {base}" in line
    assert "PYSPARK_PYTHON" in line
