"""Registering the ``kafka_direct`` format with a SparkSession. Runs in the Spark driver.

The data source is registered as PySpark's ``spark.dataSource.register`` does, with one
difference: the Python processes Spark starts for it get ``_worker_site`` on their
``PYTHONPATH``. Its ``sitecustomize`` makes them import PySpark from site-packages (compiled
bytecode) instead of ``pyspark.zip`` (compiled from source in every new process), which shortens
every streaming query's start (docs/performance.md). See ``_worker_site/sitecustomize.py``.

Spark keys its Python daemons by environment, so kafka_direct's reads use their own daemon when
the same application also runs Python UDFs. ``register(spark, fast_worker_start=False)`` turns
this off and registers exactly as PySpark does. Sessions without a local JVM (Spark Connect)
always register the plain way.

The registered function's environment also holds, from the start, the four variables Spark's
driver-side streaming source runner (``PythonStreamingSourceRunner.init``) puts into that very map
at each streaming query's start; Spark takes the registered map itself there, not a copy. Its
first start in a driver would otherwise grow the map while another query's task, which carries the
same map, may be being serialized by the scheduler: a restarted soak driver, starting three
queries at once, lost all their first tasks to ``java.io.OptionalDataException`` in
``HashMap.readObject`` that way. With the keys present, those puts only replace values, which
never changes what serialization writes into a stream's structure.

The same registration chooses the interpreter. PySpark starts workers with ``PYSPARK_PYTHON``
(or ``spark.pyspark.python``), else plain ``python3`` from ``PATH``, which in a virtualenv that
is not activated cannot import kafka_direct, though the driver could. On a local master with
neither set, the source's processes run the driver's own interpreter (``sys.executable``): they
are on the same machine. Elsewhere the choice stays the user's, and a worker that cannot import
kafka_direct says how to fix it (``_worker_site/sitecustomize.py``).

Spark's Kafka delegation tokens (``spark.kafka.clusters.*``) have no librdkafka equivalent:
registering a session that sets them warns, naming the clusters and what to set instead.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterable
from typing import Any

logger = logging.getLogger(__name__)

#: What was already logged in this process: each of register()'s side effects is logged once.
_logged: set[tuple[object, ...]] = set()


def _log_once(level: int, msg: str, *args: object) -> None:
    if (msg, *args) not in _logged:
        _logged.add((msg, *args))
        logger.log(level, msg, *args)


_JVM_DATA_SOURCE = (
    "org.apache.spark.sql.execution.datasources.v2.python.UserDefinedPythonDataSource"
)
WORKER_SITE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_worker_site")

#: Tells a worker's ``sitecustomize`` which interpreter the driver runs, for its error message.
DRIVER_PYTHON_ENV = "KAFKA_DIRECT_DRIVER_PYTHON"


def worker_environment(environment: dict[str, Any]) -> dict[str, Any]:
    """``environment`` (the SparkContext's, for Python processes) with ``WORKER_SITE_DIR``
    first on ``PYTHONPATH``, whatever the user had there kept after it."""
    env = dict(environment)
    current = [p for p in str(env.get("PYTHONPATH", "")).split(os.pathsep) if p]
    rest = [p for p in current if p != WORKER_SITE_DIR]
    env["PYTHONPATH"] = os.pathsep.join([WORKER_SITE_DIR, *rest])
    env[DRIVER_PYTHON_ENV] = sys.executable
    return env


#: What ``PythonStreamingSourceRunner.init`` puts into the registered function's environment, with
#: Spark's defaults; each runner and each task puts its own values over these before a worker
#: starts, so only the keys matter (see the module docstring). They are not read from the JVM:
#: py4j's reflection over SparkEnv's block manager loaded a class that needs an unshaded
#: protobuf, and the NoClassDefFoundError killed the py4j connection and the registration with it.
STREAMING_RUNNER_DEFAULTS = {
    "SPARK_LOCAL_DIRS": "",
    "SPARK_AUTH_SOCKET_TIMEOUT": "15",
    "SPARK_BUFFER_SIZE": "65536",
    "SPARK_PYTHON_RUNTIME": "PYTHON_WORKER",
}


def with_streaming_runner_keys(environment: dict[str, Any]) -> dict[str, Any]:
    """``environment`` with every key of :data:`STREAMING_RUNNER_DEFAULTS`; a key the
    environment has already is kept as it is."""
    return {**STREAMING_RUNNER_DEFAULTS, **environment}


def worker_python(sc: Any) -> str:
    """The interpreter for the source's Python processes: the driver's own on a local master
    when the user chose none, else PySpark's choice (see the module docstring)."""
    chosen = str(sc.pythonExec)
    if os.environ.get("PYSPARK_PYTHON") or sc.getConf().get("spark.pyspark.python"):
        return chosen
    if not str(sc.master).startswith("local"):
        return chosen
    if chosen != sys.executable:
        _log_once(
            logging.INFO,
            "Spark's Python workers for kafka_direct run %s, the driver's interpreter "
            "(PYSPARK_PYTHON is not set; PySpark would have used %r). To choose, set "
            "PYSPARK_PYTHON or spark.pyspark.python before the SparkSession starts",
            sys.executable,
            chosen,
        )
    return sys.executable


#: Spark's switch for filter pushdown into Python data sources (off by default in Spark 4.3).
FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(spark: Any, *, fast_worker_start: bool = True) -> None:
    """Register the ``kafka_direct`` format with ``spark``, once per session: a session that
    has it already is left alone (Spark logs a WARN at every replacement, and every DStream and
    receiver start calls this)."""
    from kafka_direct.source.datasource import KafkaDirectDataSource

    _enable_filter_pushdown(spark)
    _warn_delegation_tokens(spark)
    register_once(spark, KafkaDirectDataSource, fast_worker_start=fast_worker_start)


def register_once(spark: Any, source: Any, *, fast_worker_start: bool = True) -> None:
    """Register the Python data source class ``source`` unless ``spark`` has its name already."""
    if is_registered(spark, source.name()):
        return
    if fast_worker_start and register_with_worker_site(spark, source):
        return
    spark.dataSource.register(source)


def is_registered(spark: Any, name: str) -> bool:
    """Whether the session has a Python data source called ``name``. False when it cannot
    tell (Spark Connect, another PySpark): registering again is harmless, only noisy."""
    jsession = getattr(spark, "_jsparkSession", None)
    if jsession is None:
        return False
    try:
        return bool(jsession.sessionState().dataSourceManager().dataSourceExists(name))
    except Exception as exc:  # noqa: BLE001 - py4j raises its own errors for a missing method
        logger.debug("Could not ask whether %s is registered: %s", name, exc)
        return False


#: Spark's Kafka delegation tokens (``KafkaTokenUtil``): ``spark.kafka.clusters.<id>.*``.
DELEGATION_TOKEN_PREFIX = "spark.kafka.clusters."


def delegation_token_clusters(conf: Iterable[tuple[str, str]]) -> list[str]:
    """The cluster ids of Spark's Kafka delegation token settings in ``conf`` (key, value)."""
    return sorted(
        {key[len(DELEGATION_TOKEN_PREFIX) :].split(".", 1)[0]
         for key, _ in conf if key.startswith(DELEGATION_TOKEN_PREFIX)} - {""}
    )  # fmt: skip


def _spark_conf(spark: Any) -> list[tuple[str, str]]:
    """The session's settings (SparkConf's included), or none when it cannot say."""
    try:
        every = spark.conf.getAll  # a property in PySpark 4: a dict
        return list((every() if callable(every) else every).items())
    except Exception:  # noqa: BLE001 - a stand-in session, or another PySpark
        pass
    try:
        return list(spark.sparkContext.getConf().getAll())
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext
        return []


def _warn_delegation_tokens(spark: Any) -> None:
    """Spark's Kafka connector gets delegation tokens for the clusters of
    ``spark.kafka.clusters.*`` and signs in with them where a query has no JAAS line; librdkafka
    has no delegation tokens, so kafka_direct's queries would silently get none. Say so, once."""
    clusters = delegation_token_clusters(_spark_conf(spark))
    if clusters:
        _log_once(
            logging.WARNING,
            "spark.kafka.clusters.%s.* are set: Spark's Kafka delegation tokens are not "
            "supported by kafka_direct (librdkafka has none), so format('kafka_direct') gets no "
            "token from them. Give each query its credentials: kafka.security.protocol with "
            "kafka.sasl.mechanism and kafka.sasl.jaas.config (a SCRAM or PLAIN user, a Kerberos "
            "keytab), or 'oauthProvider' (docs/security.md, Delegation tokens)",
            "{" + ",".join(clusters) + "}" if len(clusters) > 1 else clusters[0],
        )


def _enable_filter_pushdown(spark: Any) -> None:
    """Let Spark offer filters to batch reads (see ``source.batch``), unless the user chose.

    Turning it on only means Spark offers a ``where`` clause's filters to the Python sources
    that ask for them; a setting the user made (true or false) is left as it is.
    """
    conf = getattr(spark, "conf", None)
    if conf is None:
        return
    try:
        if conf.get(FILTER_PUSHDOWN_CONF, None) is None:
            conf.set(FILTER_PUSHDOWN_CONF, "true")
            _log_once(
                logging.INFO,
                "Set %s=true so batch reads can narrow by filters (to keep Spark's default, "
                "set it to false before register(); per query: pushdown.enabled=false)",
                FILTER_PUSHDOWN_CONF,
            )
    except Exception as exc:  # noqa: BLE001 - a session that refuses confs still registers
        _log_once(
            logging.WARNING,
            "Could not set %s=true (%s): batch reads will not be narrowed by filters",
            FILTER_PUSHDOWN_CONF,
            str(exc),
        )


def register_with_worker_site(spark: Any, source: Any) -> bool:
    """PySpark's own registration (``DataSourceRegistration.register``) with our environment.
    It uses PySpark internals; if they are not there (another PySpark, Spark Connect), it says
    so and returns False, and the caller registers the public way."""
    if getattr(spark, "_jsparkSession", None) is None:
        # Spark Connect, or a stand-in for a session: no local JVM to talk to.
        _log_once(logging.INFO, "Registering kafka_direct the public way: no local JVM")
        return False
    try:
        from py4j.protocol import Py4JError  # type: ignore[import-untyped]
        from pyspark.core.rdd import _prepare_for_python_RDD
    except ImportError as exc:
        _fell_back(exc)
        return False
    try:
        sc = spark.sparkContext
        pickled, broadcasts, env, includes = _prepare_for_python_RDD(sc, source)
        wrapped = sc._jvm.SimplePythonFunction(
            bytearray(pickled),
            with_streaming_runner_keys(worker_environment(env)),
            includes,
            worker_python(sc),
            sc.pythonVer,
            broadcasts,
            sc._javaAccumulator,
        )
        jvm_source = getattr(sc._jvm, _JVM_DATA_SOURCE)(wrapped)
        spark._jsparkSession.dataSource().registerPython(source.name(), jvm_source)
    except (AttributeError, TypeError, ValueError, Py4JError) as exc:
        _fell_back(exc)
        return False
    _log_once(
        logging.INFO,
        "Registered kafka_direct through PySpark's internal registration (the steps of "
        "spark.dataSource.register with our environment), for a faster query start; "
        "register(spark, fast_worker_start=False) uses the public registration",
    )
    _log_once(
        logging.INFO,
        "Spark's Python processes for kafka_direct get %s first on PYTHONPATH: its "
        "sitecustomize imports PySpark from site-packages instead of pyspark.zip (off: "
        "register(spark, fast_worker_start=False))",
        WORKER_SITE_DIR,
    )
    return True


def _fell_back(exc: BaseException) -> None:
    """The private path stopped working (most likely another PySpark version): say so loudly,
    since the only other symptom would be slower query starts."""
    _log_once(
        logging.WARNING,
        "PySpark %s's internal data source registration failed (%s: %s): registered "
        "kafka_direct the public way, without the fast worker start, so streaming queries "
        "start slower. register(spark, fast_worker_start=False) registers the public way "
        "without this warning",
        _pyspark_version(),
        type(exc).__name__,
        str(exc),
    )


def _pyspark_version() -> str:
    try:
        from pyspark import __version__
    except ImportError:
        return "(not importable)"
    return str(__version__)
