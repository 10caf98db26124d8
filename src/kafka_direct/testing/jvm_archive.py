"""A class-data-sharing archive of a Spark driver's classes, for the drivers a test run starts.

Runs in: the process that prepares a test run (``python -m kafka_direct.testing.jvm_archive``,
which ``scripts/test.sh`` and ``scripts/oracle-venv.sh`` call before pytest), which starts one
short Spark driver; and pytest's processes, which only look the archive up.

Why: a Spark driver loads some fifteen thousand classes from PySpark's jars at start-up, parsing
and verifying each one. The test suite starts dozens of drivers (its own sessions, the drivers it
SIGKILLs and restarts, the examples), and on two cores it is bound by CPU (docs/testing.md). A
JVM started with ``-XX:SharedArchiveFile`` maps the classes a earlier driver loaded, already
parsed and verified, from one file (HotSpot's dynamic CDS archive, Java 13 and later):
``benchmarks/spark_lifecycle_cpu.py`` measures what it saves per driver.

The archive is made by one driver that exits with ``-XX:ArchiveClassesAtExit``: a local Spark
that runs SQL, a Python data source's batch read and write and an ``availableNow`` stream, which
is the bulk of what the suite's drivers load. Anything else they load they read from the jars as
before. An archive belongs to one JVM build and one class path: its file name carries a hash of
the ``java`` binary's identity and of PySpark's jars directory. A JVM that cannot use the archive
(another class path, e.g. ``spark.driver.extraClassPath``) runs without it; the CDS log lines that
would say so are turned off, so nothing changes in a driver's output either way.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from kafka_direct.errors import KafkaDirectError
from kafka_direct.testing.jars import find_java, jar_cache_root

__all__ = [
    "DRIVER_OPTIONS",
    "KEEP_ARCHIVES",
    "ArchiveError",
    "archive_path",
    "build_archive",
    "prune",
    "with_archive",
]

#: The JVM options of the test suite's Spark drivers (tests/integration/conftest.py): C1 only and
#: the serial collector, which cost a short-lived JVM less CPU on two cores.
DRIVER_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
#: Turns off the one CDS warning a JVM prints when it cannot use the archive.
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
_BUILD_TIMEOUT_S = 600.0
#: Archives kept in the cache directory: each checkout's virtualenv has its own jars directory,
#: so its own archive (about 170 MB); the older ones beyond this many are removed after a build.
KEEP_ARCHIVES = 4

#: What the archiving driver runs (argv[1]: a scratch directory). A Python data source, so that
#: no broker is needed, and the same Spark machinery as a kafka_direct query around it.
_LIFECYCLE = textwrap.dedent(
    """
    import sys
    from pyspark.sql.datasource import (
        DataSource, DataSourceReader, DataSourceStreamReader, DataSourceWriter, InputPartition,
        WriterCommitMessage)
    from kafka_direct.testing.local import local_spark

    class Reader(DataSourceReader):
        def read(self, partition):
            for i in range(100):
                yield (i, str(i))

    class StreamReader(DataSourceStreamReader):
        def initialOffset(self):
            return {"offset": 0}
        def latestOffset(self):
            return {"offset": 3}
        def partitions(self, start, end):
            return [InputPartition(i) for i in range(start["offset"], end["offset"])]
        def read(self, partition):
            yield (partition.value, "x")

    class Writer(DataSourceWriter):
        def write(self, rows):
            return WriterCommitMessage()

    class Source(DataSource):
        @classmethod
        def name(cls):
            return "jvm_archive_source"
        def schema(self):
            return "id int, value string"
        def reader(self, schema):
            return Reader()
        def streamReader(self, schema):
            return StreamReader()
        def writer(self, schema, overwrite):
            return Writer()

    spark = local_spark("kafka_direct-jvm-archive")
    spark.dataSource.register(Source)
    df = spark.read.format("jvm_archive_source").load()
    assert df.groupBy("value").count().count() == 100
    df.write.format("jvm_archive_source").mode("append").save()
    query = (spark.readStream.format("jvm_archive_source").load().writeStream.format("noop")
             .option("checkpointLocation", sys.argv[1] + "/checkpoint")
             .trigger(availableNow=True).start())
    query.awaitTermination()
    spark.stop()
    """
)


class ArchiveError(KafkaDirectError):
    """The archiving driver failed or wrote no archive."""


def _java_identity(java: str) -> str:
    """The JVM build a ``java`` command runs: its real path, and its libjvm's size and mtime."""
    real = Path(java).resolve()
    home = real.parent.parent
    libjvm = home / "lib" / "server" / "libjvm.so"
    stat = libjvm.stat() if libjvm.exists() else real.stat()
    return f"{real}|{stat.st_size}|{stat.st_mtime_ns}"


