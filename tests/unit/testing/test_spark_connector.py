"""Which jars of Spark's Kafka connector are kept, and how versions compare (no network)."""

from __future__ import annotations

import pytest

from kafka_direct.testing.spark_connector import (
    SparkConnectorError,
    _artifact,
    _version_key,
    connector_version,
    newest_release_below,
    oracle_spark_version,
    spark_kafka_conf,
)


@pytest.mark.parametrize(
    ("file_name", "artifact"),
    [
        ("spark-sql-kafka-0-10_2.13-4.2.0.jar", "spark-sql-kafka-0-10_2.13"),
        ("spark-token-provider-kafka-0-10_2.13-4.2.0.jar", "spark-token-provider-kafka-0-10_2.13"),
        ("kafka-clients-3.9.2.jar", "kafka-clients"),
        ("commons-pool2-2.13.1.jar", "commons-pool2"),
        ("scala-library-2.13.18.jar", "scala-library"),
        ("snappy-java-1.1.10.8.jar", "snappy-java"),
        ("hadoop-client-api-3.5.0.jar", "hadoop-client-api"),
        ("spark-tags_2.13-4.3.0.jar", "spark-tags_2.13"),
        ("jsr305-3.0.0.jar", "jsr305"),
    ],
)
def test_artifact_name_of_a_jar(file_name: str, artifact: str) -> None:
    assert _artifact(file_name) == artifact


@pytest.mark.parametrize(
    ("a", "b"),
    [("4.2.0", "4.3.0"), ("4.1.3", "4.2.0"), ("4.2.0", "4.10.0"), ("3.5.9", "4.0.0")],
)
def test_versions_compare_as_numbers(a: str, b: str) -> None:
    assert _version_key(a) < _version_key(b)


def test_connector_version_is_read_from_the_jar_names() -> None:
    from pathlib import Path

    jars = [Path("/c/kafka-clients-3.9.2.jar"), Path("/c/spark-sql-kafka-0-10_2.13-4.2.0.jar")]
    assert connector_version(jars) == "4.2.0"
    assert spark_kafka_conf(jars) == {
        "spark.jars": "/c/kafka-clients-3.9.2.jar,/c/spark-sql-kafka-0-10_2.13-4.2.0.jar"
    }
    with pytest.raises(SparkConnectorError, match=r"No spark-sql-kafka-0-10_2\.13 jar"):
        connector_version(jars[:1])


METADATA = "".join(
    f"<version>{v}</version>"
    for v in ["3.5.9", "4.0.0", "4.1.3", "4.2.0-preview5", "4.2.0", "4.10.1", "5.0.0"]
)


@pytest.mark.parametrize(
    ("installed", "taken"),
    [("4.3.0", "4.2.0"), ("4.2.1", "4.2.0"), ("4.2.0", "4.1.3"), ("4.11.0", "4.10.1")],
)
def test_the_newest_release_below_the_installed_version(installed: str, taken: str) -> None:
    assert newest_release_below(METADATA, installed) == taken


def test_no_release_of_the_major_version_is_an_error() -> None:
    with pytest.raises(SparkConnectorError, match="no spark-sql-kafka"):
        newest_release_below(METADATA, "3.0.0")


@pytest.mark.parametrize(
    ("installed", "pinned"),
    [
        ("4.2.0", "4.2.0"),  # Central serves this very connector: no pin
        ("4.3.0", "4.2.0"),  # PySpark reached PyPI before its connector reached Central
        ("4.2.1", "4.2.0"),  # a patch release without its connector: never mix patch levels
        ("4.1.3", "4.1.3"),
        ("4.2.0-preview5", "4.2.0-preview5"),  # a preview installed, its preview served
        ("4.11.0", "4.10.1"),
    ],
)
def test_the_pyspark_the_differential_suite_runs_on(installed: str, pinned: str) -> None:
    assert oracle_spark_version(METADATA, installed) == pinned


def test_no_connector_to_pin_is_an_error() -> None:
    with pytest.raises(SparkConnectorError, match="no spark-sql-kafka"):
        oracle_spark_version(METADATA, "3.0.0")
