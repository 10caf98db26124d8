"""Registering the ``kafka_direct`` format with a SparkSession. Runs in the Spark driver.

The data source is registered as PySpark's ``spark.dataSource.register`` does, with one
difference: the Python processes Spark starts for it get ``_worker_site`` on their
``PYTHONPATH``. Its ``sitecustomize`` makes them import PySpark from site-packages (compiled
bytecode) instead of ``pyspark.zip`` (compiled from source in every new process), which takes
about 0.7 s off every streaming query's start. See ``_worker_site/sitecustomize.py``.

Spark keys its Python daemons by environment, so kafka_direct's reads use their own daemon when
the same application also runs Python UDFs. ``register(spark, fast_worker_start=False)`` turns
this off and registers exactly as PySpark does. Sessions without a local JVM (Spark Connect)
always register the plain way.
"""

from __future__ import annotations

import logging
import os
from typing import Any

logger = logging.getLogger(__name__)

_JVM_DATA_SOURCE = (
    "org.apache.spark.sql.execution.datasources.v2.python.UserDefinedPythonDataSource"
)
WORKER_SITE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_worker_site")


def worker_environment(environment: dict[str, Any]) -> dict[str, Any]:
    """``environment`` (the SparkContext's, for Python processes) with ``WORKER_SITE_DIR``
    first on ``PYTHONPATH``, whatever the user had there kept after it."""
    env = dict(environment)
    current = [p for p in str(env.get("PYTHONPATH", "")).split(os.pathsep) if p]
    rest = [p for p in current if p != WORKER_SITE_DIR]
    env["PYTHONPATH"] = os.pathsep.join([WORKER_SITE_DIR, *rest])
    return env


def register(spark: Any, *, fast_worker_start: bool = True) -> None:
    """Register the ``kafka_direct`` format with ``spark`` (once per session is enough)."""
    from kafka_direct.source import KafkaDirectDataSource

    if fast_worker_start and _register_with_worker_site(spark, KafkaDirectDataSource):
        return
    spark.dataSource.register(KafkaDirectDataSource)


def _register_with_worker_site(spark: Any, source: Any) -> bool:
    """PySpark's own registration (``DataSourceRegistration.register``) with our environment.
    It uses PySpark internals; if they are not there (another PySpark, Spark Connect), it says
    so and returns False, and the caller registers the public way."""
    if getattr(spark, "_jsparkSession", None) is None:
        return False  # Spark Connect, or a stand-in for a session: no local JVM to talk to
    try:
        from py4j.protocol import Py4JError  # type: ignore[import-untyped]
        from pyspark.core.rdd import _prepare_for_python_RDD
    except ImportError:
        return False
    try:
        sc = spark.sparkContext
        pickled, broadcasts, env, includes = _prepare_for_python_RDD(sc, source)
        wrapped = sc._jvm.SimplePythonFunction(
            bytearray(pickled),
            worker_environment(env),
            includes,
            sc.pythonExec,
            sc.pythonVer,
            broadcasts,
            sc._javaAccumulator,
        )
        jvm_source = getattr(sc._jvm, _JVM_DATA_SOURCE)(wrapped)
        spark._jsparkSession.dataSource().registerPython(source.name(), jvm_source)
    except (AttributeError, TypeError, ValueError, Py4JError) as exc:
        logger.debug("Registering kafka_direct the plain way (no fast worker start: %s)", exc)
        return False
    return True
