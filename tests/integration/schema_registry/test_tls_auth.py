"""from_avro / to_avro against a real registry that serves HTTPS only and enforces HTTP basic
auth (Apicurio's own Quarkus: a CA made for the test, its embedded user realm). Reads and
writes go through TLS with the CA given by option; a wrong password, a missing CA and a plain
http:// address fail with messages that never show the password."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.sql.functions import col, struct

from kafka_direct.functions import from_avro, to_avro
from kafka_direct.schema_registry.client import RegistryClient
from kafka_direct.schema_registry.errors import SchemaRegistryError
from kafka_direct.schema_registry.options import parse_registry
from kafka_direct.testing.schema_registry import SchemaRegistry

PASSWORD = "pw-9f3c1e"
SCHEMA = {
    "type": "record",
    "name": "Login",
    "fields": [{"name": "user", "type": "string"}, {"name": "n", "type": "long"}],
}


@pytest.fixture(scope="module")
def secured() -> Iterator[SchemaRegistry]:
    registry = SchemaRegistry(tls=True, users={"alice": PASSWORD})
    try:
        registry.start()
    except Exception as exc:  # noqa: BLE001 - a registry that cannot start fails the tests
        pytest.fail(f"The TLS + basic auth Schema Registry could not start: {exc}", pytrace=False)
    yield registry
    registry.stop()


def _options(registry: SchemaRegistry, password: str = PASSWORD) -> dict[str, str]:
    assert registry.ca_location is not None
    return {
        "confluent.schema.registry.ssl.ca.location": registry.ca_location,
        "confluent.schema.registry.basic.auth.user.info": f"alice:{password}",
    }


def test_the_registry_really_requires_tls_and_a_password(secured: SchemaRegistry) -> None:
    assert secured.url.startswith("https://")
    with pytest.raises(SchemaRegistryError, match="HTTP 401") as refused:
        RegistryClient(
            parse_registry(secured.url, {k: v for k, v in _options(secured).items() if "ssl" in k})
        ).request("GET", "/subjects")
    assert PASSWORD not in str(refused.value)
    plain = secured.url.replace("https://", "http://")
    with pytest.raises(SchemaRegistryError, match="Could not reach the Schema Registry"):
        RegistryClient(parse_registry(plain, _options(secured))).request("GET", "/subjects")


def test_records_round_trip_through_tls_and_basic_auth(spark: Any, secured: SchemaRegistry) -> None:
    options = _options(secured)
    frame = spark.createDataFrame([("ann", 1), ("bob", 2)], "user string, n long")
    written = frame.select(
        "n",
        to_avro(
            struct(col("user"), col("n")),
            json.dumps(SCHEMA),
            subject="logins-value",
            schemaRegistryAddress=secured.url,
            options=options,
        ).alias("value"),
    )
    read = written.select(
        "n",
        from_avro(
            "value", subject="logins-value", schemaRegistryAddress=secured.url, options=options
        ).alias("login"),
    )
    assert [r.login.asDict() for r in read.orderBy("n").collect()] == [
        {"user": "ann", "n": 1},
        {"user": "bob", "n": 2},
    ]


def test_a_wrong_password_fails_at_planning_without_showing_it(secured: SchemaRegistry) -> None:
    with pytest.raises(SchemaRegistryError, match="HTTP 401") as refused:
        from_avro(
            "value",
            subject="logins-value",
            schemaRegistryAddress=secured.url,
            options=_options(secured, "wrong-7d2a"),
        )
    assert "wrong-7d2a" not in str(refused.value) and "alice" not in str(refused.value)


def test_without_the_ca_the_certificate_is_not_trusted(secured: SchemaRegistry) -> None:
    options = {k: v for k, v in _options(secured).items() if "ssl" not in k}  # the system CAs only
    with pytest.raises(SchemaRegistryError, match="CERTIFICATE_VERIFY_FAILED") as refused:
        from_avro(
            "value", subject="logins-value", schemaRegistryAddress=secured.url, options=options
        )
    assert PASSWORD not in str(refused.value)


def test_reprs_never_show_the_credentials(secured: SchemaRegistry) -> None:
    registry = parse_registry(
        secured.url.replace("https://", f"https://alice:{PASSWORD}@"),
        {"confluent.schema.registry.ssl.ca.location": str(secured.ca_location)},
    )
    shown = repr(registry) + repr(RegistryClient(registry)) + repr(secured)
    assert PASSWORD not in shown and "basic=" in shown
    # ... and the credentials moved out of the address still authenticate.
    assert isinstance(RegistryClient(registry).request("GET", "/subjects"), list)
