"""Secrets never reach a person: kafka_direct.redaction and every path into an error.

Issue: ``.option("kafka.sasl.pasword", "secret123")`` failed with ``Invalid option
'kafka.sasl.pasword': got 'secret123'`` on the sink and the source. The property tests below
set every secret key librdkafka, the Java client and Spark know, correctly spelt and misspelt by
one or two edits (hypothesis), on the source, the sink and the DStream API, and let the real
librdkafka judge the config, as the driver does before a query starts. The value must appear in
no error message, ``repr``, attribute or log line. No broker and no Spark: creating a client does
not connect.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_direct.config.clients import probe_consumer_config
from kafka_direct.config.dstream import validate_params
from kafka_direct.config.kafka import KafkaConfig
from kafka_direct.config.sink import parse_sink_options
from kafka_direct.config.source import parse_source_options
from kafka_direct.errors import ConfigurationError, KafkaDirectError
from kafka_direct.kafka.admin import check_consumer_config, check_producer_config
from kafka_direct.redaction import (
    HIDDEN,
    REDACTED,
    SAFE_KAFKA_KEYS,
    SECRET_KEYS,
    _distance,
    is_secret,
    may_show,
    redact,
    shown,
)

#: Written out here, not taken from the module: the test must not share the code's blind spots.
KNOWN_SECRETS = [
    "sasl.password",
    "ssl.key.password",
    "ssl.keystore.password",
    "ssl.truststore.password",
    "sasl.jaas.config",
    "sasl.oauthbearer.config",
    "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.client.id",
    "sasl.oauthbearer.token.endpoint.url",
    "sasl.oauthbearer.assertion.private.key.passphrase",
    "sasl.oauthbearer.assertion.private.key.pem",
    "sasl.oauthbearer.extensions",
    "ssl.key.pem",
    "ssl.certificate.pem",
    "ssl_key",
    "ssl.keystore.key",
    "ssl.keystore.certificate.chain",
    "ssl.truststore.certificates",
    "sasl.kerberos.keytab",
    "basic.auth.user.info",
    "bearer.auth.token",
    "bearer.auth.client.secret",
    "client.secret",
    "delegation.token",
]

_EDIT_CHARS = "abcdefghijklmnopqrstuvwxyz._"


@st.composite
def misspelt(draw: st.DrawFn, key: str) -> str:
    """``key`` after one or two random edits: insert, delete, replace, or swap two neighbours."""
    out = key
    for _ in range(draw(st.integers(1, 2))):
        kind = draw(st.sampled_from(["insert", "delete", "replace", "swap"]))
        at = draw(st.integers(0, max(len(out) - 1, 0)))
        char = draw(st.sampled_from(_EDIT_CHARS))
        if kind == "insert":
            out = out[:at] + char + out[at:]
        elif kind == "delete" and len(out) > 1:
            out = out[:at] + out[at + 1 :]
        elif kind == "replace":
            out = out[:at] + char + out[at + 1 :]
        elif kind == "swap" and at + 1 < len(out):
            out = out[:at] + out[at + 1] + out[at] + out[at + 2 :]
    return out


secret_keys = st.sampled_from(KNOWN_SECRETS).flatmap(
    lambda key: st.one_of(st.just(key), misspelt(key))
)
#: A unique token inside each value, so a leak is found however the value is quoted.
secret_values = st.builds(
    lambda token, tail: f"S3CR3T{token}{tail}",
    st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", min_size=10, max_size=10),
    st.text(" =;\"'abc-", max_size=6),
)


def token_of(value: str) -> str:
    return value[:16]


def assert_hidden(token: str, *texts: str) -> None:
    for text in texts:
        assert token not in text, f"secret leaked into: {text[:300]}"


def outcome(call: Callable[[], Any]) -> list[str]:
    """Every text a user could see from ``call``: the error (message, repr, attributes) or the
    result's repr."""
    try:
        result = call()
    except KafkaDirectError as exc:
        return [str(exc), repr(exc), repr(exc.args), repr(vars(exc))]
    return [repr(result), str(result)]


