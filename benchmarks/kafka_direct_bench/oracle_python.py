"""The PySpark that Spark's own Kafka connector was built for, for the benchmarks that run both
formats in one Spark. Runs in the benchmark process, before Spark starts.

A connector runs only on the Spark minor it was built for: Spark's 4.2.0 connector inside PySpark
4.3.0 is a mix the differential suite refuses as invalid, and a benchmark on it measures nothing
a user runs. So when Maven Central has no connector for the PySpark this process imports,
:func:`run_on_oracle_pyspark` starts the same command again under the interpreter of the
virtualenv that ``scripts/oracle-venv.sh`` pins (``.venv-oracle``, or
``KAFKA_DIRECT_ORACLE_VENV``), with this checkout's ``src/`` first on the path: both formats then
run on that PySpark, kafka_direct included, and the report says which.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

#: Set in the re-started command, so it never re-starts itself again.
_REEXEC_ENV = "KAFKA_DIRECT_BENCH_ORACLE_REEXEC"


def oracle_venv() -> Path:
    return Path(os.environ.get("KAFKA_DIRECT_ORACLE_VENV", ROOT / ".venv-oracle"))


def run_on_oracle_pyspark(script: str, argv: list[str]) -> None:
    """Return when this process's PySpark has its own connector on Maven Central; else run
    ``script argv`` under the oracle virtualenv's interpreter and exit with its status.

    Fails, naming the fix, when that virtualenv does not exist or pins another version."""
    from kafka_direct.testing.spark_connector import (
        connector_metadata,
        installed_spark_version,
        oracle_spark_version,
    )

    installed = installed_spark_version()
    wanted = oracle_spark_version(connector_metadata(), installed)
    if wanted == installed:
        return
    if os.environ.get(_REEXEC_ENV):
        raise SystemExit(
            f"The oracle interpreter {sys.executable} has PySpark {installed}, but Spark's Kafka "
            f"connector is published for {wanted}: remove {oracle_venv()} and run "
            "scripts/oracle-venv.sh --prepare again."
        )
    python = oracle_venv() / "bin" / "python"
    if not python.exists():
        raise SystemExit(
            f"PySpark {installed} has no Kafka connector on Maven Central (the newest is "
            f"{wanted}), and Spark's connector must run on the PySpark it was built for. Make "
            f"the pinned virtualenv with `bash scripts/oracle-venv.sh --prepare` (or point "
            "KAFKA_DIRECT_ORACLE_VENV at one), then run this command again."
        )
    # KAFKA_DIRECT_BENCH_SRC: another checkout's src/ (a before/after comparison, same command).
    src = os.environ.get("KAFKA_DIRECT_BENCH_SRC") or str(ROOT / "src")
    path = os.pathsep.join([src, str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    if os.environ.get("KAFKA_DIRECT_BENCH_SRC"):
        # Only that checkout's kafka_direct: drop this one's src/ from the inherited path.
        path = os.pathsep.join(p for p in path.split(os.pathsep) if p != str(ROOT / "src"))
    env = dict(
        os.environ,
        PYTHONPATH=path,
        PYSPARK_PYTHON=str(python),
        PYSPARK_DRIVER_PYTHON=str(python),
        VIRTUAL_ENV=str(python.parent.parent),
        **{_REEXEC_ENV: "1"},
    )
    print(
        f"[bench] PySpark {installed} has no Kafka connector on Maven Central: running on "
        f"PySpark {wanted} in {python.parent.parent} (scripts/oracle-venv.sh), both formats",
        file=sys.stderr,
        flush=True,
    )
    raise SystemExit(subprocess.call([str(python), script, *argv], env=env))


def versions(spark: Any, connector: str | None) -> dict[str, str]:
    """What a report must name: Python, PySpark, the connector, the Kafka clients, the commit."""
    import confluent_kafka
    import pyarrow

    import kafka_direct

    try:
        commit = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    except OSError:
        commit = ""
    return {
        "python": platform.python_version(),
        "pyspark": str(spark.version),
        "spark_kafka_connector": connector or "none",
        "confluent_kafka": str(getattr(confluent_kafka, "__version__", "?")),
        "librdkafka": confluent_kafka.libversion()[0],
        "pyarrow": pyarrow.__version__,
        "kafka_direct_commit": commit or "unknown",
        # Which checkout's code ran (KAFKA_DIRECT_BENCH_SRC may name another than the commit's).
        "kafka_direct": str(Path(kafka_direct.__file__).parent),
        "interpreter": sys.executable,
    }


def add_formats_option(parser: Any) -> None:
    """``--formats`` of a benchmark that runs kafka_direct beside Spark's connector."""
    parser.add_argument(
        "--formats",
        default="kafka_direct,kafka",
        help="comma-separated: kafka_direct, kafka (Spark's connector)",
    )


def chosen_formats(value: str, script: str) -> list[str]:
    """The formats ``--formats`` names. With Spark's connector among them, this process goes on
    only on the PySpark the connector was built for (:func:`run_on_oracle_pyspark`)."""
    formats = [f for f in value.split(",") if f]
    if "kafka" in formats:
        run_on_oracle_pyspark(script, sys.argv[1:])
    return formats
