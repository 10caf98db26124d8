"""What Kafka's authorizer refused, said the same way wherever it is met: the principal from the
client's settings (never a secret), the operations implied by Kafka's ACL rules, and librdkafka's
``*_AUTHORIZATION_FAILED`` codes turned into NotAuthorizedError at the one translator."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from kafka_direct.errors import KafkaClientError, NotAuthorizedError
from kafka_direct.kafka.authorization import (
    Access,
    describe_principal,
    missing_operations,
    not_authorized,
)
from kafka_direct.kafka.translate import translate

SCRAM = {
    "bootstrap.servers": "b:9093",
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "alice",
    "sasl.password": "s3cr3t-pw",
}


@pytest.mark.parametrize(
    ("config", "principal"),
    [
        pytest.param(SCRAM, "User:alice", id="SCRAM"),
        pytest.param({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
                      "sasl.username": "bob"}, "User:bob", id="PLAIN, librdkafka's alias"),
        pytest.param({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"},
                     "User:<the token's subject>", id="OAUTHBEARER"),
        pytest.param({"security.protocol": "SSL", "ssl.certificate.pem": "x"},
                     "User:<the client certificate's subject>", id="TLS certificate"),
        pytest.param({"security.protocol": "SSL"}, "User:ANONYMOUS", id="TLS, no certificate"),
        pytest.param({}, "User:ANONYMOUS", id="PLAINTEXT"),
    ],
)  # fmt: skip
def test_the_principal_is_told_from_the_clients_settings(
    config: dict[str, str], principal: str
) -> None:
    assert describe_principal(config)[0] == principal


@pytest.mark.parametrize(
    ("granted", "needed", "missing"),
    [
        pytest.param(["READ"], ["READ"], [], id="granted"),
        pytest.param(["DESCRIBE"], ["READ"], ["READ"], id="describe is not read"),
        pytest.param(["READ"], ["DESCRIBE"], [], id="read implies describe"),
        pytest.param(["WRITE"], ["DESCRIBE", "WRITE"], [], id="write implies describe"),
        pytest.param(["ALL"], ["WRITE", "READ"], [], id="all"),
        pytest.param([], ["WRITE"], ["WRITE"], id="nothing"),
        pytest.param(None, ["WRITE"], [], id="the broker did not say"),
    ],
)
def test_missing_operations_follow_kafkas_implications(
    granted: list[str] | None, needed: list[str], missing: list[str]
) -> None:
    assert missing_operations(granted, needed) == missing


@pytest.mark.parametrize(
    ("code", "access", "says"),
    [
        pytest.param(
            KafkaError.TOPIC_AUTHORIZATION_FAILED, Access(SCRAM, topics=["orders"]),
            "Kafka refused DESCRIBE and READ on topic 'orders' to principal User:alice",
            id="a reader's topic",
        ),
        pytest.param(
            KafkaError.TOPIC_AUTHORIZATION_FAILED,
            Access(SCRAM, topics=["out"], topic_operations="WRITE"),
            "Kafka refused WRITE on topic 'out' to principal User:alice", id="a writer's topic",
        ),
        pytest.param(
            KafkaError.GROUP_AUTHORIZATION_FAILED, Access(SCRAM, group="billing"),
            "Kafka refused READ on group 'billing' to principal User:alice", id="a group",
        ),
        pytest.param(
            KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            Access(SCRAM, transactional_prefix="eos"),
            "Kafka refused WRITE and DESCRIBE on transactional id prefix 'eos' to principal "
            "User:alice", id="a transactional id prefix",
        ),
        pytest.param(
            KafkaError.CLUSTER_AUTHORIZATION_FAILED, Access(SCRAM),
            "Kafka refused IDEMPOTENT_WRITE on the cluster to principal User:alice",
            id="the idempotent producer",
        ),
    ],
)  # fmt: skip
def test_a_refusal_met_in_a_task_is_said_as_the_drivers_check_says_it(
    code: int, access: Access, says: str
) -> None:
    error = translate(KafkaException(KafkaError(code)), "Consuming orders-0", access=access)
    assert isinstance(error, NotAuthorizedError) and not error.retriable
    message = str(error)
    assert message.startswith(f"Not authorized ({KafkaError(code).name()}): Consuming orders-0: ")
    assert says in message and "kafka-acls.sh --add --allow-principal User:alice" in message
    assert "s3cr3t-pw" not in message and "s3cr3t-pw" not in repr(access)


def test_without_access_the_code_and_kafkas_words_remain() -> None:
    error = translate(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED), "Committing")
    assert isinstance(error, NotAuthorizedError) and error.resource == "group"
    assert "GROUP_AUTHORIZATION_FAILED" in str(error) and "kafka-acls.sh" in str(error)


def test_other_errors_are_not_refusals() -> None:
    error = translate(KafkaError(KafkaError._TRANSPORT), "Consuming", access=Access(SCRAM))
    assert type(error) is KafkaClientError


def test_the_grant_line_of_a_prefix_and_of_the_cluster() -> None:
    prefixed = not_authorized(SCRAM, "WRITE", "transactional id", ["eos"], prefixed=True)
    assert "--operation WRITE --transactional-id eos --resource-pattern-type prefixed." in str(
        prefixed
    )
    cluster = not_authorized(SCRAM, "IDEMPOTENT_WRITE", "cluster", ["kafka-cluster"])
    assert str(cluster).endswith("--operation IDEMPOTENT_WRITE --cluster.")
    assert cluster.principal == "User:alice" and cluster.operations == ("IDEMPOTENT_WRITE",)
    # Only a topic the principal may not DESCRIBE is hidden: a missing READ says nothing of it.
    assert "does not exist" not in str(not_authorized(SCRAM, "READ", "topic", ["t"]))
    assert "does not exist" in str(not_authorized(SCRAM, "DESCRIBE READ", "topic", ["t"]))
