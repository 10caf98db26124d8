"""Bad input and broken brokers through the public API: clear errors, no secrets."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import uuid
from collections.abc import Iterator

import pytest
from pyspark.errors import PySparkException

from kafka_direct.config.source import parse_source_options
from kafka_direct.consumer.read import read_range
from kafka_direct.errors import FetchTimeoutError
from kafka_direct.offsets import OffsetRange
from kafka_direct.testing.broker import EmbeddedBroker, create_topic
from tests.integration.kafka_helpers import produce_known

SECRET = "s3cr3t-Pa55word"
SILENT = "silent-server"  # replaced by the address of _silent_server()


def _message(exc_info: pytest.ExceptionInfo[BaseException]) -> str:
    return str(exc_info.value)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"subscribe": "a", "assign": '{"a":[0]}'}, "exactly one of 'subscribe'"),
        ({"subscribe": "a", "kafka.auto.offset.reset": "earliest"}, "startingOffsets"),
        ({"subscribe": "a", "startingOffsets": '{"a": {"0": }'}, "JSON is malformed"),
        ({"subscribe": "a", "maxOffsetsPerTrigger": "-5"}, "maxOffsetsPerTrigger"),
        ({"subscribe": "a", "startingOffset": "earliest"}, "Did you mean 'startingOffsets'"),
    ],
    ids=["two-strategies", "owned-kafka-key", "malformed-json", "negative-limit", "typo"],
)
def test_bad_options_fail_at_load_with_the_option_named_and_no_secret(
    spark, kafka_bootstrap, options, expected
):
    reader = (
        spark.read.format("kafka_direct")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("kafka.sasl.password", SECRET)
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    with pytest.raises(PySparkException) as exc_info:
        reader.load()  # before any query runs
    assert expected in _message(exc_info)
    assert SECRET not in _message(exc_info)


def test_ending_offsets_on_a_stream_are_refused_before_data_is_read(
    spark, kafka_bootstrap, tmp_path
):
    df = (
        spark.readStream.format("kafka_direct")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("subscribe", "whatever")
        .option("endingOffsets", "latest")
        .load()
    )
    query = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path)).start()
    with pytest.raises(PySparkException) as exc_info:
        query.awaitTermination(60)
    assert "no ending offset in a streaming query" in _message(exc_info)


def test_unknown_topic_in_assign_is_a_clear_error(spark, kafka_bootstrap):
    df = (
        spark.read.format("kafka_direct")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("assign", json.dumps({"no-such-topic-xyz": [0]}))
        .load()
    )
    with pytest.raises(PySparkException) as exc_info:
        df.collect()
    message = _message(exc_info)
    assert "no-such-topic-xyz-0" in message and "assign" in message


def test_a_stalled_broker_ends_an_executor_read_with_fetch_timeout():
    """The broker is paused (SIGSTOP) mid-read: the read fails with the option to raise."""
    with EmbeddedBroker() as broker:
        topic = f"stall-{uuid.uuid4().hex[:6]}"
        create_topic(broker.bootstrap_servers, topic)
        produce_known(broker.bootstrap_servers, topic, per_partition=10)
        opts = parse_source_options(
            {
                "kafka.bootstrap.servers": broker.bootstrap_servers,
                "subscribe": topic,
                "kafkaConsumer.pollTimeoutMs": "1500",
                "consumerCache.enabled": "false",
            },
            streaming=False,
        )
        settings = opts.executor_settings()
        # The first 10 records exist; offsets 10..20 never will while the broker is paused.
        batches = read_range(settings, OffsetRange(topic, 0, 0, 20))
        broker.pause()
        try:
            with pytest.raises(FetchTimeoutError) as exc_info:
                list(batches)
        finally:
            broker.resume()
        assert "kafkaConsumer.pollTimeoutMs" in str(exc_info.value)
        assert f"{topic}-0" in str(exc_info.value)


# --- failing fast where waiting cannot help (issue "Faults") --------------------------------------


@pytest.mark.parametrize(
    ("address", "cause"),
    [
        ("127.0.0.1:1", "nothing accepts connections there"),
        ("no-such-host.invalid:9092", "check the host names in 'kafka.bootstrap.servers'"),
        # A server that accepts and answers nothing to a Kafka request (a stand-in for Redis,
        # which the machines no longer run): connected, then silence.
        (SILENT, "did not answer as a Kafka broker"),
    ],
    ids=["refused", "unresolvable", "not-kafka"],
)
def test_regression_wrong_bootstrap_servers_fail_load_in_seconds_with_the_cause(
    spark, address, cause
):
    """A wrong address made a batch read hang 122 s and print 2,289 librdkafka FAIL lines
    (those go through logging now: see the next test)."""
    if address == SILENT:
        with _silent_server() as silent:
            _check_fails_fast(spark, silent, cause)
    else:
        _check_fails_fast(spark, address, cause)


@contextlib.contextmanager
def _silent_server() -> Iterator[str]:
    """127.0.0.1:PORT where connections are accepted, kept open, and never answered."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        server.close()


