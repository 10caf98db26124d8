"""librdkafka's own text (log lines, error events) never carries the client's secret values:
:func:`kafka_direct.kafka.logs.client_hooks` scrubs them with the values of the config's secret
keys. Fakes first (the calls confluent-kafka makes), then the real librdkafka, which quotes
those values itself; no broker (nothing listens on 127.0.0.1:1).

Review: with ``sasl.oauthbearer.token.endpoint.url = https://idp.example/token?code=URLSECRET``
librdkafka logged 'Failed to retrieve OIDC token from "https://idp.example/token?code=..."', and
in unsecured-JWT mode its error_cb quoted ``sasl.oauthbearer.config``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError

from kafka_direct.kafka.events import ClientEvents
from kafka_direct.kafka.logs import LIBRDKAFKA_LOG, client_hooks
from kafka_direct.logs import RepeatLimiter
from kafka_direct.redaction import REDACTED

OIDC_CONFIG = {
    "bootstrap.servers": "127.0.0.1:1",
    "group.id": "g",
    "security.protocol": "SASL_PLAINTEXT",
    "sasl.mechanism": "OAUTHBEARER",
    "sasl.oauthbearer.method": "oidc",
    "sasl.oauthbearer.client.id": "client-id",
    "sasl.oauthbearer.client.secret": "client-SECRET",
    "sasl.oauthbearer.token.endpoint.url": "http://127.0.0.1:1/token?code=URLSECRET",
}
JWT_CONFIG = {
    "bootstrap.servers": "127.0.0.1:1",
    "group.id": "g",
    "security.protocol": "SASL_PLAINTEXT",
    "sasl.mechanism": "OAUTHBEARER",
    "enable.sasl.oauthbearer.unsecure.jwt": "true",
    "sasl.oauthbearer.config": "principal=alice bogus=JWTSECRET",
}


@pytest.fixture
def logs(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> Any:
    monkeypatch.setattr(LIBRDKAFKA_LOG, "limiter", RepeatLimiter())
    caplog.set_level(logging.DEBUG)
    return caplog


@pytest.mark.parametrize(
    ("config", "line", "secret"),
    [
        (
            OIDC_CONFIG,
            'Failed to retrieve OIDC token from "http://127.0.0.1:1/token?code=URLSECRET": x (-1)',
            "URLSECRET",
        ),
        (
            JWT_CONFIG,
            "Unrecognized sasl.oauthbearer.config beginning at: bogus=JWTSECRET",
            "JWTSECRET",
        ),
        ({"sasl.password": "pw-SECRET"}, "SASL PLAIN with pw-SECRET", "pw-SECRET"),
    ],
    ids=["oidc-url", "unsecured-jwt", "password"],
)
def test_a_clients_log_lines_and_events_lose_its_secret_values(
    logs: pytest.LogCaptureFixture, config: dict[str, str], line: str, secret: str
) -> None:
    events = ClientEvents("The consumer")
    hooks = client_hooks(events, config)
    # as confluent-kafka calls them
    hooks["logger"].log(3, "%s [%s] %s", "OIDC", "rdkafka#consumer-1", line)  # type: ignore[attr-defined]
    events(KafkaError(KafkaError._AUTHENTICATION, f"Failed to acquire token: {line}"))
    texts = [logs.text, events.summary(), str(events.config_error() or "")]
    assert all(secret not in text for text in texts)
    assert REDACTED in logs.text
    assert "librdkafka OIDC: " in logs.text  # the line itself still goes out


def test_a_client_without_secrets_keeps_the_shared_logger() -> None:
    assert client_hooks(None, {"bootstrap.servers": "b:9092"})["logger"] is LIBRDKAFKA_LOG
    assert client_hooks(None)["logger"] is LIBRDKAFKA_LOG
    hooks = client_hooks(None, OIDC_CONFIG)
    assert "URLSECRET" not in repr(hooks) and "client-SECRET" not in repr(hooks)


@pytest.mark.parametrize(
    ("config", "secret"),
    [(OIDC_CONFIG, "URLSECRET"), (JWT_CONFIG, "JWTSECRET")],
    ids=["oidc", "jwt"],
)
def test_the_real_librdkafka_never_gets_a_secret_into_the_logs(
    logs: pytest.LogCaptureFixture, config: dict[str, str], secret: str
) -> None:
    events = ClientEvents("The consumer")
    consumer = Consumer({**config, **client_hooks(events, config)})
    try:
        deadline = time.monotonic() + 10
        while not events.summary() and time.monotonic() < deadline:
            consumer.poll(0.1)
    finally:
        consumer.close()
    assert "sasl.oauthbearer" in events.summary() or "OAUTHBEARER" in events.summary()
    assert secret not in logs.text and secret not in events.summary()
    assert REDACTED in logs.text + events.summary()  # librdkafka did quote it


class _Reporting:
    """Stands for a C client whose last call reported one log line and one error event, both
    quoting a secret value, as librdkafka does."""

    def __init__(self, real: Any, line: str) -> None:
        self.real, self.line = real, line

    def take_events(self) -> Any:
        error = (KafkaError._AUTHENTICATION, self.line, False)
        return [error], [(3, "OIDC", self.line)], 0, 0

    def delivery_error(self) -> None:
        return None


def test_the_c_fast_paths_scrub_their_log_lines_and_events(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The C extensions hand librdkafka's lines to route_log_lines and their error events to
    ClientEvents themselves (no client_hooks): both must lose the client's secret values."""
    from kafka_direct.consumer import native as native_consumer
    from kafka_direct.producer.native import NativeBatchProducer

    line = 'OIDC: Failed to retrieve OIDC token from "http://127.0.0.1:1/token?code=URLSECRET"'
    assert native_consumer.available(), "scripts/setup.sh builds the C extensions"
    producer = NativeBatchProducer({k: v for k, v in OIDC_CONFIG.items() if k != "group.id"})
    events = ClientEvents("The Kafka consumer")
    consumer = native_consumer.NativeConsumer(OIDC_CONFIG, events)
    real = (producer._impl, consumer._impl)
    try:
        producer._impl = _Reporting(real[0], line)
        consumer._impl = _Reporting(real[1], line)
        with caplog.at_level(logging.DEBUG):
            producer._drain()
            consumer._drain_events()
    finally:
        producer._impl, consumer._impl = real
        producer.close()
        consumer.close()
    assert "Failed to retrieve OIDC token from" in caplog.text  # the line was logged
    assert "URLSECRET" not in caplog.text
