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
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from kafka_direct.testing.secured_cluster import SecuredKafkaCluster
from tests.integration.secured_helpers import ALICE
from tests.integration.secured_helpers import produce as _produce
from tests.integration.secured_helpers import read_back as _read_back
from tests.integration.secured_helpers import values as _values

pytestmark = pytest.mark.slow

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


def jaas(module: str, user: str, password: str) -> str:
    return f'{module} required username="{user}" password="{password}";'


@pytest.fixture()
def cluster(secured_cluster: SecuredKafkaCluster) -> SecuredKafkaCluster:
    """The session's secured cluster (tests/integration/conftest.py)."""
    return secured_cluster


def _topic(cluster: SecuredKafkaCluster, *grants: str) -> str:
    from kafka_direct.testing.broker import create_topic

    name = f"sec-{uuid.uuid4().hex[:10]}"
    create_topic(cluster.bootstrap_servers, name, partitions=2)
    if grants:
        cluster.grant("User:alice", "topic", name, *grants)
    return name


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


def test_inline_pem_certificates_with_their_type_and_a_single_quoted_jaas_line(
    spark: Any, cluster: SecuredKafkaCluster
) -> None:
    # As a Spark job on Kafka's Java client writes them: ssl.truststore.certificates needs
    # ssl.truststore.type=PEM there, and its JAAS tokenizer takes 'single quotes' and comments.
    source = _topic(cluster, "READ", "DESCRIBE")
    out = _topic(cluster, "WRITE", "DESCRIBE")
    values = _produce(cluster, source, 90, "pem")
    options = {
        "kafka.bootstrap.servers": cluster.bootstrap("SASL_SSL"),
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-256",
        "kafka.sasl.jaas.config": f"{SCRAM} required /* the service */ username='alice' "
        f"password='{ALICE}';",
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.certificates": cluster.ca_pem.read_text(),
    }
    df = spark.read.format("kafka_direct").options(**options).option("subscribe", source).load()
    assert _values(df) == values
    df.select("value").write.format("kafka_direct").mode("append").options(**options).option(
        "topic", out
    ).save()
    assert sorted(_read_back(cluster, out, 90)) == values


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


def _scram_tls(cluster: SecuredKafkaCluster) -> dict[str, str]:
    """SCRAM-SHA-512 over SASL_SSL with a JKS truststore, as a Spark job's options."""
    return sasl(
        cluster, "SASL_SSL", SCRAM, mechanism="SCRAM-SHA-512",
        **{"kafka.ssl.truststore.location": str(cluster.truststore("JKS", "changeit")),
           "kafka.ssl.truststore.password": "changeit"},
    )  # fmt: skip


def _until(done: Any, stream: Any, what: str) -> None:
    deadline = time.monotonic() + 180
    while not done():
        assert stream.exception() is None, stream.exception()
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_the_exactly_once_sink_writes_exactly_over_scram_and_tls(
    spark: Any, cluster: SecuredKafkaCluster
) -> None:
    source = _topic(cluster, "READ", "DESCRIBE")
    out = _topic(cluster, "WRITE", "DESCRIBE", "READ")  # READ: the tasks' markers
    prefix = f"eos-{out}"
    # The transactional ids <prefix>-<task> and their marker groups (docs/security.md).
    cluster.grant("User:alice", "transactional_id", prefix, "WRITE", "DESCRIBE", prefixed=True)
    cluster.grant("User:alice", "group", prefix, "READ", prefixed=True)
    values = _produce(cluster, source, 150, "eos")
    options = _scram_tls(cluster)
    df = spark.read.format("kafka_direct").options(**options).option("subscribe", source).load()
    df.select("value").write.format("kafka_direct").mode("append").options(**options).option(
        "topic", out
    ).option("deliveryGuarantee", "exactly-once").option("transactionalIdPrefix", prefix).save()
    written = (
        spark.read.format("kafka_direct").options(**options).option("subscribe", out)
        .option("kafka.isolation.level", "read_committed").load()
    )  # fmt: skip
    assert _values(written) == values


def test_the_direct_stream_reads_and_commits_exactly_over_scram_and_tls(
    spark: Any, cluster: SecuredKafkaCluster
) -> None:
    from kafka_direct import ConsumerStrategies, KafkaUtils, LocationStrategies

    source = _topic(cluster, "READ", "DESCRIBE")
    group = f"ds-{source}"
    cluster.grant("User:alice", "group", group, "READ", prefixed=True)  # and <group>-executor
    values = _produce(cluster, source, 120, "dstream")
    params = {k.removeprefix("kafka."): v for k, v in _scram_tls(cluster).items()}
    params.update({"group.id": group, "auto.offset.reset": "earliest"})
    seen: list[bytes] = []
    stream = KafkaUtils.createDirectStream(
        spark, LocationStrategies.PreferConsistent(),
        ConsumerStrategies.Subscribe([source], params), batchInterval=1.0,
    )  # fmt: skip

    def handle(df: Any, ranges: Any) -> None:
        seen.extend(_values(df))
        stream.commitAsync(ranges)

    stream.foreachBatch(handle)
    stream.start()
    try:
        _until(lambda: len(seen) >= len(values), stream, "the direct stream's records")
    finally:
        stream.stop(graceful=True)
    assert sorted(seen) == values
    admin = {"bootstrap.servers": cluster.bootstrap_servers, "group.id": group}
    committed = Consumer(admin).committed([TopicPartition(source, p) for p in range(2)], 30)
    assert sorted(tp.offset for tp in committed) == [60, 60]


