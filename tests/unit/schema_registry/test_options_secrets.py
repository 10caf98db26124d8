"""The registry's options never let a credential out: a misspelt credential key, an address
with user info that is not a valid URL, a token or user info with a line break. Table-style; no
registry (a request whose headers http.client refuses never opens a connection).

Review: each of these printed 'sruser:SRPASS' or the token, or raised a bare ValueError
outside the KafkaDirectError tree.
"""

from __future__ import annotations

import pytest

from kafka_direct.config.source import parse_source_options
from kafka_direct.errors import ConfigurationError, KafkaDirectError
from kafka_direct.schema_registry.client import RegistryClient
from kafka_direct.schema_registry.errors import SchemaRegistryError
from kafka_direct.schema_registry.options import (
    RegistryAuth,
    RegistryOptions,
    parse_read_options,
    parse_registry,
    parse_write_options,
)
from kafka_direct.source.value_decode import value_decode

PREFIX = "confluent.schema.registry."
USER_INFO = PREFIX + "basic.auth.user.info"
BEARER = PREFIX + "bearer.auth.token"
SCHEMA = '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}'


def _texts(err: BaseException) -> str:
    return " ".join((str(err), repr(err), repr(vars(err))))


def _source(key: str, value: str) -> None:
    opts = parse_source_options(
        {
            "kafka.bootstrap.servers": "b:9092",
            "subscribe": "t",
            "valueFormat": "avro",
            "schemaRegistryAddress": "http://registry:8081",
            "jsonFormatSchema": SCHEMA,
            key: value,
        },
        streaming=None,
    )
    value_decode(opts.value_format)


@pytest.mark.parametrize(
    "key",
    [
        f"{PREFIX}basic.auth.user_info",
        f"{PREFIX}basic.auth.userinfo",
        f"{PREFIX}basic.auth.userInfo",
        f"{PREFIX}basic.auth.user-info",
        f"{PREFIX}bearer.auth.tokn",
        f"{PREFIX}made.up.setting",  # unknown and harmless-looking: its value is not shown either
    ],
)
@pytest.mark.parametrize(
    "parse",
    [parse_read_options, parse_write_options, lambda o: _source(*next(iter(o.items())))],
    ids=["from_avro", "to_avro", "source"],
)
def test_an_unknown_registry_option_never_shows_its_value(key: str, parse: object) -> None:
    with pytest.raises(ConfigurationError) as info:
        parse({key: "sruser:SRPASS"})  # type: ignore[operator]
    assert "SRPASS" not in _texts(info.value)
    assert key.lower() in str(info.value).lower()  # the option is still named


@pytest.mark.parametrize(
    "address",
    [
        "sruser:SRPASS@registry.example:8081",
        "https:sruser:SRPASS@registry.example",
        "https//sruser:SRPASS@registry.example",
        "https://sruser:SRPASS@registry.example:99999",
        "http://sruser:SRPASS@[::1",
        "ftp://sruser:SRPASS@registry.example",
    ],
)
def test_a_bad_address_is_refused_without_its_credentials(address: str) -> None:
    with pytest.raises(ConfigurationError) as info:  # in the tree, not a bare ValueError
        parse_registry(address, {})
    assert isinstance(info.value, KafkaDirectError)
    assert info.value.option == "schemaRegistryAddress"
    assert "SRPASS" not in _texts(info.value) and "sruser" not in _texts(info.value)
    assert "<redacted>@" in str(info.value)
    assert USER_INFO in str(info.value)  # says where credentials go


@pytest.mark.parametrize(
    ("address", "url", "user_info"),
    [
        ("https://u:p%40ss@registry:8081/", "https://registry:8081", "u:p@ss"),
        ("http://u:p@[::1]:8081", "http://[::1]:8081", "u:p"),
        ("https://registry:8081", "https://registry:8081", None),
    ],
)
def test_credentials_leave_the_url(address: str, url: str, user_info: str | None) -> None:
    registry = parse_registry(address, {})
    assert (registry.url, registry.auth.user_info) == (url, user_info)


def test_a_bearer_token_read_from_a_file_loses_its_line_break() -> None:
    registry = parse_registry("http://r:1", {BEARER: "  eyJhbGc.SECRET.sig\n"})
    assert registry.auth.bearer_token == "eyJhbGc.SECRET.sig"
    assert RegistryClient(registry)._headers()["Authorization"] == "Bearer eyJhbGc.SECRET.sig"


@pytest.mark.parametrize(
    ("address", "options", "option"),
    [
        ("http://r:1", {BEARER: "eyJhbGc.SECRET\nsig"}, BEARER),
        ("http://r:1", {BEARER: "eyJhbGc SECRET"}, BEARER),
        ("http://r:1", {USER_INFO: "sruser:SRPASS-SECRET\n"}, USER_INFO),
        ("http://r:1", {USER_INFO: "sruser:SRPASS-SECRET\r"}, USER_INFO),
        ("http://sruser:SRPASS-SECRET%0A@r:1", {}, "schemaRegistryAddress"),
    ],
)
def test_a_credential_with_a_control_character_is_refused_redacted(
    address: str, options: dict[str, str], option: str
) -> None:
    with pytest.raises(ConfigurationError) as info:
        parse_registry(address, options)
    assert info.value.option == option
    assert "SECRET" not in _texts(info.value) and "SRPASS" not in _texts(info.value)
    assert "line break" in str(info.value)


@pytest.mark.parametrize(
    "auth",
    [
        RegistryAuth(bearer_token="eyJhbGc.SECRET-TOKEN\n"),
        RegistryAuth(bearer_token="eyJhbGc.SECRET-TOKEN\u20ac"),  # not Latin-1
    ],
)
def test_a_request_that_cannot_be_built_never_quotes_its_headers(auth: RegistryAuth) -> None:
    # Built by hand: parse_registry refuses these. http.client checks a header before it
    # connects, so the port need not be open (9, discard, is not).
    client = RegistryClient(RegistryOptions("http://127.0.0.1:9", auth, timeout_s=1.0))
    with pytest.raises(SchemaRegistryError) as info:
        client.request("GET", "/subjects")
    assert "SECRET" not in _texts(info.value)
    assert (
        "Could not send a request to the Schema Registry at http://127.0.0.1:9 (GET /subjects)"
        in str(info.value)
    )
