"""Fetch Maven artifacts with their runtime dependencies, once, into the user's cache directory.

Plain library: runs in the user's (or the test suite's) process and starts one short JVM.

:func:`fetch_maven_jars` resolves Maven coordinates (``group:artifact:version``) with Apache Ivy,
which every PySpark installation ships among its own jars (``pyspark/jars/ivy-*.jar``; Spark uses
it for ``spark.jars.packages``). So a user needs Java, which PySpark needs anyway, and no Maven.
Ivy is enough: it reads Maven POMs, follows their ``runtime`` scope and retrieves the jars into a
flat directory, which is all a ``-cp DIR/*`` launch needs.

Used for Apache Kafka's broker (:mod:`kafka_direct.testing.kafka_cluster`), and by anyone who
needs other JVM parts in tests (Spark's own Kafka connector, a schema registry)::

    jars = fetch_maven_jars(["org.apache.kafka:kafka_2.13:4.1.1"], "kafka-4.1.1")

The jars land in ``$XDG_CACHE_HOME/kafka_direct/jars/<key>`` (``~/.cache/...`` when unset), where
``<key>`` is the caller's ``cache_name`` plus a short hash of the coordinates, so a new version is
a new directory. A directory counts only once its ``complete`` marker is written, after the last
jar was copied: a fetch that was interrupted is redone, never half-used. A file lock makes
parallel test workers wait for one fetch instead of racing.

Repository: ``~/.m2/repository`` first (what a local Maven build installed), then Maven Central,
or the mirror named by ``KAFKA_DIRECT_MAVEN_REPOSITORY``.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from xml.sax.saxutils import quoteattr

from kafka_direct.errors import KafkaDirectError

__all__ = [
    "JarFetchError",
    "cache_key",
    "fetch_maven_jars",
    "find_ivy_jar",
    "find_java",
    "ivy_module_xml",
    "jar_cache_root",
]

MAVEN_CENTRAL = "https://repo1.maven.org/maven2/"
COMPLETE_MARKER = "complete"
_FETCH_TIMEOUT_S = 1800.0
_COORDINATE = re.compile(r"^[A-Za-z0-9_.\-]+:[A-Za-z0-9_.\-]+:[A-Za-z0-9_.\-+]+$")


class JarFetchError(KafkaDirectError):
    """Java, Ivy or the Maven repository was not there, so the jars could not be fetched."""


def jar_cache_root() -> Path:
    """``$XDG_CACHE_HOME/kafka_direct/jars``, or ``~/.cache/kafka_direct/jars``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kafka_direct" / "jars"


def _validate(coordinates: Sequence[str], cache_name: str) -> None:
    if not coordinates:
        raise JarFetchError("fetch_maven_jars needs at least one Maven coordinate, got none.")
    for coordinate in coordinates:
        if not _COORDINATE.match(coordinate):
            raise JarFetchError(
                f"Invalid Maven coordinate {coordinate!r}: expected 'group:artifact:version', "
                "e.g. 'org.apache.kafka:kafka_2.13:4.1.1'."
            )
    if not re.match(r"^[A-Za-z0-9_.\-]+$", cache_name):
        raise JarFetchError(
            f"Invalid cache_name {cache_name!r}: expected letters, digits, '.', '_' or '-' "
            "(it names a directory), e.g. 'kafka-4.1.1'."
        )


def cache_key(coordinates: Sequence[str], cache_name: str) -> str:
    """The cache directory's name: ``cache_name`` and a hash of the sorted coordinates.

    Order does not matter; any change of version or artifact gives a new key.
    """
    _validate(coordinates, cache_name)
    digest = hashlib.sha256("\n".join(sorted(set(coordinates))).encode()).hexdigest()[:12]
    return f"{cache_name}-{digest}"


def ivy_module_xml(coordinates: Sequence[str]) -> str:
    """An ivy.xml that depends on every coordinate, each in its runtime configuration."""
    lines = [
        '<ivy-module version="2.0">',
        '  <info organisation="kafka_direct" module="jar-fetch"/>',
        "  <dependencies>",
    ]
    for coordinate in coordinates:
        org, name, rev = coordinate.split(":")
        lines.append(
            f"    <dependency org={quoteattr(org)} name={quoteattr(name)} rev={quoteattr(rev)}"
            ' conf="default->default"/>'
        )
    lines += ["  </dependencies>", "</ivy-module>", ""]
    return "\n".join(lines)


def ivy_settings_xml(repository: str, local_m2: Path) -> str:
    """Ivy settings: the local Maven repository first, then ``repository`` (Maven layout)."""
    return "\n".join(
        [
            "<ivysettings>",
            '  <settings defaultResolver="chain"/>',
            "  <resolvers>",
            '    <chain name="chain" returnFirst="true">',
            f'      <ibiblio name="local-m2" m2compatible="true" usepoms="true"'
            f" root={quoteattr(local_m2.as_uri())} checkmodified="
            '"true" changingPattern=".*SNAPSHOT"/>',
            f'      <ibiblio name="central" m2compatible="true" usepoms="true"'
            f" root={quoteattr(repository)}/>",
            "    </chain>",
            "  </resolvers>",
            "</ivysettings>",
            "",
        ]
    )


