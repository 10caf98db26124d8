"""Authorization errors that say what is missing, on a real secured Apache Kafka
(SecuredKafkaCluster: SASL PLAIN, StandardAuthorizer with allow.everyone.if.no.acl.found=false),
through the shared local Spark: for every path that reads, commits or writes, a principal
without the right fails before any task runs, with the principal, the resource and the operation
(NotAuthorizedError), never with "does not exist" and never with a secret.

Regression: a writer with no rights was warned that its topic "does not exist on the cluster"; a
reader that could DESCRIBE but not READ failed in its tasks with librdkafka's bare code; a group
the principal may not commit to only logged warnings; the exactly-once sink's refused
transactional ids were named by librdkafka's text only.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Producer

from kafka_direct import ConsumerStrategies, KafkaUtils, LocationStrategies, NotAuthorizedError
from kafka_direct.testing.secured_cluster import SecuredKafkaCluster
from tests.integration.secured_helpers import ALICE, BOB

pytestmark = pytest.mark.slow

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


@pytest.fixture()
def cluster(secured_cluster: SecuredKafkaCluster) -> SecuredKafkaCluster:
    """The session's secured cluster (tests/integration/conftest.py)."""
    return secured_cluster


def _topic(cluster: SecuredKafkaCluster, *grants: str, records: int = 4) -> str:
    from kafka_direct.testing.broker import create_topic

    name = f"authz-{uuid.uuid4().hex[:10]}"
    create_topic(cluster.bootstrap_servers, name, partitions=1)
    if grants:
        cluster.grant("User:alice", "topic", name, *grants)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for i in range(records):
        producer.produce(name, f"v{i}".encode())
    assert producer.flush(30) == 0
    return name


def _options(cluster: SecuredKafkaCluster, password: str = ALICE) -> dict[str, str]:
    """A Spark job's options, as written for format("kafka")."""
    return {
        "kafka.bootstrap.servers": cluster.bootstrap("SASL_PLAINTEXT"),
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.jaas.config": f'{PLAIN} required username="alice" password="{password}";',
    }


def _params(cluster: SecuredKafkaCluster, group: str) -> dict[str, str]:
    """The same, as DStream kafkaParams (no prefix)."""
    params = {k.removeprefix("kafka."): v for k, v in _options(cluster).items()}
    return {**params, "group.id": group, "auto.offset.reset": "earliest"}


def _refused(run: Callable[[], Any]) -> str:
    """The message of what ``run`` raised, which must fail within 30 s (issue 28)."""
    started = time.monotonic()
    with pytest.raises(Exception) as info:  # Spark wraps the library's error in its own
        run()
    assert time.monotonic() - started < 30, f"took {time.monotonic() - started:.0f} s"
    message = str(info.value)
    assert "User:alice" in message and ALICE not in message, message
    assert "which the cluster does not have" not in message
    assert "does not exist on the cluster" not in message
    return message


# ---------------------------------------------------------------------------------- topics
def _batch(spark: Any, cluster: SecuredKafkaCluster, topic: str) -> None:
    spark.read.format("kafka_direct").options(**_options(cluster)).option(
        "subscribe", topic
    ).load().count()


