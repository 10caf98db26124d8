"""Faster start for Spark's Python processes: import PySpark from site-packages, not its zip.

Runs at interpreter start-up in the Python processes Spark launches for kafka_direct (the
streaming source runner on the driver, the daemon and workers on executors): ``register()`` puts
this directory on their ``PYTHONPATH``, and Python imports ``sitecustomize`` from it.

Why: Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` (and the py4j zip, and the spark-core
jar) first on every Python worker's path. Python's zipimport never caches bytecode, so each new
process compiles PySpark from source, a CPU cost paid by every streaming query at
start (its source runner is a fresh process). With a pip-installed PySpark the zip is a copy of
the very package in site-packages, whose bytecode pip has already compiled. Only in that case,
and only for entries inside that same installation, this drops them from ``sys.path``; any other
layout (a separate ``SPARK_HOME``, a cluster without pip's PySpark) is left exactly as it was.

It also makes a missing kafka_direct say how to fix it. When the worker's interpreter is not
the one kafka_direct is installed in (``PYSPARK_PYTHON`` unset in a virtualenv that is not
activated, or pointing elsewhere), unpickling the source fails deep in PySpark with "No module
named 'kafka_direct'". A finder placed last on ``sys.meta_path`` turns that into a message that
names the interpreter, the driver's, and ``PYSPARK_PYTHON`` / ``spark.pyspark.python``.

Standard library only, and it must never raise: it runs before anything else in the process.
It then hands over to the environment's own ``sitecustomize``, if there is one.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable

_HERE = os.path.dirname(os.path.abspath(__file__))


def _is_archive(entry: str) -> bool:
    return entry.endswith((".zip", ".jar"))


def _package_dir(name: str, path: list[str]) -> str | None:
    """Where ``name`` would be imported from on ``path`` (directories only, nothing imported)."""
    from importlib.machinery import PathFinder

    spec = PathFinder.find_spec(name, path)
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.realpath(next(iter(spec.submodule_search_locations)))


def bundled_entries(
    path: list[str], find: Callable[[str, list[str]], str | None] = _package_dir
) -> list[str]:
    """The entries of ``path`` that only repeat the installed PySpark: its own ``pyspark.zip``,
    its py4j zip when py4j is installed too, and its ``jars/*.jar``."""
    plain = [p for p in path if not _is_archive(p)]
    pyspark_dir = find("pyspark", plain)
    if pyspark_dir is None:
        return []
    lib = os.path.join(pyspark_dir, "python", "lib")
    jars = os.path.join(pyspark_dir, "jars")
    has_py4j = find("py4j", plain) is not None
    drop = []
    for entry in path:
        if not _is_archive(entry):
            continue
        real = os.path.realpath(entry)
        folder, name = os.path.split(real)
        py4j_zip = has_py4j and name.startswith("py4j-") and name.endswith(".zip")
        if (folder == lib and (name == "pyspark.zip" or py4j_zip)) or folder == jars:
            drop.append(entry)
    return drop


def _hand_over() -> None:
    """Import the ``sitecustomize`` this one shadows, as Python would have without us."""
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    this = sys.modules.pop("sitecustomize", None)
    try:
        importlib.import_module("sitecustomize")
    except ModuleNotFoundError as exc:
        if exc.name != "sitecustomize":
            raise
        if this is not None:
            sys.modules["sitecustomize"] = this


class _MissingKafkaDirect:
    """Last on ``sys.meta_path``: reached only when no other finder has kafka_direct."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> None:
        if name != "kafka_direct":
            return None
        driver = os.environ.get("KAFKA_DIRECT_DRIVER_PYTHON", "")
        shown = f" (the driver runs {driver})" if driver and driver != sys.executable else ""
        raise ModuleNotFoundError(
            f"kafka_direct is not installed in the Python interpreter Spark started for its "
            f"workers, {sys.executable}{shown}. Spark starts them with PYSPARK_PYTHON or "
            "spark.pyspark.python: set it to an interpreter where kafka_direct is installed "
            "(e.g. export PYSPARK_PYTHON=/path/to/venv/bin/python before the SparkSession "
            "starts), or install kafka-direct on every executor.",
            name=name,
        )


def _main() -> None:
    try:
        drop = set(bundled_entries(list(sys.path)))
    except (OSError, ImportError, ValueError):
        drop = set()
    if drop:
        sys.path[:] = [p for p in sys.path if p not in drop]
        for entry in drop:
            sys.path_importer_cache.pop(entry, None)
    sys.meta_path.append(_MissingKafkaDirect())
    _hand_over()


if __name__ == "sitecustomize":
    _main()
