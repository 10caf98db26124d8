"""from_avro / to_avro against a real registry that requires bearer tokens: Apicurio's own
Quarkus OIDC verifies each token's RS256 signature, expiry, issuer and audience against the
public key of the test's token issuer (no OIDC server; nothing here checks a token). Records
written by confluent-kafka's AvroSerializer through the same registry read back with from_avro,
and ours with confluent's AvroDeserializer. A token signed by another key, an expired token and
no token are refused with messages that never show a token."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.sql.functions import col, struct

from kafka_direct.functions import from_avro, to_avro
from kafka_direct.schema_registry.client import RegistryClient
from kafka_direct.schema_registry.errors import SchemaRegistryError
from kafka_direct.schema_registry.options import parse_registry
from kafka_direct.testing.schema_registry import SchemaRegistry
from kafka_direct.testing.tokens import TokenIssuer

CA = "confluent.schema.registry.ssl.ca.location"
BEARER = "confluent.schema.registry.bearer.auth.token"
SUBJECT = "logins-value"
SCHEMA = {
    "type": "record",
    "name": "Login",
    "fields": [{"name": "user", "type": "string"}, {"name": "n", "type": "long"}],
}


@pytest.fixture(scope="module")
def registry() -> Iterator[SchemaRegistry]:
    registry = SchemaRegistry(tls=True, bearer=True)
    try:
        registry.start()
    except Exception as exc:  # noqa: BLE001 - a registry that cannot start fails the tests
        pytest.fail(f"The bearer-token Schema Registry could not start: {exc}", pytrace=False)
    yield registry
    registry.stop()


def _options(registry: SchemaRegistry, token: str | None) -> dict[str, str]:
    options = {CA: str(registry.ca_location)}
    if token is not None:
        options[BEARER] = token
    return options


def _confluent(registry: SchemaRegistry, token: str) -> Any:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    return SchemaRegistryClient(
        {
            "url": registry.url,
            "ssl.ca.location": registry.ca_location,
            "bearer.auth.credentials.source": "STATIC_TOKEN",
            "bearer.auth.token": token,
            # Required by confluent's client (a Confluent Cloud header); Apicurio ignores it.
            "bearer.auth.logical.cluster": "lsrc-test",
            "timeout": 20,
        }
    )


def test_records_round_trip_with_a_bearer_token(spark: Any, registry: SchemaRegistry) -> None:
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    token = registry.mint_token("spark-job")
    options = _options(registry, token)
    confluent = _confluent(registry, token)
    context = SerializationContext("logins", MessageField.VALUE)
    serializer = AvroSerializer(confluent, json.dumps(SCHEMA))
    theirs = [serializer(r, context) for r in ({"user": "ann", "n": 1}, {"user": "bob", "n": 2})]
    ours = [
        row.value
        for row in spark.createDataFrame([("cy", 3), ("dee", 4)], "user string, n long")
        .select(
            "n",
            to_avro(
                struct(col("user"), col("n")),
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
    read = frame.select(
        from_avro(
            "value", subject=SUBJECT, schemaRegistryAddress=registry.url, options=options
        ).alias("login")
    )
    assert sorted((r.login.n, r.login.user) for r in read.collect()) == [
        (1, "ann"),
        (2, "bob"),
        (3, "cy"),
        (4, "dee"),
    ]
    deserializer = AvroDeserializer(confluent)
    assert [deserializer(blob, context) for blob in ours] == [
        {"user": "cy", "n": 3},
        {"user": "dee", "n": 4},
    ]
    shown = repr(parse_registry(registry.url, options)) + repr(registry)
    assert token not in shown and "bearer=" in shown


@pytest.mark.parametrize("kind", ["signed by another key", "expired", "none"])
def test_refused_tokens_are_explained_and_never_shown(
    registry: SchemaRegistry, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    token = {
        "signed by another key": TokenIssuer().mint("spark-job"),
        "expired": registry.mint_token("spark-job", lifetime_s=-120),
        "none": None,
    }[kind]
    # The registry really checks: the same request with a good token succeeds.
    good = RegistryClient(parse_registry(registry.url, _options(registry, registry.mint_token())))
    assert isinstance(good.request("GET", "/subjects"), list)
    with pytest.raises(SchemaRegistryError, match="HTTP 401") as refused:
        from_avro(
            "value",
            subject=SUBJECT,
            schemaRegistryAddress=registry.url,
            options=_options(registry, token),
        )
    message = str(refused.value)
    if token is None:
        assert "HTTP 401: User is not authenticated. No credentials were sent" in message
        assert BEARER in message and "basic.auth.user.info" in message
    else:
        assert f"The bearer token in '{BEARER}' was refused" in message
        signature = token.rsplit(".", 1)[1][:16]
        assert signature not in message and signature not in caplog.text
        # ... nor in the registry's own log (Quarkus would log a badly signed token whole).
        assert signature not in registry.log_text()
