"""Unit tests for kafka_direct.schema_registry.options: parsing, refusals and redaction."""

from __future__ import annotations

import pickle

import pytest

from kafka_direct.errors import ConfigurationError
from kafka_direct.schema_registry.client import RegistryClient
from kafka_direct.schema_registry.options import (
    parse_read_options,
    parse_registry,
    parse_write_options,
)

USER_INFO = "confluent.schema.registry.basic.auth.user.info"
BEARER = "confluent.schema.registry.bearer.auth.token"


def test_credentials_in_the_url_move_to_auth_and_never_print() -> None:
    registry = parse_registry("https://alice:s3cr%40t@registry:8081/", {})
    assert registry.url == "https://registry:8081"
    assert registry.auth.user_info == "alice:s3cr@t"
    for shown in (repr(registry), str(registry), repr(RegistryClient(registry))):
        assert "s3cr" not in shown and "alice" not in shown
    assert "basic=*********(redacted)" in repr(registry)
    assert pickle.loads(pickle.dumps(registry)) == registry


def test_basic_and_bearer_options() -> None:
    basic = parse_registry("http://r:1", {USER_INFO: "bob:pw"})
    assert basic.auth.user_info == "bob:pw" and "pw" not in repr(basic)
    bearer = parse_registry("http://r:1", {BEARER: "tok123"})
    assert bearer.auth.bearer_token == "tok123" and "tok123" not in repr(bearer)
    timeout = parse_registry("http://r:1", {"confluent.schema.registry.timeout.ms": "2500"})
    assert timeout.timeout_s == 2.5


@pytest.mark.parametrize(
    ("address", "options", "phrase"),
    [
        ("", {}, "'schemaRegistryAddress'.*Schema Registry's URL"),
        ("registry:8081", {}, "'schemaRegistryAddress'.*http:// or https:// URL"),
        ("http://r:1", {USER_INFO: "no-colon-secret"}, f"'{USER_INFO}'.*'user:password'"),
        ("http://r:1", {USER_INFO: "a:b", BEARER: "t"}, f"'{BEARER}'.*not to be set together"),
        ("http://r:1", {"confluent.schema.registry.timeout.ms": "0"}, "positive number"),
        (
            "http://r:1",
            {"confluent.schema.registry.ssl.certificate.location": "/c.pem"},
            "ssl.key.location.*TLS client authentication",
        ),
    ],
)
def test_registry_refusals_name_the_option(
    address: str, options: dict[str, str], phrase: str
) -> None:
    with pytest.raises(ConfigurationError, match=phrase) as info:
        parse_registry(address, options)
    assert "no-colon-secret" not in str(info.value)


def test_read_options() -> None:
    assert parse_read_options({}).mode == "FAILFAST"
    assert parse_read_options({"mode": "permissive"}).mode == "PERMISSIVE"
    assert parse_read_options({"schemaVersion": "3"}).schema_version == 3
    assert parse_read_options({"schemaVersion": "latest"}).schema_version is None


@pytest.mark.parametrize(
    ("options", "phrase"),
    [
        ({"mode": "DROPMALFORMED"}, "'mode'.*'FAILFAST' or 'PERMISSIVE'"),
        ({"schemaVersion": "0"}, "'schemaVersion'.*positive version"),
        ({"mod": "FAILFAST"}, "Did you mean 'mode'"),
        ({"subjectNameStrategy": "topic"}, "one of the from_avro options"),
        ({BEARER + "x": "secret-value"}, "Did you mean"),
    ],
)
def test_read_refusals_name_the_option(options: dict[str, str], phrase: str) -> None:
    with pytest.raises(ConfigurationError, match=phrase) as info:
        parse_read_options(options)
    assert "secret-value" not in str(info.value)


def test_write_options() -> None:
    parsed = parse_write_options({"topic": "t", "isKey": "true", "autoRegisterSchemas": "false"})
    assert (parsed.topic, parsed.is_key, parsed.auto_register) == ("t", True, False)
    with pytest.raises(ConfigurationError, match=r"'isKey'.*'true' or 'false'"):
        parse_write_options({"isKey": "yes"})


def test_the_client_sends_basic_or_bearer_auth_and_verifies_tls_with_the_given_ca(
    tmp_path: object,
) -> None:
    import base64

    basic = RegistryClient(parse_registry("http://bob:pw@r:1", {}))
    assert basic._headers()["Authorization"] == "Basic " + base64.b64encode(b"bob:pw").decode()
    bearer = RegistryClient(parse_registry("http://r:1", {BEARER: "tok"}))
    assert bearer._headers()["Authorization"] == "Bearer tok"
    assert "Authorization" not in RegistryClient(parse_registry("http://r:1", {}))._headers()
    assert RegistryClient(parse_registry("http://r:1", {}))._context() is None
    secure = RegistryClient(parse_registry("https://r:1", {}))
    context = secure._context()
    assert context is not None and context.verify_mode.name == "CERT_REQUIRED"
    missing_ca = RegistryClient(
        parse_registry("https://r:1", {"confluent.schema.registry.ssl.ca.location": "/no/ca.pem"})
    )
    with pytest.raises(
        ConfigurationError,
        match=r"'confluent\.schema\.registry\.ssl\.ca\.location': got '/no/ca\.pem'",
    ):
        missing_ca._context()
