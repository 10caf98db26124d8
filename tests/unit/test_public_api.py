"""The public API is exactly ``kafka_direct.__all__``: pinned here so every change is deliberate.

Changing the API means changing EXPECTED_ALL in the same commit (and docs/api.md).
"""

from __future__ import annotations

import importlib.metadata
import inspect
import subprocess
import sys

import pytest

import kafka_direct
from kafka_direct import errors

EXPECTED_ALL = [
    "BatchFailedError",
    "BatchInfo",
    "ConfigurationError",
    "ConsumerStrategies",
    "DataLossError",
    "DeliveryError",
    "DirectKafkaStream",
    "EmbeddedBrokerError",
    "FORMAT",
    "FetchTimeoutError",
    "IncompleteInputError",
    "KafkaClientError",
    "KafkaDirectError",
    "KafkaGroupStore",
    "KafkaUtils",
    "LocationStrategies",
    "NotAuthorizedError",
    "OffsetConflictError",
    "OffsetRange",
    "OffsetStore",
    "OffsetsUnavailableError",
    "ReceiverBatchInfo",
    "ReceiverFailedError",
    "ReceiverKafkaStream",
    "ShareKafkaStream",
    "ShareRecord",
    "SinkColumnError",
    "SqlOffsetStore",
    "StreamStateError",
    "TopicNotFoundError",
    "TopicPartition",
    "UnsupportedKafkaOptionError",
    "__version__",
    "exactly_once_foreach_batch",
    "register",
    "starting_offsets_json",
]

EXCEPTIONS = [
    name
    for name in EXPECTED_ALL
    if inspect.isclass(getattr(kafka_direct, name, None))
    and issubclass(getattr(kafka_direct, name), BaseException)
]


def test_expected_all_is_sorted_and_unique() -> None:
    assert sorted(set(EXPECTED_ALL)) == EXPECTED_ALL


def test_all_is_pinned() -> None:
    assert sorted(kafka_direct.__all__) == EXPECTED_ALL
    assert len(kafka_direct.__all__) == len(set(kafka_direct.__all__))


@pytest.mark.parametrize("name", EXPECTED_ALL)
def test_every_public_name_exists(name: str) -> None:
    assert hasattr(kafka_direct, name)


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, object] = {}
    exec("from kafka_direct import *", namespace)
    assert sorted(k for k in namespace if k != "__builtins__") == EXPECTED_ALL


def test_every_error_is_public() -> None:
    assert set(errors.__all__) <= set(EXPECTED_ALL)
    assert set(errors.__all__) == set(EXCEPTIONS)


@pytest.mark.parametrize("name", EXCEPTIONS)
def test_every_exception_derives_from_kafka_direct_error(name: str) -> None:
    cls = getattr(kafka_direct, name)
    assert issubclass(cls, kafka_direct.KafkaDirectError)
    assert cls is getattr(errors, name)


def test_every_exception_class_in_errors_module_derives_from_root() -> None:
    # Also the ones someone might add to errors.py and forget to export.
    classes = [
        obj
        for _, obj in inspect.getmembers(errors, inspect.isclass)
        if issubclass(obj, BaseException) and obj.__module__ == errors.__name__
    ]
    assert classes
    assert all(issubclass(cls, kafka_direct.KafkaDirectError) for cls in classes)
    assert {cls.__name__ for cls in classes} == set(errors.__all__)


@pytest.mark.parametrize("name", EXCEPTIONS)
def test_every_exception_is_drawn_in_the_errors_docstring(name: str) -> None:
    assert errors.__doc__ is not None
    assert f" {name} " in errors.__doc__ or f" {name}\n" in errors.__doc__


@pytest.mark.parametrize(
    ("name", "bases"),
    [
        pytest.param("ConfigurationError", ("KafkaDirectError", "ValueError"), id="config"),
        pytest.param("UnsupportedKafkaOptionError", ("ConfigurationError",), id="unsupported"),
        pytest.param("TopicNotFoundError", ("KafkaClientError",), id="topic not found"),
        pytest.param("NotAuthorizedError", ("KafkaClientError",), id="not authorized"),
        pytest.param("FetchTimeoutError", ("KafkaClientError",), id="fetch timeout"),
        pytest.param("DeliveryError", ("KafkaClientError",), id="delivery"),
        pytest.param("SinkColumnError", ("ConfigurationError",), id="sink column"),
        pytest.param("DataLossError", ("KafkaDirectError",), id="data loss"),
        pytest.param("OffsetConflictError", ("KafkaDirectError",), id="offset conflict"),
        pytest.param("OffsetsUnavailableError", ("KafkaClientError",), id="offsets unavailable"),
        pytest.param("BatchFailedError", ("KafkaDirectError",), id="batch failed"),
        pytest.param("IncompleteInputError", ("KafkaDirectError",), id="incomplete input"),
        pytest.param("ReceiverFailedError", ("KafkaDirectError",), id="receiver failed"),
        pytest.param("StreamStateError", ("KafkaDirectError", "RuntimeError"), id="stream state"),
        pytest.param("EmbeddedBrokerError", ("KafkaDirectError",), id="embedded broker"),
    ],
)
def test_exception_tree(name: str, bases: tuple[str, ...]) -> None:
    known = {
        "ValueError": ValueError,
        "RuntimeError": RuntimeError,
        **{n: getattr(kafka_direct, n) for n in EXCEPTIONS},
    }
    assert all(issubclass(known[name], known[base]) for base in bases)


def test_version_matches_the_installed_distribution() -> None:
    assert kafka_direct.__version__ == importlib.metadata.version("kafka-direct")


def test_format_is_the_data_source_name() -> None:
    from kafka_direct.source.datasource import KafkaDirectDataSource

    assert kafka_direct.FORMAT == "kafka_direct"
    assert KafkaDirectDataSource.name() == kafka_direct.FORMAT


def test_register_registers_the_data_source_with_the_session() -> None:
    from kafka_direct.source.datasource import KafkaDirectDataSource

    registered: list[type] = []

    class FakeDataSourceRegistration:
        def register(self, source: type) -> None:
            registered.append(source)

    class FakeSpark:
        dataSource = FakeDataSourceRegistration()

    kafka_direct.register(FakeSpark())
    assert registered == [KafkaDirectDataSource]


def test_import_is_light() -> None:
    # The package is imported in every Python worker; Spark and the Kafka client load lazily.
    code = (
        "import sys, kafka_direct; "
        "print(sorted(m for m in ('pyspark', 'confluent_kafka') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"
