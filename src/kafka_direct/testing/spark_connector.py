"""Spark's own Kafka connector (``org.apache.spark:spark-sql-kafka-0-10_2.13``) as a test oracle.
Runs in the test or benchmark process, before the Spark driver's JVM starts.

``format("kafka")`` lives in a jar that PySpark does not ship. :func:`spark_kafka_jars` fetches
the connector and its runtime dependencies once into a cache, with the Apache Ivy that PySpark
ships among its own jars (no Maven needed), and returns their local paths; :func:`spark_kafka_conf`
turns them into the ``spark.jars`` setting a local session needs. ``spark.jars`` only takes
effect when the JVM starts: pass it to the first session of the process.

Which version: Spark connectors are built against one Spark minor, so the one matching the
installed PySpark is wanted. Maven Central may not have it yet (PySpark can reach PyPI before the
connector reaches Central). Then :func:`spark_kafka_jars` fails and names the newest connector
that Central has; ``nearest=True`` takes that one instead, and :func:`connector_version` tells the
caller which one it got, so a test report can say so.

Jars that PySpark already ships (Scala, slf4j, the Hadoop client, compression codecs) are left
out: the JVM would load PySpark's copies first anyway, and a second copy only invites conflicts.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from kafka_direct.errors import KafkaDirectError

__all__ = [
    "CONNECTOR",
    "SparkConnectorError",
    "connector_version",
    "installed_spark_version",
    "spark_kafka_conf",
    "spark_kafka_jars",
]

#: Maven coordinates (group, artifact) of Spark's Kafka connector for Scala 2.13.
CONNECTOR = ("org.apache.spark", "spark-sql-kafka-0-10_2.13")

_IVY_TIMEOUT_S = 600


class SparkConnectorError(KafkaDirectError):
    """Spark's Kafka connector could not be fetched for the requested version."""


def installed_spark_version() -> str:
    """The installed PySpark's version, e.g. ``4.2.0``."""
    import pyspark

    return str(pyspark.__version__)


def default_cache_dir() -> Path:
    """``KAFKA_DIRECT_JAR_CACHE``, else ``~/.cache/kafka_direct/jars`` (kept between runs)."""
    env = os.environ.get("KAFKA_DIRECT_JAR_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "kafka_direct" / "jars"


def spark_kafka_jars(
    version: str | None = None, *, nearest: bool = False, cache_dir: Path | None = None
) -> list[Path]:
    """Local paths of Spark's Kafka connector and the runtime jars PySpark lacks.

    ``version`` defaults to ``KAFKA_DIRECT_SPARK_CONNECTOR_VERSION``, else the installed PySpark's.
    With ``nearest=True``, a version Central does not serve is replaced by the newest one of the
    same major version not above it (see :func:`connector_version` for which one was taken).
    The first call downloads (a minute at most); later calls read the cache.
    """
    wanted = version or os.environ.get("KAFKA_DIRECT_SPARK_CONNECTOR_VERSION")
    wanted = wanted or installed_spark_version()
    base = (cache_dir or default_cache_dir()) / "spark-sql-kafka"
    exact = base / wanted
    # A fallback is cached apart from the exact version, so that a later strict call for the
    # same version cannot be answered with the fallback.
    fallback = base / f"{wanted}-or-older"
    if (exact / "jars.txt").exists():
        manifest = exact / "jars.txt"
    elif nearest and (fallback / "jars.txt").exists():
        manifest = fallback / "jars.txt"
    else:
        try:
            _retrieve(wanted, exact)
            manifest = exact / "jars.txt"
        except SparkConnectorError:
            if not nearest:
                raise
            major = wanted.split(".", 1)[0]
            _retrieve(f"[{major}.0.0,{wanted}]", fallback)
            manifest = fallback / "jars.txt"
    return [Path(line) for line in manifest.read_text().splitlines() if line]


def connector_version(jars: list[Path]) -> str:
    """The connector's version among ``jars`` (what :func:`spark_kafka_jars` actually got)."""
    prefix = f"{CONNECTOR[0]}__{CONNECTOR[1]}-"
    for jar in jars:
        if jar.name.startswith(prefix):
            return jar.name[len(prefix) : -len(".jar")]
    raise SparkConnectorError(f"No {CONNECTOR[1]} jar among {[j.name for j in jars]}")


def spark_kafka_conf(jars: list[Path]) -> dict[str, str]:
    """The Spark settings that put ``jars`` on the driver's and executors' class path."""
    return {"spark.jars": ",".join(str(j) for j in jars)}


def _pyspark_jars_dir() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise SparkConnectorError(
            "No Java found to run Ivy: set JAVA_HOME to a Java 17+ installation "
            "(scripts/setup.sh finds or installs one)."
        )
    return java


def _retrieve(revision: str, root: Path) -> None:
    """Resolve ``revision`` (a version or an Ivy range) with Ivy; write ``root/jars.txt``."""
    jars_dir = _pyspark_jars_dir()
    ivy = sorted(jars_dir.glob("ivy-*.jar"))
    if not ivy:
        raise SparkConnectorError(f"PySpark ships no Apache Ivy jar in {jars_dir}")
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="retrieve-", dir=root))
    cmd = [
        _java(), "-jar", str(ivy[-1]),
        "-dependency", CONNECTOR[0], CONNECTOR[1], revision,
        "-confs", "default",
        "-cache", str(root.parent / "ivy-cache"),
        "-retrieve", f"{staging}/[organisation]__[artifact]-[revision](-[classifier]).[ext]",
    ]  # fmt: skip
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=_IVY_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise SparkConnectorError(
            f"Ivy did not resolve {':'.join(CONNECTOR)}:{revision} in {_IVY_TIMEOUT_S} s"
        ) from exc
    fetched = sorted(staging.glob("*.jar"))
    if done.returncode != 0 or not any(CONNECTOR[1] in j.name for j in fetched):
        shutil.rmtree(staging, ignore_errors=True)
        tail = "\n".join(done.stdout.splitlines()[-15:] + done.stderr.splitlines()[-5:])
        raise SparkConnectorError(
            f"Maven Central has no {':'.join(CONNECTOR)}:{revision} (PySpark "
            f"{installed_spark_version()} is installed). Pass nearest=True to take the newest "
            "published connector of the same major version, set "
            "KAFKA_DIRECT_SPARK_CONNECTOR_VERSION, or pin pyspark to a version Central "
            f"serves. Ivy said:\n{tail}"
        )
    shipped = {_artifact(j.name) for j in jars_dir.glob("*.jar")}
    kept: list[Path] = []
    for jar in fetched:
        if _artifact(jar.name, ivy_name=True) in shipped:
            continue
        target = root / jar.name
        os.replace(jar, target)
        kept.append(target)
    shutil.rmtree(staging, ignore_errors=True)
    # Written last and atomically: its presence means the cache entry is complete.
    tmp = root / "jars.txt.tmp"
    tmp.write_text("".join(f"{j}\n" for j in kept))
    os.replace(tmp, root / "jars.txt")


def _artifact(file_name: str, *, ivy_name: bool = False) -> str:
    """The artifact name of a jar file: ``kafka-clients`` for ``kafka-clients-3.9.2.jar``."""
    stem = file_name[: -len(".jar")]
    if ivy_name:
        stem = stem.split("__", 1)[-1]
    match = re.match(r"^(.+?)-\d+\.\d", stem)
    return match.group(1) if match else stem
