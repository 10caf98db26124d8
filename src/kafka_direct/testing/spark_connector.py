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

Jars that PySpark already ships (Scala, slf4j, the Hadoop client, compression codecs) are left
out: the JVM would load PySpark's copies first anyway, and a second copy only invites conflicts.
"""

from __future__ import annotations

import os
import re
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
    "connector_version",
    "installed_spark_version",
    "newest_release_below",
    "spark_kafka_conf",
    "spark_kafka_jars",
]

#: Maven coordinates (group, artifact) of Spark's Kafka connector for Scala 2.13.
CONNECTOR = ("org.apache.spark", "spark-sql-kafka-0-10_2.13")

_METADATA_TIMEOUT_S = 30


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
    release of the same major version below it (:func:`connector_version` says which one was
    taken; the choice is cached beside the jars). The first call downloads (a minute at most);
    later calls read the cache.
    """
    wanted = version or os.environ.get("KAFKA_DIRECT_SPARK_CONNECTOR_VERSION")
    wanted = wanted or installed_spark_version()
    choice = jar_cache_root() / f"spark-sql-kafka-{wanted}-nearest.txt"
    if nearest and choice.is_file():
        wanted = choice.read_text().strip()
    try:
        jars = fetch_maven_jars(
            [f"{CONNECTOR[0]}:{CONNECTOR[1]}:{wanted}"], f"spark-sql-kafka-{wanted}"
        )
    except JarFetchError as exc:
        if not nearest:
            raise SparkConnectorError(
                f"Maven Central has no {':'.join(CONNECTOR)}:{wanted} (PySpark "
                f"{installed_spark_version()} is installed). Pass nearest=True to take the "
                "newest published connector of the same major version, set "
                "KAFKA_DIRECT_SPARK_CONNECTOR_VERSION, or pin pyspark to a version Central "
                f"serves. ({exc})"
            ) from exc
        older = _newest_release_below(wanted)
        jars = spark_kafka_jars(older)
        choice.parent.mkdir(parents=True, exist_ok=True)
        choice.write_text(older + "\n")
        return jars
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


def _newest_release_below(version: str) -> str:
    """The newest released connector (no ``-preview``) of ``version``'s major, below it."""
    group, artifact = CONNECTOR
    url = f"{_repository()}{group.replace('.', '/')}/{artifact}/maven-metadata.xml"
    try:
        with urllib.request.urlopen(url, timeout=_METADATA_TIMEOUT_S) as answer:
            metadata = answer.read().decode()
    except OSError as exc:
        raise SparkConnectorError(
            f"Could not list the versions of {artifact} at {url}: {exc}"
        ) from exc
    return newest_release_below(metadata, version)


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
