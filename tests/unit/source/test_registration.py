"""What ``register(spark)`` does behind the user's back is logged, once each, and a PySpark
whose internals no longer match the private registration path fails here, not silently.

The pins read the installed PySpark's own registration code (no JVM needed): the private path
copies ``DataSourceRegistration.register`` and ``pyspark.sql.udf._wrap_function`` step by step,
so when PySpark changes them these tests name what changed. ``tests/integration/
test_worker_site.py`` checks the same path in a real Spark."""

from __future__ import annotations

import ast
import inspect
import logging
import textwrap
from collections.abc import Iterator
from typing import Any

import pyspark
import pytest
from pyspark.sql import udf as pyspark_udf
from pyspark.sql.datasource import DataSourceRegistration

import kafka_direct
from kafka_direct.source import registration
from kafka_direct.source.datasource import KafkaDirectDataSource

LOGGER = "kafka_direct.source.registration"


@pytest.fixture(autouse=True)
def _forget_what_was_logged() -> Iterator[None]:
    registration._logged.clear()
    yield
    registration._logged.clear()


def _source_tree(function: Any) -> ast.AST:
    return ast.parse(textwrap.dedent(inspect.getsource(function)))


def _call_named(tree: ast.AST, name: str) -> ast.Call:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if called == name:
                return node
    raise AssertionError(f"PySpark {pyspark.__version__} no longer calls {name}()")


# --- pinned to the installed PySpark ------------------------------------------------------------


def test_pyspark_still_wraps_a_function_as_the_private_path_does() -> None:
    """``register_with_worker_site`` builds ``SimplePythonFunction`` with these arguments, in this
    order, changing only the environment and the interpreter."""
    tree = _source_tree(pyspark_udf._wrap_function)
    call = _call_named(tree, "SimplePythonFunction")
    assert [ast.unparse(arg) for arg in call.args] == [
        "bytearray(pickled_command)",
        "env",
        "includes",
        "sc.pythonExec",
        "sc.pythonVer",
        "broadcast_vars",
        "sc._javaAccumulator",
    ], f"PySpark {pyspark.__version__} changed SimplePythonFunction's arguments"
    prepare = _call_named(tree, "_prepare_for_python_RDD")
    assert [ast.unparse(arg) for arg in prepare.args] == ["sc", "command"]
    unpacked = next(
        node for node in ast.walk(tree) if isinstance(node, ast.Assign) and node.value is prepare
    )
    assert ast.unparse(unpacked.targets[0]) == "(pickled_command, broadcast_vars, env, includes)"


def test_pyspark_still_registers_a_data_source_as_the_private_path_does() -> None:
    source = inspect.getsource(DataSourceRegistration.register)
    assert f'"{registration._JVM_DATA_SOURCE}"' in source, (
        f"PySpark {pyspark.__version__} registers Python data sources through another JVM class"
    )
    tree = _source_tree(DataSourceRegistration.register)
    registered = ast.unparse(_call_named(tree, "registerPython").func)
    assert registered == "self.sparkSession._jsparkSession.dataSource().registerPython"
    wrap = _call_named(tree, "_wrap_function")
    assert [ast.unparse(arg) for arg in wrap.args] == ["sc", "dataSource"]


def test_the_private_names_import_from_the_installed_pyspark() -> None:
    from pyspark.core.rdd import _prepare_for_python_RDD

    assert list(inspect.signature(_prepare_for_python_RDD).parameters) == ["sc", "command"]


# --- what is logged -------------------------------------------------------------------------------


class _Registration:
    def __init__(self) -> None:
        self.registered: list[type] = []

    def register(self, source: type) -> None:
        self.registered.append(source)


class _Conf:
    def __init__(self, values: dict[str, str], refuse: bool = False) -> None:
        self.values = values
        self.refuse = refuse

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)

    def set(self, key: str, value: str) -> None:
        if self.refuse:
            raise RuntimeError("Cannot modify the value of a static config")
        self.values[key] = value