def test_the_receiver_stream_reads_exactly_over_scram_and_tls(
    spark: Any, cluster: SecuredKafkaCluster, tmp_path: Path
) -> None:
    from kafka_direct import KafkaUtils

    source = _topic(cluster, "READ", "DESCRIBE")
    group = f"rcv-{source}"
    cluster.grant("User:alice", "group", group, "READ")
    values = _produce(cluster, source, 90, "receiver")
    params = {k.removeprefix("kafka."): v for k, v in _scram_tls(cluster).items()}
    params.update({"group.id": group, "auto.offset.reset": "earliest"})
    seen: list[bytes] = []
    stream = KafkaUtils.createStream(
        spark, params, [source], batchInterval=1.0, walDir=str(tmp_path / "wal")
    )
    stream.foreachBatch(lambda df, ranges: seen.extend(_values(df)))
    stream.start()
    try:
        _until(lambda: len(seen) >= len(values), stream, "the receivers' records")
    finally:
        stream.stop(graceful=True, timeout=60)
    assert sorted(seen) == values


def test_the_command_line_takes_a_client_properties_file(
    cluster: SecuredKafkaCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--command-config``, as Kafka's own tools take it: the JVM client's keys (a JAAS line, a
    JKS truststore) in Java's properties format, for produce, consume, offsets and lag."""
    from kafka_direct.cli import main

    topic = _topic(cluster, "READ", "WRITE", "DESCRIBE")
    group = f"cli-{topic}"
    cluster.grant("User:alice", "group", group, "READ")
    config = tmp_path / "client.properties"
    config.write_text(
        "# as for kafka-console-consumer.sh --command-config\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism: SCRAM-SHA-512\n"
        f"sasl.jaas.config={SCRAM} required \\\n"
        f'    username="alice" password="{ALICE}";\n'
        f"ssl.truststore.location={cluster.truststore('JKS', 'changeit')}\n"
        "ssl.truststore.password=changeit\n"
        f"group.id={group}\n"  # the consumer's (assign only: librdkafka looks it up)
    )
    secured = [
        "--bootstrap-servers",
        cluster.bootstrap("SASL_SSL"),
        "--command-config",
        str(config),
    ]
    assert main(["produce", *secured, "--topic", topic, "--records", "40"]) == 0
    written = sorted(_read_back(cluster, topic, 40))
    assert len(written) == 40
    capsys.readouterr()
    assert main(["consume", topic, *secured, "--from-beginning", "--max", "40"]) == 0
    consumed = capsys.readouterr().out.splitlines()
    assert sorted(line.encode() for line in consumed) == written
    store = f"kafka://{cluster.bootstrap('SASL_SSL')}"
    reset = ["--store", store, "--group", group, "--topic", topic, "--to", "latest"]
    assert main(["offsets", "reset", *secured, *reset]) == 0
    capsys.readouterr()
    assert main(["offsets", "show", "--store", store, "--group", group,
                 "--command-config", str(config)]) == 0  # fmt: skip
    shown = capsys.readouterr().out
    highs = sorted(int(line.split()[-1]) for line in shown.splitlines()[1:])
    assert sum(highs) == 40, shown
    assert main(["lag", *secured, "--group", group]) == 0
    lag = capsys.readouterr().out
    assert topic in lag and ALICE not in lag + shown


def test_a_command_denied_its_topic_names_the_principal(
    cluster: SecuredKafkaCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from kafka_direct.cli import main

    topic = _topic(cluster)  # nothing granted
    config = tmp_path / "client.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        f'sasl.jaas.config={PLAIN} required username="alice" password="{ALICE}";\n'
    )
    secured = ["--bootstrap-servers", cluster.bootstrap("SASL_PLAINTEXT"),
               "--command-config", str(config)]  # fmt: skip
    reset = ["--store", "sqlite:///" + str(tmp_path / "o.db"), "--group", "g", "--topic", topic]
    assert main(["offsets", "reset", *secured, *reset, "--to", "latest"]) == 2
    err = capsys.readouterr().err
    assert "NotAuthorizedError: Not authorized (TOPIC_AUTHORIZATION_FAILED)" in err, err
    assert f"on topic '{topic}' to principal User:alice" in err and ALICE not in err