def _pyspark_jars() -> tuple[str, str]:
    """(version, jars directory) of the PySpark this interpreter imports, without importing it."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise ArchiveError("PySpark is not installed in this interpreter: no jars to archive.")
    location = Path(next(iter(spec.submodule_search_locations)))
    version = "unknown"
    version_file = location / "version.py"
    if version_file.exists():
        for line in version_file.read_text().splitlines():
            if line.startswith("__version__"):
                version = line.split("=", 1)[1].strip().strip("\"'")
    return version, str((location / "jars").resolve())


def archive_path(java: str | None = None) -> Path:
    """Where the archive for this JVM and this PySpark lives (it may not exist yet)."""
    java = java or find_java()
    version, jars = _pyspark_jars()
    key = hashlib.sha256(f"{_java_identity(java)}|{jars}".encode()).hexdigest()[:16]
    return jar_cache_root().parent / "cds" / f"spark-{version}-{key}.jsa"


def with_archive(options: str, java: str | None = None) -> str:
    """``options`` (JVM options for ``SPARK_SUBMIT_OPTS``) plus the archive, when it exists."""
    try:
        path = archive_path(java)
    except KafkaDirectError:
        return options
    if not path.is_file():
        return options
    return f"{options} -XX:SharedArchiveFile={path} {QUIET}".strip()


def build_archive(options: str, java: str | None = None) -> tuple[Path, bool]:
    """Make the archive unless it exists: (its path, whether it was made now).

    ``options`` are the JVM options the drivers that use it will have (the collector and
    compiler choice), so that the archiving driver runs as they do.
    """
    path = archive_path(java)
    if path.is_file():
        return path, False
    path.parent.mkdir(parents=True, exist_ok=True)
    # Beside its final name, so that the rename stays on one file system (/tmp may not be).
    partial = path.parent / f".{path.name}.{os.getpid()}.partial"
    try:
        _run_archiving_driver(options, partial)
        # Renamed into place whole, so a reader never maps half an archive; a parallel build
        # that finished first is simply replaced by an equal one.
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    try:
        prune(path.parent, path)
    except OSError as exc:  # the archive is made; tidying the cache is not worth a failure
        sys.stderr.write(f"Older Spark driver class archives were not removed: {exc}\n")
    return path, True


def prune(directory: Path, keep: Path, limit: int = KEEP_ARCHIVES) -> list[Path]:
    """Remove the archives of ``directory`` beyond the ``limit`` most recently made, never
    ``keep``; returns the removed ones. A driver that has one mapped keeps its pages (Linux
    frees a file's space only when its last user closes it); one that starts later runs without
    it, and the next ``scripts/test.sh`` of its checkout makes it again."""
    archives = sorted(
        (p for p in directory.glob("spark-*.jsa") if p != keep), key=_made, reverse=True
    )
    removed = archives[max(limit - 1, 0) :]
    for old in removed:
        old.unlink(missing_ok=True)
    return removed


def _made(path: Path) -> float:
    """When an archive was made; one that a parallel prune removed meanwhile counts as oldest."""
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _run_archiving_driver(options: str, partial: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="kafka_direct-jvm-archive-") as scratch:
        env = dict(os.environ)
        env["SPARK_SUBMIT_OPTS"] = f"{options} -XX:ArchiveClassesAtExit={partial} {QUIET}".strip()
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        try:
            done = subprocess.run(
                [sys.executable, "-c", _LIFECYCLE, scratch],
                env=env,
                capture_output=True,
                text=True,
                timeout=_BUILD_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise ArchiveError(
                f"The archiving Spark driver did not finish in {_BUILD_TIMEOUT_S:.0f} s."
            ) from exc
        if done.returncode != 0 or not partial.is_file():
            tail = "\n".join(done.stderr.strip().splitlines()[-15:])
            raise ArchiveError(
                f"The archiving Spark driver exited with {done.returncode} and "
                f"{'an' if partial.is_file() else 'no'} archive; its last lines:\n{tail}"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--options",
        default=DRIVER_OPTIONS,
        help=f"the JVM options of the drivers that will use it (default: {DRIVER_OPTIONS})",
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    path, made = build_archive(args.options)
    verb = f"made in {time.monotonic() - started:.0f} s" if made else "already there"
    sys.stdout.write(f"Spark driver class archive {path} ({verb})\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