class _ConnectSession:
    """Like Spark Connect: no local JVM."""

    def __init__(self, conf: _Conf | None = None) -> None:
        self.dataSource = _Registration()
        self.conf = conf if conf is not None else _Conf({})


class _BrokenInternals(_ConnectSession):
    """A JVM session whose internals are not where the private path looks (another PySpark)."""

    _jsparkSession = object()

    @property
    def sparkContext(self) -> Any:
        raise AttributeError("'SparkSession' object has no attribute '_sc'")


def _messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == level]


def test_a_fallback_from_the_private_path_warns_once_with_the_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    sessions = [_BrokenInternals(), _BrokenInternals()]
    for spark in sessions:
        kafka_direct.register(spark)
    assert [s.dataSource.registered for s in sessions] == [[KafkaDirectDataSource]] * 2
    (warning,) = _messages(caplog, logging.WARNING)
    assert warning == (
        f"PySpark {pyspark.__version__}'s internal data source registration failed "
        "(AttributeError: 'SparkSession' object has no attribute '_sc'): registered "
        "kafka_direct the public way, without the fast worker start, so streaming queries "
        "start slower. register(spark, fast_worker_start=False) registers the public way "
        "without this warning"
    )


def test_no_fallback_warning_when_the_user_asks_for_the_public_way(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    spark = _BrokenInternals()
    kafka_direct.register(spark, fast_worker_start=False)
    assert spark.dataSource.registered == [KafkaDirectDataSource]
    assert _messages(caplog, logging.WARNING) == []


def test_turning_on_filter_pushdown_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    sessions = [_ConnectSession(), _ConnectSession()]
    for spark in sessions:
        kafka_direct.register(spark)
    assert [s.conf.values for s in sessions] == [{registration.FILTER_PUSHDOWN_CONF: "true"}] * 2
    assert _messages(caplog, logging.INFO) == [
        "Set spark.sql.python.filterPushdown.enabled=true so batch reads can narrow by filters "
        "(to keep Spark's default, set it to false before register(); per query: "
        "pushdown.enabled=false)",
        "Registering kafka_direct the public way: no local JVM",
    ]


def test_a_filter_pushdown_the_user_set_is_neither_changed_nor_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    spark = _ConnectSession(_Conf({registration.FILTER_PUSHDOWN_CONF: "false"}))
    kafka_direct.register(spark)
    assert spark.conf.values == {registration.FILTER_PUSHDOWN_CONF: "false"}
    assert not any("filterPushdown" in m for m in _messages(caplog, logging.INFO))


def test_a_session_that_refuses_the_pushdown_conf_warns_and_still_registers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    spark = _ConnectSession(_Conf({}, refuse=True))
    kafka_direct.register(spark)
    assert spark.dataSource.registered == [KafkaDirectDataSource]
    assert _messages(caplog, logging.WARNING) == [
        "Could not set spark.sql.python.filterPushdown.enabled=true (Cannot modify the value of "
        "a static config): batch reads will not be narrowed by filters"
    ]


# --- the keys Spark's streaming source runner puts into the registered environment --------------

DEFAULTS = registration.STREAMING_RUNNER_DEFAULTS


@pytest.mark.parametrize(
    ("environment", "expected"),
    [
        ({}, DEFAULTS),
        ({"PYTHONPATH": "/x"}, {"PYTHONPATH": "/x", **DEFAULTS}),
        # A value the environment has already is kept.
        ({"SPARK_BUFFER_SIZE": "1024"}, {**DEFAULTS, "SPARK_BUFFER_SIZE": "1024"}),
    ],
)
def test_the_registered_environment_holds_every_key_the_streaming_runner_puts(
    environment: dict[str, str], expected: dict[str, str]
) -> None:
    assert registration.with_streaming_runner_keys(environment) == expected