def _check_fails_fast(spark, address, cause):
    import time

    began = time.monotonic()
    with pytest.raises(PySparkException) as exc_info:
        spark.read.format("kafka_direct").option("kafka.bootstrap.servers", address).option(
            "subscribe", "t"
        ).load()
    waited = time.monotonic() - began
    message = _message(exc_info)
    assert f"Could not reach the Kafka cluster at 'kafka.bootstrap.servers'='{address}'" in message
    assert cause in message
    assert waited < 60, f"took {waited:.0f} s"  # a bound against hanging, not a timing test


def test_librdkafka_log_lines_go_through_logging_not_stderr(capfd, caplog):
    """In this process, where file descriptor 2 is captured: librdkafka writes its own lines to
    stderr unless a client has a 'logger'."""
    import logging

    from kafka_direct.errors import KafkaClientError
    from kafka_direct.kafka.offset_reader import AdminOffsetReader

    reader = AdminOffsetReader({"bootstrap.servers": "127.0.0.1:1"}, connect_timeout_s=2)
    # Both loggers: the CLI's main(), run in this process by other tests, sets the level of
    # kafka_direct.librdkafka itself.
    with (
        caplog.at_level(logging.DEBUG, logger="kafka_direct"),
        caplog.at_level(logging.DEBUG, logger="kafka_direct.librdkafka"),
    ):
        with pytest.raises(KafkaClientError, match="nothing accepts connections there"):
            reader.connect()
        reader.close()
    err = capfd.readouterr().err
    assert "FAIL" not in err and "Connection refused" not in err, err
    routed = [r for r in caplog.records if r.name == "kafka_direct.librdkafka"]
    assert any("Connection refused" in r.getMessage() for r in routed)
    # The same failure, reported once by the client's error_cb with what to check.
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert sum("Connection refused" in r.getMessage() for r in warned) == 1


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("kafka.security.protocol", "SASL_PLAINTXT", 'Invalid value "SASL_PLAINTXT"'),
        ("kafka.fetch.max.bites", "1000", 'No such configuration property: "fetch.max.bites"'),
    ],
    ids=["bad-value", "bad-name"],
)
def test_regression_librdkafka_typos_fail_at_load_naming_the_kafka_option(
    spark, kafka_bootstrap, key, value, expected
):
    """A typo in a librdkafka setting used to surface at the first action, as a broker that
    could not be reached, after the retries."""
    reader = (
        spark.read.format("kafka_direct")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("subscribe", "t")
        .option(key, value)
    )
    with pytest.raises(PySparkException) as exc_info:
        reader.load()
    message = _message(exc_info)
    assert f"Invalid option '{key}'" in message
    assert expected in message


def test_regression_stream_only_mistake_is_one_clear_error_without_unbound_local(
    spark, kafka_bootstrap, tmp_path
):
    """endingOffsets on a stream surfaced under PySpark's own follow-on UnboundLocalError."""
    df = (
        spark.readStream.format("kafka_direct")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("subscribe", "whatever")
        .option("endingOffsets", "latest")
        .load()
    )
    query = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path)).start()
    with pytest.raises(PySparkException) as exc_info:
        query.awaitTermination(60)
    message = _message(exc_info)
    assert "Invalid option 'endingOffsets'" in message
    assert "UnboundLocalError" not in message
