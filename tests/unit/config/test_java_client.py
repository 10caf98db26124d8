"""A Spark job's Java client settings whose librdkafka names or units differ
(kafka_direct.config.java_client), through the one place every ``kafka.*`` option is judged."""

from __future__ import annotations

import pytest

from kafka_direct.config.java_client import DROPPED, RENAMED, translate_java_names
from kafka_direct.config.reader import kafka_params
from kafka_direct.errors import ConfigurationError

BOOTSTRAP = {"bootstrap.servers": "b:9092"}

# the Java client's setting, what librdkafka gets
TRANSLATED = [
    ({"fetch.max.wait.ms": "10"}, {"fetch.wait.max.ms": "10"}),
    ({"max.request.size": "2097152"}, {"message.max.bytes": "2097152"}),
    ({"receive.buffer.bytes": "65536"}, {"socket.receive.buffer.bytes": "65536"}),
    ({"receive.buffer.bytes": "-1"}, {"socket.receive.buffer.bytes": "0"}),
    ({"send.buffer.bytes": "-1"}, {"socket.send.buffer.bytes": "0"}),
    ({"buffer.memory": "33554432"}, {"queue.buffering.max.kbytes": "32768"}),
    ({"buffer.memory": "1025"}, {"queue.buffering.max.kbytes": "2"}),  # rounded up
    ({"buffer.memory": "lots"}, {"queue.buffering.max.kbytes": "lots"}),  # librdkafka refuses
    ({"max.block.ms": "60000"}, {}),
    ({"metric.reporters": "x.Reporter"}, {}),
    (
        {"partitioner.class": "org.apache.kafka.clients.producer.internals.DefaultPartitioner"},
        {},
    ),
    ({"fetch.wait.max.ms": "10", "linger.ms": "5"}, {"fetch.wait.max.ms": "10", "linger.ms": "5"}),
    # Sign-in and TLS tuning of the Java client's own code (librdkafka refused each by name).
    ({"sasl.login.refresh.window.factor": "0.8"}, {}),
    ({"sasl.login.refresh.window.jitter": "0.05"}, {}),
    ({"sasl.login.refresh.min.period.seconds": "60"}, {}),
    ({"sasl.login.refresh.buffer.seconds": "300"}, {}),
    ({"sasl.kerberos.ticket.renew.window.factor": "0.8"}, {}),
    ({"sasl.kerberos.ticket.renew.jitter": "0.05"}, {}),
    ({"sasl.login.connect.timeout.ms": "10000"}, {}),
    ({"sasl.login.read.timeout.ms": "10000"}, {}),
    ({"sasl.login.retry.backoff.ms": "100"}, {}),
    ({"sasl.login.retry.backoff.max.ms": "10000"}, {}),
    ({"sasl.oauthbearer.scope.claim.name": "scp"}, {}),
    ({"sasl.oauthbearer.expected.audience": "kafka"}, {}),
    ({"ssl.keymanager.algorithm": "SunX509"}, {}),
    ({"ssl.trustmanager.algorithm": "PKIX"}, {}),
    ({"ssl.secure.random.implementation": "SHA1PRNG"}, {}),
    ({"ssl.provider": "SunJSSE"}, {}),
]


@pytest.mark.parametrize(("java", "native"), TRANSLATED)
def test_java_names_become_librdkafkas(java: dict[str, str], native: dict[str, str]) -> None:
    assert translate_java_names(java) == native
    judged = kafka_params({**BOOTSTRAP, **java}, owned={}, owner="sink")
    assert {k: v for k, v in judged.items() if k != "bootstrap.servers"} == native


def test_a_dropped_setting_is_named_in_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="kafka_direct.config.java_client"):
        translate_java_names({"max.block.ms": "1"}, prefix="kafka.")
    assert "kafka.max.block.ms is a Java client setting" in caplog.text
    assert "kafka.delivery.timeout.ms" in caplog.text


