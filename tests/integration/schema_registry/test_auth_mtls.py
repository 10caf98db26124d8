"""from_avro / to_avro against a real registry that requires TLS client certificates (mutual
TLS): Apicurio behind a socat (OpenSSL) front that accepts only certificates signed by the
test's CA, as deployments put a terminating proxy in front of it (Apicurio's build fixes
Quarkus' client-auth setting). The client's key is encrypted, so ``ssl.key.password`` is used.
Records written by confluent-kafka's AvroSerializer with the same certificate read back with
from_avro, and ours with confluent's AvroDeserializer. No certificate, a wrong key password and
a certificate from another CA fail with messages naming the option, never the password."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.functions import col, struct

from kafka_direct.errors import ConfigurationError
from kafka_direct.functions import from_avro, to_avro
from kafka_direct.schema_registry.errors import SchemaRegistryError
from kafka_direct.testing.certificates import write_ca, write_client_certificate
from kafka_direct.testing.schema_registry import SchemaRegistry

PREFIX = "confluent.schema.registry.ssl."
KEY_PASSWORD = "kp-4b7e"
SUBJECT = "badges-value"
SCHEMA = {
    "type": "record",
    "name": "Badge",
    "fields": [{"name": "holder", "type": "string"}, {"name": "n", "type": "long"}],
}


@pytest.fixture(scope="module")
def registry() -> Iterator[SchemaRegistry]:
    registry = SchemaRegistry(client_auth=True)
    try:
        registry.start()
    except Exception as exc:  # noqa: BLE001 - a registry that cannot start fails the tests
        pytest.fail(f"The mutual-TLS Schema Registry could not start: {exc}", pytrace=False)
    yield registry
    registry.stop()


@pytest.fixture(scope="module")
def certificate(registry: SchemaRegistry) -> tuple[str, str]:
    return registry.client_certificate("spark-job", password=KEY_PASSWORD)


def _options(
    registry: SchemaRegistry, certificate: tuple[str, str] | None, password: str = KEY_PASSWORD
) -> dict[str, str]:
    options = {PREFIX + "ca.location": str(registry.ca_location)}
    if certificate is not None:
        options[PREFIX + "certificate.location"] = certificate[0]
        options[PREFIX + "key.location"] = certificate[1]
        options[PREFIX + "key.password"] = password
    return options


def _plan(registry: SchemaRegistry, options: dict[str, str]) -> Any:
    return from_avro("value", subject=SUBJECT, schemaRegistryAddress=registry.url, options=options)


def test_records_round_trip_with_a_client_certificate(
    spark: Any, registry: SchemaRegistry, certificate: tuple[str, str]
) -> None:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    options = _options(registry, certificate)
    confluent = SchemaRegistryClient(
        {
            "url": registry.url,
            "timeout": 20,
            **{k[len("confluent.schema.registry.") :]: v for k, v in options.items()},
        }
    )
    context = SerializationContext("badges", MessageField.VALUE)
    serializer = AvroSerializer(confluent, json.dumps(SCHEMA))
    theirs = [
        serializer(r, context) for r in ({"holder": "ann", "n": 1}, {"holder": "bob", "n": 2})
    ]
    ours = [
        row.value
        for row in spark.createDataFrame([("cy", 3), ("dee", 4)], "holder string, n long")
        .select(
            "n",
            to_avro(
                struct(col("holder"), col("n")),
                json.dumps(SCHEMA),
                subject=SUBJECT,
                schemaRegistryAddress=registry.url,
                options=options,
            ).alias("value"),
        )
        .orderBy("n")
        .collect()
    ]
    frame = spark.createDataFrame([(blob,) for blob in theirs + ours], "value binary")
    read = frame.select(_plan(registry, options).alias("badge"))
    assert sorted((r.badge.n, r.badge.holder) for r in read.collect()) == [
        (1, "ann"),
        (2, "bob"),
        (3, "cy"),
        (4, "dee"),
    ]
    deserializer = AvroDeserializer(confluent)
    assert [deserializer(blob, context) for blob in ours] == [
        {"holder": "cy", "n": 3},
        {"holder": "dee", "n": 4},
    ]


def test_without_a_client_certificate_the_error_names_the_options(
    registry: SchemaRegistry,
) -> None:
    # The registry's alert, or (TLS 1.3: it comes after the request) a closed connection.
    with pytest.raises(SchemaRegistryError, match="a TLS client certificate") as refused:
        _plan(registry, _options(registry, None))
    assert f"'{PREFIX}certificate.location'" in str(refused.value)
    assert f"'{PREFIX}key.location'" in str(refused.value)


def test_a_wrong_key_password_is_named_and_never_shown(
    registry: SchemaRegistry, certificate: tuple[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with pytest.raises(ConfigurationError, match="does not decrypt") as refused:
        _plan(registry, _options(registry, certificate, password="wrong-2c9d"))
    assert refused.value.option == PREFIX + "key.password"
    shown = str(refused.value) + caplog.text
    assert "wrong-2c9d" not in shown and KEY_PASSWORD not in shown


def test_a_certificate_from_another_ca_is_refused(registry: SchemaRegistry, tmp_path: Path) -> None:
    other = write_ca(tmp_path, "another test CA", stem="other-ca")
    cert, key = write_client_certificate(tmp_path, other, "spark-job", password=KEY_PASSWORD)
    with pytest.raises(SchemaRegistryError, match=r"refused? the client certificate") as refused:
        _plan(registry, _options(registry, (str(cert), str(key))))
    assert f"'{PREFIX}certificate.location'" in str(refused.value)
    assert KEY_PASSWORD not in str(refused.value)
