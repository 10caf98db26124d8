"""Spark's own Kafka connector (``org.apache.spark:spark-sql-kafka-0-10_2.13``) as a test oracle.
Runs in the test or benchmark process, before the Spark driver's JVM starts.

``format("kafka")`` lives in a jar that PySpark does not ship. :func:`spark_kafka_jars` fetches
the connector and its runtime dependencies once into a cache, with
:func:`~kafka_direct.testing.jars.fetch_maven_jars` (PySpark's own Ivy, no Maven needed), and
returns their local paths; :func:`spark_kafka_conf`
turns them into the ``spark.jars`` setting a local session needs. ``spark.jars`` only takes
effect when the JVM starts: pass it to the first session of the process.

Which version: Spark connectors are built against one Spark minor, so the one matching the
installed PySpark is wanted. Maven Central may not have it yet (PySpark can reach PyPI before the
connector reaches Central). Then :func:`spark_kafka_jars` fails and says so; ``nearest=True``
takes the newest release of the same major version below it instead, and
:func:`connector_version` tells the caller which one it got, so a test report can say so.
The differential suite does not run on such a mix: :func:`oracle_spark_version` names the PySpark
it pins instead (``scripts/oracle-venv.sh`` installs it in a virtualenv of its own), and
``python -m kafka_direct.testing.spark_connector --oracle-pyspark`` prints it for that script.

Jars that PySpark already ships (Scala, slf4j, the Hadoop client, compression codecs) are left
out: the JVM would load PySpark's copies first anyway, and a second copy only invites conflicts.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
import urllib.request
from pathlib import Path

from kafka_direct.errors import KafkaDirectError
from kafka_direct.testing.jars import (
    JarFetchError,
    _repository,
    fetch_maven_jars,
    jar_cache_root,
)

__all__ = [
    "CONNECTOR",
    "SparkConnectorError",
    "connector_metadata",
    "connector_version",
    "installed_spark_version",
    "main",
    "newest_release_below",
    "oracle_spark_version",
    "spark_kafka_conf",
    "spark_kafka_jars",
]

#: Maven coordinates (group, artifact) of Spark's Kafka connector for Scala 2.13.
CONNECTOR = ("org.apache.spark", "spark-sql-kafka-0-10_2.13")

_METADATA_TIMEOUT_S = 30
# A new connector release is rare: the version list is read again after a day, and a stale copy
# serves when the repository cannot be reached.
_METADATA_MAX_AGE_S = 24 * 3600


class SparkConnectorError(KafkaDirectError):
    """Spark's Kafka connector could not be fetched for the requested version."""


def installed_spark_version() -> str:
    """The installed PySpark's version, e.g. ``4.2.0``."""
    import pyspark

    return str(pyspark.__version__)


def spark_kafka_jars(version: str | None = None, *, nearest: bool = False) -> list[Path]:
    """Local paths of Spark's Kafka connector and the runtime jars PySpark lacks.

    ``version`` defaults to ``KAFKA_DIRECT_SPARK_CONNECTOR_VERSION``, else the installed PySpark's.
    With ``nearest=True``, a version the repository does not serve is replaced by the newest
    release of the same major version below it (:func:`oracle_spark_version`, on the version list
    that :func:`connector_metadata` reads again once a day; :func:`connector_version` says which
    one was taken). The first call downloads (a minute at most); later calls read the cache.
    """
    wanted = version or os.environ.get("KAFKA_DIRECT_SPARK_CONNECTOR_VERSION")
    wanted = wanted or installed_spark_version()
    if nearest:
        wanted = oracle_spark_version(connector_metadata(), wanted)
    try:
        jars = fetch_maven_jars(
            [f"{CONNECTOR[0]}:{CONNECTOR[1]}:{wanted}"], f"spark-sql-kafka-{wanted}"
        )
    except JarFetchError as exc:
        raise SparkConnectorError(
            f"Maven Central has no {':'.join(CONNECTOR)}:{wanted} (PySpark "
            f"{installed_spark_version()} is installed). Pass nearest=True to take the "
            "newest published connector of the same major version, set "
            "KAFKA_DIRECT_SPARK_CONNECTOR_VERSION, or run on a PySpark whose connector Central "
            f"serves (scripts/oracle-venv.sh pins one). ({exc})"
        ) from exc
    shipped = {_artifact(j.name) for j in _pyspark_jars_dir().glob("*.jar")}
    # PySpark's own copies would be loaded first anyway; a second copy only invites conflicts.
    return [j for j in jars if _artifact(j.name) not in shipped]


