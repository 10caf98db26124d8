"""Spark's Kafka delegation tokens (``spark.kafka.clusters.*``, KafkaTokenUtil) have no
librdkafka equivalent: registering the format in a session that sets them warns, naming the
clusters and what to set instead (kafka_direct.source.registration), where they used to be
ignored without a word."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

import kafka_direct
from kafka_direct.source import registration
from kafka_direct.source.datasource import KafkaDirectDataSource

LOGGER = "kafka_direct.source.registration"
SECRET = "tr0st-s3cr3t"


@pytest.fixture(autouse=True)
def _forget_what_was_logged() -> Iterator[None]:
    registration._logged.clear()
    yield
    registration._logged.clear()


class _Registration:
    def __init__(self) -> None:
        self.registered: list[type] = []

    def register(self, source: type) -> None:
        self.registered.append(source)


class _Conf:
    """PySpark 4's RuntimeConfig: ``getAll`` is a property."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    @property
    def getAll(self) -> dict[str, str]:  # PySpark's name
        return dict(self.values)

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)

    def set(self, key: str, value: str) -> None:
        self.values[key] = value


class _Session:
    def __init__(self, values: dict[str, str]) -> None:
        self.dataSource = _Registration()
        self.conf = _Conf(values)


@pytest.mark.parametrize(
    ("conf", "clusters"),
    [
        pytest.param({}, [], id="none"),
        pytest.param({"spark.kafka.consumer.cache.capacity": "64"}, [], id="other Kafka settings"),
        pytest.param({"spark.kafka.clusters.prod.auth.bootstrap.servers": "b:9093",
                      "spark.kafka.clusters.prod.ssl.truststore.password": SECRET,
                      "spark.kafka.clusters.dr.auth.bootstrap.servers": "d:9093"},
                     ["dr", "prod"], id="two clusters"),
    ],
)  # fmt: skip
def test_the_clusters_of_delegation_token_settings(
    conf: dict[str, str], clusters: list[str]
) -> None:
    assert registration.delegation_token_clusters(conf.items()) == clusters


def test_registering_warns_once_naming_the_clusters_and_what_to_set(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    conf = {"spark.kafka.clusters.prod.auth.bootstrap.servers": "b:9093",
            "spark.kafka.clusters.prod.sasl.token.mechanism": "SCRAM-SHA-512",
            "spark.kafka.clusters.prod.ssl.truststore.password": SECRET}  # fmt: skip
    sessions: list[Any] = [_Session(dict(conf)), _Session(dict(conf))]
    for spark in sessions:
        kafka_direct.register(spark)
    assert [s.dataSource.registered for s in sessions] == [[KafkaDirectDataSource]] * 2
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.startswith("spark.kafka.clusters.prod.* are set: Spark's Kafka delegation")
    assert "kafka.sasl.jaas.config" in warning and "'oauthProvider'" in warning
    assert SECRET not in warning


def test_no_warning_without_them(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    kafka_direct.register(_Session({}))
    assert [r for r in caplog.records if r.levelno == logging.WARNING] == []
