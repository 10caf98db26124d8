"""kafka_direct's Python worker daemon: what it imports before it forks, and that a module it
cannot import is left to the worker. Runs no daemon."""

from __future__ import annotations

import pytest

from kafka_direct.executor.daemon import PRELOAD, preload, worker_module


def test_every_module_it_preloads_exists() -> None:
    # A module renamed in PySpark or kafka_direct would silently stop being preloaded.
    assert preload(PRELOAD) == []


def test_a_module_that_fails_to_import_is_named_not_raised() -> None:
    assert preload(["json", "kafka_direct_no_such_module", "os"]) == ["kafka_direct_no_such_module"]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["daemon.py"], []),
        (["daemon.py", "pyspark.worker"], ["pyspark.worker"]),
        (["daemon.py", "pyspark.sql.worker.python_streaming_sink_runner"],
         ["pyspark.sql.worker.python_streaming_sink_runner"]),
        (["daemon.py", "my_worker"], []),  # PySpark's daemon ignores it too
    ],
)  # fmt: skip
def test_the_worker_module_spark_names_is_preloaded_as_pyspark_would_import_it(
    argv: list[str], expected: list[str]
) -> None:
    assert worker_module(argv) == expected