def connector_version(jars: list[Path]) -> str:
    """The connector's version among ``jars`` (what :func:`spark_kafka_jars` actually got)."""
    prefix = f"{CONNECTOR[1]}-"
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


def connector_metadata() -> str:
    """The connector's ``maven-metadata.xml`` (its list of published versions).

    Cached beside the jars for a day; when the repository cannot be reached, an older copy is
    used rather than none.
    """
    group, artifact = CONNECTOR
    url = f"{_repository()}{group.replace('.', '/')}/{artifact}/maven-metadata.xml"
    cached = jar_cache_root() / f"{artifact}-maven-metadata.xml"
    if cached.is_file() and time.time() - cached.stat().st_mtime < _METADATA_MAX_AGE_S:
        return cached.read_text()
    try:
        with urllib.request.urlopen(url, timeout=_METADATA_TIMEOUT_S) as answer:
            metadata = str(answer.read().decode())
    except OSError as exc:
        if cached.is_file():
            return cached.read_text()
        raise SparkConnectorError(
            f"Could not list the versions of {artifact} at {url}: {exc}"
        ) from exc
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_name(f".{cached.name}.{os.getpid()}")
    partial.write_text(metadata)
    partial.replace(cached)  # atomic: parallel test workers never read half a file
    return metadata


def oracle_spark_version(maven_metadata: str, installed: str) -> str:
    """The PySpark version to run Spark's connector on, next to ``format("kafka_direct")``.

    ``installed`` when the repository's ``maven-metadata.xml`` lists the connector of that very
    version; else the newest release of the same major version below it (a connector runs only on
    the Spark minor it was built for, so the suite pins that PySpark rather than mixing them).
    """
    if installed in re.findall(r"<version>([^<]+)</version>", maven_metadata):
        return installed
    return newest_release_below(maven_metadata, installed)


def newest_release_below(maven_metadata: str, version: str) -> str:
    """From a ``maven-metadata.xml``: the newest release (no ``-preview``) of ``version``'s major
    version, below ``version``."""
    wanted = _version_key(version)
    releases = [
        v
        for v in re.findall(r"<version>([^<]+)</version>", maven_metadata)
        if re.fullmatch(r"\d+\.\d+\.\d+", v)
        and _version_key(v)[0] == wanted[0]
        and _version_key(v) < wanted
    ]
    if not releases:
        raise SparkConnectorError(
            f"Maven Central has no {CONNECTOR[1]} release of major version {wanted[0]} "
            f"below {version}"
        )
    return str(max(releases, key=_version_key))


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def _artifact(file_name: str) -> str:
    """The artifact name of a jar file: ``kafka-clients`` for ``kafka-clients-3.9.2.jar``."""
    stem = file_name[: -len(".jar")]
    match = re.match(r"^(.+?)-\d+\.\d", stem)
    return match.group(1) if match else stem


def main(argv: list[str] | None = None) -> int:
    """``--oracle-pyspark``: print the PySpark version the differential suite runs on (first
    line) and why (second line); ``--fetch VERSION``: fetch that connector into the cache."""
    parser = argparse.ArgumentParser(prog="python -m kafka_direct.testing.spark_connector")
    parser.add_argument(
        "--oracle-pyspark",
        action="store_true",
        help="print the PySpark version whose connector Maven Central serves, and why",
    )
    parser.add_argument("--fetch", metavar="VERSION", help="fetch this connector version's jars")
    args = parser.parse_args(argv)
    if args.fetch:
        jars = spark_kafka_jars(args.fetch)
        sys.stdout.write(f"{len(jars)} jars in {jars[0].parent}\n")
    if args.oracle_pyspark:
        installed = installed_spark_version()
        version = oracle_spark_version(connector_metadata(), installed)
        coordinate = ":".join(CONNECTOR)
        why = (
            f"Maven Central serves {coordinate}:{installed}, the installed PySpark's connector"
            if version == installed
            else f"Maven Central has no {coordinate}:{installed} for the installed PySpark "
            f"{installed}; {version} is the newest connector of major version "
            f"{installed.split('.')[0]} it serves"
        )
        sys.stdout.write(f"{version}\n{why}\n")
    if not (args.fetch or args.oracle_pyspark):
        parser.print_usage(sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
