"""A Spark job's own security options on a secured real Apache Kafka (SecuredKafkaCluster: SASL
PLAIN and SCRAM, TLS, StandardAuthorizer with ACLs), through the shared local Spark: reads and
writes exact by count and content, the Java client's options accepted as written (a JAAS line, a
JKS or PKCS#12 truststore), and authorization errors that name the principal and never a
secret.

Regression: ``kafka.sasl.jaas.config`` and ``kafka.ssl.truststore.location`` used to be refused,
and a reader with no rights on a topic was told that the topic does not exist.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kafka_direct.testing.secured_cluster import SecuredKafkaCluster

pytestmark = pytest.mark.slow

ALICE, BOB = "alice-s3cr3t-pw", "bob-s3cr3t-pw"
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


def jaas(module: str, user: str, password: str) -> str:
    return f'{module} required username="{user}" password="{password}";'


@pytest.fixture(scope="module")
def cluster() -> Iterator[SecuredKafkaCluster]:
    secured = SecuredKafkaCluster(users={"alice": ALICE, "bob": BOB})
    try:
        secured.start()
    except Exception as exc:  # noqa: BLE001 - a broker that cannot start fails the module
        pytest.fail(f"The secured Kafka cluster could not start: {exc}", pytrace=False)
    # The executors' consumer groups (never the user's: assign only, no commits).
    secured.grant("User:alice", "group", "spark-kafka-source", "READ", prefixed=True)
    yield secured
    secured.stop()


def _topic(cluster: SecuredKafkaCluster, *grants: str) -> str:
    from kafka_direct.testing.broker import create_topic

    name = f"sec-{uuid.uuid4().hex[:10]}"
    create_topic(cluster.bootstrap_servers, name, partitions=2)
    if grants:
        cluster.grant("User:alice", "topic", name, *grants)
    return name


def _produce(cluster: SecuredKafkaCluster, topic: str, n: int, tag: str) -> list[bytes]:
    values = [f"{tag}-{i:04d}".encode() for i in range(n)]
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for i, value in enumerate(values):
        producer.produce(topic, value, partition=i % 2)
    assert producer.flush(30) == 0
    return values


def _read_back(cluster: SecuredKafkaCluster, topic: str, n: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": topic})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(2)])
    seen: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(seen) < n and time.monotonic() < deadline:
        seen += [m.value() for m in consumer.consume(500, 0.5) if m.error() is None]
    consumer.close()
    return seen


def _values(df: Any) -> list[bytes]:
    return sorted(bytes(r.value) for r in df.select("value").collect())


def sasl(cluster: SecuredKafkaCluster, protocol: str, module: str, password: str = ALICE,
         mechanism: str | None = None, **extra: str) -> dict[str, str]:  # fmt: skip
    options = {
        "kafka.bootstrap.servers": cluster.bootstrap(protocol),
        "kafka.security.protocol": protocol,
        "kafka.sasl.jaas.config": jaas(module, "alice", password),
        **extra,
    }
    if mechanism:
        options["kafka.sasl.mechanism"] = mechanism
    return options


def test_plain_jaas_reads_and_writes_exactly(spark: Any, cluster: SecuredKafkaCluster) -> None:
    source = _topic(cluster, "READ", "DESCRIBE")
    out = _topic(cluster, "WRITE", "DESCRIBE")
    values = _produce(cluster, source, 200, "plain")
    options = sasl(cluster, "SASL_PLAINTEXT", PLAIN, mechanism="PLAIN")
    df = spark.read.format("kafka_direct").options(**options).option("subscribe", source).load()
    assert _values(df) == values
    df.select("value").write.format("kafka_direct").mode("append").options(**options).option(
        "topic", out
    ).save()
    assert sorted(_read_back(cluster, out, 200)) == values


def test_scram_jaas_over_tls_with_a_jks_truststore_streams_and_restarts_exactly(
    spark: Any, cluster: SecuredKafkaCluster, tmp_path: Path
) -> None:
    source = _topic(cluster, "READ", "DESCRIBE")
    first = _produce(cluster, source, 100, "scram")
    options = sasl(
        cluster, "SASL_SSL", SCRAM, mechanism="SCRAM-SHA-512",
        **{"kafka.ssl.truststore.location": str(cluster.truststore("JKS", "changeit")),
           "kafka.ssl.truststore.password": "changeit"},
    )  # fmt: skip
    seen: list[bytes] = []

    def run() -> None:
        query = (
            spark.readStream.format("kafka_direct")
            .options(**options)
            .option("subscribe", source)
            .option("startingOffsets", "earliest")
            .load()
            .writeStream.foreachBatch(lambda df, _: seen.extend(_values(df)))
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(300)
        assert query.exception() is None, query.exception()

    run()
    second = _produce(cluster, source, 50, "scram2")
    run()
    assert sorted(seen) == sorted(first + second)


def test_tls_with_a_pkcs12_truststore_and_no_hostname_check(
    spark: Any, cluster: SecuredKafkaCluster
) -> None:
    # The SSL listener's principal is ANONYMOUS (no client certificate): a super user here.
    source = _topic(cluster)
    values = _produce(cluster, source, 120, "tls")
    df = (
        spark.read.format("kafka_direct")
        .option("kafka.bootstrap.servers", cluster.bootstrap("SSL"))
        .option("kafka.security.protocol", "SSL")
        .option("kafka.ssl.truststore.location", str(cluster.truststore("PKCS12", "p12-pass")))
        .option("kafka.ssl.truststore.type", "PKCS12")
        .option("kafka.ssl.truststore.password", "p12-pass")
        .option("kafka.ssl.endpoint.identification.algorithm", "")
        .option("subscribe", source)
        .load()
    )
    assert _values(df) == values


def _failed_read(spark: Any, options: dict[str, str], topic: str) -> str:
    """The error of a batch read of ``topic`` that must fail, and fail within 30 s."""
    started = time.monotonic()
    with pytest.raises(Exception) as info:  # Spark wraps the library's error
        spark.read.format("kafka_direct").options(**options).option(
            "subscribe", topic
        ).load().count()
    assert time.monotonic() - started < 30
    return str(info.value)


def test_a_reader_without_rights_is_told_who_may_not_read_what(
    spark: Any, cluster: SecuredKafkaCluster
) -> None:
    source = _topic(cluster)  # nothing granted to alice
    _produce(cluster, source, 10, "denied")
    message = _failed_read(spark, sasl(cluster, "SASL_PLAINTEXT", PLAIN, mechanism="PLAIN"), source)
    assert "TOPIC_AUTHORIZATION_FAILED" in message and "User:alice" in message, message
    assert f"'{source}'" in message and "kafka-acls.sh --add" in message
    assert ALICE not in message


def test_a_wrong_password_fails_fast_and_says_so(spark: Any, cluster: SecuredKafkaCluster) -> None:
    source = _topic(cluster, "READ", "DESCRIBE")
    options = sasl(cluster, "SASL_PLAINTEXT", PLAIN, password="wr0ng-s3cr3t", mechanism="PLAIN")
    message = _failed_read(spark, options, source)
    assert "uthentication" in message, message
    assert "wr0ng-s3cr3t" not in message and ALICE not in message