def _stream(spark: Any, cluster: SecuredKafkaCluster, topic: str, tmp: Path, **extra: str) -> None:
    query = (
        spark.readStream.format("kafka_direct")
        .options(**_options(cluster), **extra)
        .option("subscribe", topic)
        .load()
        .writeStream.foreachBatch(lambda df, _: df.count())
        .option("checkpointLocation", str(tmp / f"ck-{uuid.uuid4().hex[:6]}"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))


def _dstream(spark: Any, cluster: SecuredKafkaCluster, topic: str, group: str) -> None:
    stream = KafkaUtils.createDirectStream(
        spark,
        LocationStrategies.PreferConsistent(),
        ConsumerStrategies.Subscribe([topic], _params(cluster, group)),
        batchInterval=1.0,
    )
    stream.foreachBatch(lambda df, ranges: None)
    try:
        stream.start()
    finally:
        stream.stop(graceful=False)


def _receiver(spark: Any, cluster: SecuredKafkaCluster, topic: str, group: str, tmp: Path) -> None:
    stream = KafkaUtils.createStream(
        spark, _params(cluster, group), [topic], batchInterval=1.0, walDir=str(tmp / "wal")
    )
    stream.foreachBatch(lambda df, ranges: None)
    try:
        stream.start()
    finally:
        stream.stop(graceful=False, timeout=60)


@pytest.mark.parametrize("path", ["batch", "stream", "dstream", "receiver"])
def test_a_reader_without_rights_on_its_topic_is_told_who_may_not_read_it(
    spark: Any, cluster: SecuredKafkaCluster, tmp_path: Path, path: str
) -> None:
    # The batch read may DESCRIBE (sees the topic, Kafka lists it); the others may nothing.
    topic = _topic(cluster, "DESCRIBE") if path == "batch" else _topic(cluster)
    group = f"grp-{topic}"
    cluster.grant("User:alice", "group", group, "READ")
    run = {
        "batch": lambda: _batch(spark, cluster, topic),
        "stream": lambda: _stream(spark, cluster, topic, tmp_path),
        "dstream": lambda: _dstream(spark, cluster, topic, group),
        "receiver": lambda: _receiver(spark, cluster, topic, group, tmp_path),
    }[path]
    message = _refused(run)
    assert "Not authorized (TOPIC_AUTHORIZATION_FAILED)" in message, message
    refused = "READ" if path == "batch" else "DESCRIBE and READ"
    assert f"Kafka refused {refused} on topic '{topic}' to principal User:alice" in message
    assert "--allow-principal User:alice --operation" in message and f"--topic {topic}" in message


# ---------------------------------------------------------------------------------- groups
@pytest.mark.parametrize("path", ["commitOffsetsToGroup", "committed", "dstream", "receiver"])
def test_a_group_the_principal_may_not_read_is_named(
    spark: Any, cluster: SecuredKafkaCluster, tmp_path: Path, path: str
) -> None:
    topic = _topic(cluster, "READ", "DESCRIBE")
    group = f"denied-{topic}"  # no ACL at all
    run = {
        "commitOffsetsToGroup": lambda: _stream(
            spark, cluster, topic, tmp_path, commitOffsetsToGroup=group
        ),
        "committed": lambda: _stream(
            spark,
            cluster,
            topic,
            tmp_path,
            startingOffsets="committed",
            **{"kafka.group.id": group},
        ),
        "dstream": lambda: _dstream(spark, cluster, topic, group),
        "receiver": lambda: _receiver(spark, cluster, topic, group, tmp_path),
    }[path]
    message = _refused(run)
    assert "Not authorized (GROUP_AUTHORIZATION_FAILED)" in message, message
    # kafka.group.id alone is never committed to, as in Spark: reading its committed offsets
    # (OffsetFetch) is what fails, and that takes DESCRIBE on the group.
    operation = "DESCRIBE" if path == "committed" else "READ"
    assert f"Kafka refused {operation} on group '{group}' to principal User:alice" in message
    assert f"--group {group}." in message


@pytest.mark.parametrize("fast_path", ["true", "false"], ids=["C path", "Python path"])
def test_a_reader_without_rights_on_the_executors_group_reads_exactly(
    spark: Any, cluster: SecuredKafkaCluster, fast_path: str
) -> None:
    """The executors' consumers assign and never commit, as the JVM connector's do, so a
    principal needs no rights on their group (``<groupIdPrefix>-<hash>-executor``). librdkafka
    still looks the group up as a consumer starts, and its refusal, when it came before the
    records, used to fail the task (or, in C, drop the records fetched with it): the reads go
    on past it on both read paths."""
    topic = _topic(cluster, "READ", "DESCRIBE", records=200)
    rows = (
        spark.read.format("kafka_direct").options(**_options(cluster))
        .option("subscribe", topic).option("groupIdPrefix", f"ungranted-{fast_path}")
        .option("fastPath.enabled", fast_path).load()
        .select("offset", "value").collect()
    )  # fmt: skip
    assert sorted((r.offset, bytes(r.value)) for r in rows) == [
        (i, f"v{i}".encode()) for i in range(200)
    ]


# ---------------------------------------------------------------------------------- the sink
def _write(spark: Any, cluster: SecuredKafkaCluster, topic: str, **extra: str) -> None:
    spark.createDataFrame([("a",), ("b",)], "value string").write.format("kafka_direct").mode(
        "append"
    ).options(**_options(cluster), **extra).option("topic", topic).save()


@pytest.mark.parametrize(
    ("grants", "refused"),
    [
        pytest.param((), "DESCRIBE and WRITE", id="no rights: not 'does not exist'"),
        pytest.param(("DESCRIBE", "READ"), "WRITE", id="no WRITE"),
    ],
)
def test_a_writer_without_write_is_told_the_topic_and_the_operation(
    spark: Any, cluster: SecuredKafkaCluster, grants: tuple[str, ...], refused: str
) -> None:
    topic = _topic(cluster, *grants, records=0)
    message = _refused(lambda: _write(spark, cluster, topic))
    assert "Not authorized (TOPIC_AUTHORIZATION_FAILED)" in message, message
    assert f"Kafka refused {refused} on topic '{topic}' to principal User:alice" in message


def test_the_exactly_once_sink_names_the_transactional_id_prefix(
    spark: Any, cluster: SecuredKafkaCluster
) -> None:
    topic = _topic(cluster, "WRITE", "DESCRIBE", "READ", records=0)  # READ: the markers
    prefix = f"txn-{topic}"
    message = _refused(
        lambda: _write(
            spark, cluster, topic, deliveryGuarantee="exactly-once", transactionalIdPrefix=prefix
        )
    )
    assert "Not authorized (TRANSACTIONAL_ID_AUTHORIZATION_FAILED)" in message, message
    assert f"on transactional id prefix '{prefix}' to principal User:alice" in message
    assert f"--transactional-id {prefix} --resource-pattern-type prefixed" in message


def test_the_exactly_once_sink_needs_read_on_its_marker_topic_and_says_why(
    spark: Any, cluster: SecuredKafkaCluster
) -> None:
    topic = _topic(cluster, "WRITE", "DESCRIBE", records=0)
    eos = {"deliveryGuarantee": "exactly-once", "transactionalIdPrefix": f"txn-{topic}"}
    message = _refused(lambda: _write(spark, cluster, topic, **eos))
    assert "commits each task's marker as an offset on this topic" in message, message
    assert f"Kafka refused READ on topic '{topic}' to principal User:alice" in message


def test_an_idempotent_producer_without_idempotent_write_is_told_so_in_its_task(
    cluster: SecuredKafkaCluster,
) -> None:
    """The executor's side (the driver's check of the topic comes first in a query): bob may
    DESCRIBE the topic and WRITE nothing anywhere, so InitProducerId is refused
    (CLUSTER_AUTHORIZATION_FAILED, a fatal error), which the write task's producer reports."""
    from kafka_direct.producer.batch_producer import PythonBatchProducer
    from kafka_direct.producer.columns import plan_columns

    topic = _topic(cluster, records=0)
    cluster.grant("User:bob", "topic", topic, "DESCRIBE")
    producer = PythonBatchProducer(
        {
            "bootstrap.servers": cluster.bootstrap("SASL_PLAINTEXT"),
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "bob",
            "sasl.password": BOB,
            "enable.idempotence": "true",
        }
    )
    batch = pa.record_batch([pa.array([b"x"], pa.binary())], names=["value"])
    try:
        with pytest.raises(NotAuthorizedError) as info:
            producer.produce_batch(batch, plan_columns([("value", "binary")], topic))
            producer.flush(30)
    finally:
        producer.abort()
        producer.close()
    message = str(info.value)
    assert message.startswith("Not authorized (CLUSTER_AUTHORIZATION_FAILED)"), message
    assert "Kafka refused IDEMPOTENT_WRITE on the cluster to principal User:bob" in message
    assert "--operation IDEMPOTENT_WRITE --cluster" in message and BOB not in message


def test_a_wrong_password_fails_the_writer_fast_and_says_so(
    spark: Any, cluster: SecuredKafkaCluster
) -> None:
    topic = _topic(cluster, "WRITE", "DESCRIBE", records=0)
    started = time.monotonic()
    with pytest.raises(Exception) as info:
        spark.createDataFrame([("a",)], "value string").write.format("kafka_direct").mode(
            "append"
        ).options(**_options(cluster, password="wr0ng-pa55")).option("topic", topic).save()
    assert time.monotonic() - started < 30
    message = str(info.value)
    assert "uthentication failed" in message, message
    assert "wr0ng-pa55" not in message and ALICE not in message


def test_the_exactly_once_sink_needs_read_on_its_marker_groups(
    spark: Any, cluster: SecuredKafkaCluster
) -> None:
    # Refused on the driver, before any task writes (a task would fail only at its marker).
    topic = _topic(cluster, "WRITE", "DESCRIBE", "READ", records=0)
    prefix = f"txn-{topic}"
    cluster.grant("User:alice", "transactional_id", prefix, "WRITE", "DESCRIBE", prefixed=True)
    eos = {"deliveryGuarantee": "exactly-once", "transactionalIdPrefix": prefix}
    message = _refused(lambda: _write(spark, cluster, topic, **eos))
    assert "Not authorized (GROUP_AUTHORIZATION_FAILED)" in message, message
    assert f"Kafka refused READ on group '{prefix}-0' to principal User:alice" in message
    cluster.grant("User:alice", "group", f"{prefix}-", "READ", prefixed=True)
    _write(spark, cluster, topic, **eos)