def _source(key: str, value: str, extra: dict[str, str] | None = None) -> Any:
    more = {f"kafka.{k}": v for k, v in (extra or {}).items()}
    opts = parse_source_options(
        {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t", f"kafka.{key}": value, **more},
        streaming=True,
    )
    check_consumer_config(opts.executor_settings().consumer_config, opts.kafka)
    return opts


def _sink(key: str, value: str, extra: dict[str, str] | None = None) -> Any:
    more = {f"kafka.{k}": v for k, v in (extra or {}).items()}
    opts = parse_sink_options(
        {"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "t", f"kafka.{key}": value, **more}
    )
    check_producer_config(opts.producer, opts.kafka)
    return opts


def _dstream(key: str, value: str, extra: dict[str, str] | None = None) -> Any:
    kafka, group, reset = validate_params(
        {"bootstrap.servers": "127.0.0.1:1", "group.id": "g", key: value, **(extra or {})}
    )
    check_consumer_config(probe_consumer_config(kafka), kafka)
    return kafka, group, reset


@pytest.mark.parametrize("api", [_source, _sink, _dstream], ids=["source", "sink", "dstream"])
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(key=secret_keys, value=secret_values)
def test_a_secret_value_appears_in_no_error_repr_or_log(
    api: Callable[[str, str], Any], key: str, value: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.clear()
    with caplog.at_level(logging.DEBUG):
        texts = outcome(lambda: api(key, value))
    assert_hidden(token_of(value), *texts, caplog.text)


@settings(max_examples=200, deadline=None)
@given(key=secret_keys, value=secret_values, prefixed=st.booleans())
def test_configuration_error_never_keeps_a_secret(key: str, value: str, prefixed: bool) -> None:
    option = f"kafka.{key}" if prefixed else key
    err = ConfigurationError(option, value, "x", f'librdkafka says: "{value}" is bad')
    assert err.value in (REDACTED, HIDDEN)
    assert_hidden(token_of(value), str(err), repr(err), repr(vars(err)))
    assert_hidden(token_of(value), repr(KafkaConfig({key: value})), repr(redact({option: value})))


def test_the_issue_examples() -> None:
    for key in ("kafka.sasl.pasword", "kafka.ssl.key.pasword"):
        texts = outcome(lambda k=key: _sink(k.removeprefix("kafka."), "secret123"))
        texts += outcome(lambda k=key: _source(k.removeprefix("kafka."), "secret123"))
        assert_hidden("secret123", *texts)
        assert any(REDACTED in t for t in texts)


def test_an_unknown_kafka_key_never_shows_its_value() -> None:
    err = ConfigurationError(
        "kafka.my.custom.thing", "opaque-value", "a setting librdkafka accepts"
    )
    assert "opaque-value" not in str(err)
    assert HIDDEN in str(err)
    texts = outcome(lambda: _source("my.custom.thing", "opaque-value"))
    assert_hidden("opaque-value", *texts)
    assert "kafka.my.custom.thing" in texts[0]  # the option is still named


@pytest.mark.parametrize("value", ["a", "in", "*"])
def test_a_short_hidden_value_is_scrubbed_where_quoted_and_the_message_stays_readable(
    value: str,
) -> None:
    # Regression (review): every "a" of the message became the marker, and the marker's own
    # letters were replaced again; where the marker stood showed where the value's letters were.
    err = ConfigurationError(
        "kafka.my.custom.thing",
        value,
        "a value accepted in its place",
        f'librdkafka said: Invalid value "{value}" for it',
    )
    assert "expected a value accepted in its place." in str(err)
    assert f'Invalid value "{HIDDEN}" for it' in str(err)


@pytest.mark.parametrize(
    ("option", "value", "visible"),
    [
        ("kafka.bootstrap.servers", "b:9092", True),
        ("kafka.acks", "0", True),
        ("kafka.isolation.level", "bogus", True),
        ("isolation.level", "bogus", True),  # kafkaParams spell keys without the prefix
        ("startingOffsets", "nope", True),  # the source's own options are not Kafka keys
        ("kafkaConsumer.pollTimeoutMs", "-1", True),
        ("kafka.sasl.username", "alice", True),
        ("kafka.sasl.password", "pw", False),
        ("kafka.sasl.pasword", "pw", False),
        ("kafka.ssl.key.pasword", "pw", False),
        ("sasl.passwrod", "pw", False),
        ("kafka.my.secrt", "pw", False),
        ("kafka.some.new.setting", "v", False),
        ("some.new.setting", "v", False),
        # other clients' namespaces are not Kafka keys; their secrets are still secrets
        ("confluent.schema.registry.ssl.ca.location", "/ca.pem", True),
        ("confluent.schema.registry.basic.auth.user.info", "bob:pw", False),
        ("confluent.schema.registry.bearer.auth.token", "tok", False),
        ("spark.sql.shuffle.partitions", "4", True),
    ],
)
def test_may_show(option: str, value: str, visible: bool) -> None:
    assert may_show(option) is visible
    assert (shown(option, value) == value) is visible
    assert shown(option, None) is None  # "not set" is not a secret


def test_no_harmless_key_is_near_a_secret_one() -> None:
    # The list of harmless keys is what gets shown: none may be a misspelt secret key.
    near = [
        (safe, secret)
        for safe in SAFE_KAFKA_KEYS
        for secret in SECRET_KEYS | set(KNOWN_SECRETS)
        if _distance(safe, secret, 2) <= 2
    ]
    assert near == []
    assert not [key for key in SAFE_KAFKA_KEYS if is_secret(key)]
    assert set(KNOWN_SECRETS) <= {k for k in KNOWN_SECRETS if is_secret(k)}


@pytest.mark.parametrize(
    ("a", "b", "distance"),
    [
        ("sasl.password", "sasl.password", 0),
        ("sasl.password", "sasl.pasword", 1),
        ("sasl.password", "sasl.passwrod", 1),
        ("ca", "abc", 2),  # a swap and an insert at one spot: two edits, not three
        ("kitten", "sitting", 3),
    ],
)
def test_distance(a: str, b: str, distance: int) -> None:
    assert _distance(a, b, 5) == distance


@pytest.mark.parametrize("api", [_source, _sink, _dstream], ids=["source", "sink", "dstream"])
def test_a_java_login_module_librdkafka_cannot_run_is_refused_without_its_secret(
    api: Callable[..., Any],
) -> None:
    jaas = 'com.acme.kafka.CustomLoginModule required username="alice" password="JAAS-s3cr3t";'
    with pytest.raises(ConfigurationError) as info:
        # A JAAS line is read only where SASL is on, as in Java.
        api("sasl.jaas.config", jaas, {"security.protocol": "SASL_SSL"})
    message = str(info.value)
    assert "JAAS-s3cr3t" not in message
    assert info.value.option.endswith("sasl.jaas.config")
    assert "Java code librdkafka cannot run" in message
    for equivalent in ("sasl.mechanism", "sasl.username", "sasl.password", "OAUTHBEARER"):
        assert equivalent in message


def test_a_misspelt_kafka_key_gets_a_suggestion() -> None:
    with pytest.raises(ConfigurationError) as info:
        _sink("sasl.pasword", "secret123")
    assert "Did you mean 'kafka.sasl.password'?" in str(info.value)