def find_java() -> str:
    """``$JAVA_HOME/bin/java``, else ``java`` on the PATH; a clear error when neither exists."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which("java")
    if found:
        return found
    raise JarFetchError(
        "No Java found (JAVA_HOME is "
        f"{'unset' if not java_home else repr(java_home)} and there is no 'java' on the PATH): "
        "install Java 17 or newer, e.g. apt-get install openjdk-17-jre-headless, and set JAVA_HOME."
    )


def find_ivy_jar() -> Path:
    """The Apache Ivy jar that the installed PySpark ships (``pyspark/jars/ivy-*.jar``)."""
    spec = importlib.util.find_spec("pyspark")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        found = sorted(Path(location, "jars").glob("ivy-*.jar"))
        if found:
            return found[-1]
    raise JarFetchError(
        "Apache Ivy was not found: it comes with PySpark (pyspark/jars/ivy-*.jar), and "
        f"{'PySpark is not installed' if not locations else 'this PySpark has no jars/ivy-*.jar'}; "
        "install PySpark 4 with pip install 'pyspark>=4'."
    )


def _jars_in(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.suffix == ".jar")


def _ivy_failure(output: str) -> str:
    """The lines of Ivy's output that say what failed (unresolved modules, network errors)."""
    keep = [
        line.strip()
        for line in output.splitlines()
        if re.search(r"unresolved|not found|error|exception|refused|timed out", line, re.I)
    ]
    return (
        "; ".join(dict.fromkeys(keep[:6])) or (output.strip().splitlines() or ["(no output)"])[-1]
    )


def fetch_maven_jars(
    coordinates: Sequence[str],
    cache_name: str,
    *,
    repository: str | None = None,
    timeout_s: float = _FETCH_TIMEOUT_S,
) -> list[Path]:
    """Resolve ``coordinates`` with their runtime dependencies; return the cached jar paths.

    ``coordinates`` are ``group:artifact:version`` strings; ``cache_name`` is a readable prefix of
    the cache key (say ``kafka-4.1.1``). The first call downloads (one JVM running Ivy); later
    calls return the cached list without starting Java. Ivy picks one version of each module when
    several are asked for (the newest, as Maven's "nearest" rule would usually do).

    Raises :class:`JarFetchError` with one sentence when Java or Ivy is missing, a coordinate is
    malformed, or the repository cannot serve a module.
    """
    key = cache_key(coordinates, cache_name)
    root = jar_cache_root()
    target = root / key
    if (target / COMPLETE_MARKER).is_file():
        return _jars_in(target)
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker may be fetching the same key
        if (target / COMPLETE_MARKER).is_file():
            return _jars_in(target)
        shutil.rmtree(target, ignore_errors=True)  # a fetch interrupted before its marker
        _fetch_into(coordinates, target, root, repository or _repository(), timeout_s)
    return _jars_in(target)


def _repository() -> str:
    repo = os.environ.get("KAFKA_DIRECT_MAVEN_REPOSITORY", MAVEN_CENTRAL)
    return repo if repo.endswith("/") else repo + "/"


def _fetch_into(
    coordinates: Sequence[str], target: Path, root: Path, repository: str, timeout_s: float
) -> None:
    java = find_java()
    ivy = find_ivy_jar()
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=root))
    try:
        retrieved = work / "jars"
        (work / "ivy.xml").write_text(ivy_module_xml(coordinates))
        (work / "ivysettings.xml").write_text(
            ivy_settings_xml(repository, Path.home() / ".m2" / "repository")
        )
        command = [
            java,
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-jar",
            str(ivy),
            "-settings",
            str(work / "ivysettings.xml"),
            "-cache",
            str(root / ".ivy-cache"),
            "-ivy",
            str(work / "ivy.xml"),
            "-confs",
            "default",
            "-retrieve",
            f"{retrieved}/[artifact]-[revision](-[classifier]).[ext]",
        ]
        started = time.monotonic()
        try:
            done = subprocess.run(
                command,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise JarFetchError(
                f"Fetching {', '.join(coordinates)} from {repository} took longer than "
                f"{timeout_s:.0f} s: check the network, or set KAFKA_DIRECT_MAVEN_REPOSITORY to a "
                "closer mirror."
            ) from exc
        output = done.stdout + done.stderr
        (work / "ivy.log").write_text(output)
        failed = done.returncode != 0 or "UNRESOLVED DEPENDENCIES" in output
        if failed or not retrieved.is_dir() or not _jars_in(retrieved):
            raise JarFetchError(
                f"Could not fetch {', '.join(coordinates)} from {repository} with Apache Ivy "
                f"(exit {done.returncode}): {_ivy_failure(output)}. Check that the repository is "
                "reachable (or set KAFKA_DIRECT_MAVEN_REPOSITORY to a mirror) and the versions "
                "exist."
            )
        (retrieved / COMPLETE_MARKER).write_text(
            f"fetched in {time.monotonic() - started:.1f} s\n" + "\n".join(coordinates) + "\n"
        )
        os.replace(retrieved, target)  # atomic on one file system; the marker comes with it
    finally:
        shutil.rmtree(work, ignore_errors=True)