# settings, the option the error names, a phrase it must contain
REFUSED = [
    (
        {"fetch.max.wait.ms": "10", "fetch.wait.max.ms": "5"},
        "kafka.fetch.max.wait.ms",
        "not both",
    ),
    (
        {"partitioner.class": "org.apache.kafka.clients.producer.RoundRobinPartitioner"},
        "kafka.partitioner.class",
        "'partition' column",
    ),
]


@pytest.mark.parametrize(("params", "option", "phrase"), REFUSED)
def test_what_librdkafka_cannot_mean_is_refused_naming_the_option(
    params: dict[str, str], option: str, phrase: str
) -> None:
    with pytest.raises(ConfigurationError) as info:
        kafka_params({**BOOTSTRAP, **params}, owned={}, owner="sink")
    assert info.value.option == option
    assert phrase in str(info.value)


def test_every_translated_name_is_one_librdkafka_accepts_and_no_name_is_both() -> None:
    from confluent_kafka import Producer

    assert not set(RENAMED) & set(DROPPED)
    for native, _ in RENAMED.values():
        value = "1" if "max.bytes" not in native else "1048576"
        # Raises KafkaException on an unknown name; it never connects (nothing to send).
        Producer({"bootstrap.servers": "127.0.0.1:9", native: value})


@pytest.mark.parametrize("name", sorted(DROPPED))
def test_every_dropped_name_is_one_librdkafka_would_refuse(name: str) -> None:
    # Dropped only because librdkafka has no such setting: one it has must reach it.
    from confluent_kafka import KafkaException, Producer

    with pytest.raises(KafkaException, match="No such configuration property"):
        Producer({"bootstrap.servers": "127.0.0.1:9", name: "1"})


# Java TLS settings librdkafka has no name for: dropped where they ask what librdkafka does
# anyway, refused where they ask what it cannot (config.security; they are TLS settings).
TLS_VERSIONS = [
    ({"ssl.protocol": "TLSv1.3"}, None),
    ({"ssl.protocol": "TLS"}, None),
    ({"ssl.enabled.protocols": "TLSv1.2,TLSv1.3"}, None),
    ({"ssl.enabled.protocols": "TLSv1.3"}, None),
    ({"ssl.protocol": "TLSv1.1"}, "kafka.ssl.protocol"),
    ({"ssl.enabled.protocols": "TLSv1,TLSv1.2"}, "kafka.ssl.enabled.protocols"),
]


@pytest.mark.parametrize(("java", "refused"), TLS_VERSIONS)
def test_tls_versions_are_dropped_when_librdkafka_honours_them_and_refused_otherwise(
    java: dict[str, str], refused: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    given = {**BOOTSTRAP, "security.protocol": "SSL", **java}
    if refused is not None:
        with pytest.raises(ConfigurationError) as info:
            kafka_params(given, owned={}, owner="sink")
        assert info.value.option == refused
        assert "TLS 1.2 or 1.3" in str(info.value)
        return
    with caplog.at_level("WARNING", logger="kafka_direct.config.security"):
        judged = kafka_params(given, owned={}, owner="sink")
    assert dict(judged) == {**BOOTSTRAP, "security.protocol": "SSL"}
    assert f"kafka.{next(iter(java))}: librdkafka has no such setting" in caplog.text


def test_producer_settings_on_a_read_are_dropped_as_the_java_consumer_ignores_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # On a consumer, message.max.bytes above fetch.max.bytes would be refused by librdkafka.
    java = {"max.request.size": "20971520", "buffer.memory": "1", "fetch.max.wait.ms": "10"}
    with caplog.at_level("WARNING", logger="kafka_direct.config.java_client"):
        read = kafka_params({**BOOTSTRAP, **java}, owned={}, owner="source")
        written = kafka_params({**BOOTSTRAP, **java}, owned={}, owner="sink")
    assert {k: v for k, v in read.items() if k != "bootstrap.servers"} == {
        "fetch.wait.max.ms": "10"
    }
    assert written["message.max.bytes"] == "20971520"
    assert "kafka.max.request.size is a Java producer setting" in caplog.text
