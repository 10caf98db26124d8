"""Unit tests for kafka_direct.config.sink: the sink's options and its producers' config.
Table-style, no broker, no Spark.

The refusal table is the contract "every refused option has a test of its message": each row
names the option the message must name, and a phrase that says why or what to do. Rows marked
"Spark:" mirror a check of Spark's KafkaSourceProvider.validateSinkOptions.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from kafka_direct.config.clients import (
    DEFAULT_DELIVERY_TIMEOUT_MS,
    DEFAULT_TRANSACTION_TIMEOUT_MS,
    connection_config,
    producer_config,
)
from kafka_direct.config.kafka import REDACTED
from kafka_direct.config.sink import (
    SINK_OPTION_DEFAULTS,
    SINK_OWNED_KAFKA_KEYS,
    parse_sink_options,
)
from kafka_direct.errors import ConfigurationError, UnsupportedKafkaOptionError

BOOTSTRAP = {"kafka.bootstrap.servers": "b1:9092,b2:9092"}
BASE = {**BOOTSTRAP, "topic": "out"}
EOS_ONLY = {"deliveryGuarantee": "exactly-once"}
EOS = {**BASE, **EOS_ONLY}


def test_defaults() -> None:
    opts = parse_sink_options(BASE)
    assert opts.topic == "out"
    assert opts.bootstrap_servers == "b1:9092,b2:9092"
    assert opts.delivery_timeout_ms == DEFAULT_DELIVERY_TIMEOUT_MS == 120_000
    assert opts.cache_timeout_ms == 600_000
    assert opts.cache_capacity == 8
    assert opts.fast_path is True
    assert dict(opts.producer) == {
        "bootstrap.servers": "b1:9092,b2:9092",
        "enable.idempotence": "true",
        "acks": "all",
        "partitioner": "murmur2_random",
        "linger.ms": "50",
        "delivery.timeout.ms": "120000",
        "queue.buffering.max.kbytes": "65536",
        "message.max.bytes": "1048576",
        "queue.buffering.max.messages": "100000",
        "client.id": "kafka-direct-producer",
        "reconnect.backoff.ms": "20",
    }
    assert set(SINK_OPTION_DEFAULTS) == {
        "topic",
        "producerCache.timeoutMs",
        "producerCache.capacity",
        "fastPath.enabled",
        "deliveryGuarantee",
        "transactionalIdPrefix",
        "transactionalWriteId",
        "transactionMarkerTopic",
        "transactionReplayCheck",
        "oauthProvider",
    }
    assert (opts.exactly_once, opts.transactional_id_prefix, opts.marker_topic) == (False, "", None)


def test_exactly_once_options() -> None:
    opts = parse_sink_options({**EOS, "transactionalIdPrefix": "q1"})
    assert (opts.exactly_once, opts.transactional_id_prefix, opts.marker_topic) == (
        True,
        "q1",
        "out",
    )
    assert opts.producer["transaction.timeout.ms"] == str(DEFAULT_TRANSACTION_TIMEOUT_MS)
    assert opts.replay_check_rows and opts.transactional_write_id == ""
    assert parse_sink_options({**EOS, "transactionalWriteId": "d-1"}).transactional_write_id == (
        "d-1"
    )
    assert not parse_sink_options({**EOS, "transactionReplayCheck": "count"}).replay_check_rows
    assert "transaction.timeout.ms" not in producer_config({"bootstrap.servers": "b:1"})
    # The case PySpark passes options in, and a marker topic when rows carry their topic.
    lower = parse_sink_options(
        {**BOOTSTRAP, "deliveryguarantee": "Exactly-Once", "transactionmarkertopic": "m"}
    )
    assert (lower.exactly_once, lower.topic, lower.marker_topic) == (True, None, "m")
    longer = parse_sink_options(
        {**EOS, "kafka.transaction.timeout.ms": "900000", "kafka.delivery.timeout.ms": "900000"}
    )
    assert longer.producer["transaction.timeout.ms"] == "900000"
    assert longer.delivery_timeout_ms == 900_000


# exactly-once options besides EOS, the producers' delivery.timeout.ms, the flush's bound (ms).
# Review: Java's default transaction timeout (60000) was refused, as the sink's default delivery
# timeout (120000) counted as the user's to librdkafka; unset, it follows a shorter transaction
# timeout, as librdkafka's own default does.
DELIVERY_TIMEOUTS = [
    ({}, "120000", 120_000),
    ({"kafka.transaction.timeout.ms": "60000"}, "60000", 60_000),
    ({"kafka.transaction.timeout.ms": "1000"}, "1000", 1_000),
    ({"kafka.transaction.timeout.ms": "900000"}, "120000", 120_000),
    (
        {"kafka.transaction.timeout.ms": "60000", "kafka.delivery.timeout.ms": "30000"},
        "30000",
        30_000,
    ),
    (
        {"kafka.transaction.timeout.ms": "60000", "kafka.delivery.timeout.ms": "60000"},
        "60000",
        60_000,
    ),
    ({"kafka.transaction.timeout.ms": "60000", "kafka.message.timeout.ms": "5000"}, None, 5_000),
]


@pytest.mark.parametrize(("options", "producer", "bound"), DELIVERY_TIMEOUTS)
def test_the_default_delivery_timeout_fits_the_transaction_timeout(
    options: dict[str, str], producer: str | None, bound: int
) -> None:
    opts = parse_sink_options({**EOS, **options})
    assert opts.producer.get("delivery.timeout.ms") == producer
    assert opts.delivery_timeout_ms == bound
    # At-least-once has no transaction: Java's default delivery timeout, whatever else is set.
    assert parse_sink_options(BASE).producer["delivery.timeout.ms"] == "120000"


def test_no_topic_option_means_the_column_decides() -> None:
    assert parse_sink_options(BOOTSTRAP).topic is None


def test_option_names_are_case_insensitive_and_topic_is_trimmed() -> None:
    opts = parse_sink_options(
        {"KAFKA.BOOTSTRAP.SERVERS": "b:1", "Topic": " out ", "FASTPATH.ENABLED": "False"}
    )
    assert (opts.topic, opts.fast_path, opts.bootstrap_servers) == ("out", False, "b:1")


@pytest.mark.parametrize(
    ("user", "kept"),
    [
        ({"partitioner": "consistent_random"}, {"partitioner": "consistent_random"}),
        (
            {"enable.idempotence": "false", "acks": "1"},
            {"enable.idempotence": "false", "acks": "1"},
        ),
        ({"linger.ms": "100"}, {"linger.ms": "100"}),
        # librdkafka aliases: the other name must not be added beside the user's.
        ({"queue.buffering.max.ms": "50"}, {"queue.buffering.max.ms": "50"}),
        ({"request.required.acks": "-1"}, {"request.required.acks": "-1"}),
        ({"message.timeout.ms": "9000"}, {"message.timeout.ms": "9000"}),
        ({"client.id": "mine"}, {"client.id": "mine"}),
    ],
)
def test_the_user_choice_wins_over_each_default(user: dict[str, str], kept: dict[str, str]) -> None:
    config = producer_config({"bootstrap.servers": "b:1", **user})
    for key, value in kept.items():
        assert config[key] == value
    aliases = [
        ("linger.ms", "queue.buffering.max.ms"),
        ("acks", "request.required.acks"),
        ("delivery.timeout.ms", "message.timeout.ms"),
    ]
    for a, b in aliases:
        assert not (a in config and b in config), (a, b)


# user's kafka.* settings, what the producers get, the setting named in the warning
IDEMPOTENCE_GIVES_WAY = [
    ({"kafka.acks": "1"}, {"acks": "1", "enable.idempotence": "false"}, "kafka.acks is 1"),
    (
        {"kafka.request.required.acks": "1"},
        {"request.required.acks": "1", "enable.idempotence": "false"},
        "kafka.request.required.acks is 1",
    ),
    ({"kafka.retries": "0"}, {"retries": "0", "enable.idempotence": "false"}, "retries is 0"),
    (
        {"kafka.max.in.flight.requests.per.connection": "10"},
        {"enable.idempotence": "false"},
        "max.in.flight.requests.per.connection is 10, more than 5",
    ),
    ({"kafka.acks": "all", "kafka.retries": "3"}, {"enable.idempotence": "true"}, None),
    ({"kafka.max.in.flight": "5"}, {"enable.idempotence": "true"}, None),
]


@pytest.mark.parametrize(("user", "expected", "warned"), IDEMPOTENCE_GIVES_WAY)
def test_idempotence_is_a_default_that_gives_way_as_in_javas_producer(
    user: dict[str, str],
    expected: dict[str, str],
    warned: str | None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Java's producer (Kafka 3.0+) turns its default idempotence off when the user's acks,
    # retries or max.in.flight cannot work with it; only an explicit choice conflicts.
    with caplog.at_level("WARNING", logger="kafka_direct.config.sink"):
        producer = parse_sink_options({**BASE, **user}).producer
    assert {k: producer[k] for k in expected} == expected
    if warned is None:
        assert not caplog.records
    else:
        assert [r.getMessage() for r in caplog.records if warned in r.getMessage()]


# user's kafka.* settings, the producers' message.max.bytes and queue bound in KB
QUEUE_HOLDS_A_RECORD = [
    ({}, "1048576", "65536"),
    ({"kafka.message.max.bytes": "100000000"}, "100000000", "97657"),
    ({"kafka.max.request.size": "100000000"}, "100000000", "97657"),
    ({"kafka.message.max.bytes": "2000000"}, "2000000", "65536"),
    ({"kafka.buffer.memory": "134217728"}, "1048576", "131072"),
    # A queue the user chose below a default record: records above it fail at once, as Java's
    # fail above buffer.memory, and the job runs.
    ({"kafka.queue.buffering.max.kbytes": "512"}, "524288", "512"),
    ({"kafka.buffer.memory": "524288"}, "524288", "512"),
    ({"kafka.buffer.memory": "1000"}, "1024", "1"),
]


@pytest.mark.parametrize(("user", "largest", "queue_kb"), QUEUE_HOLDS_A_RECORD)
def test_the_queue_always_holds_the_largest_record_the_producer_lets_through(
    user: dict[str, str], largest: str, queue_kb: str
) -> None:
    # librdkafka answers "queue full" for a record larger than the whole queue, however empty:
    # without this the task would wait for room forever.
    producer = parse_sink_options({**BASE, **user}).producer
    assert (producer["message.max.bytes"], producer["queue.buffering.max.kbytes"]) == (
        largest,
        queue_kb,
    )


def test_delivery_timeout_follows_either_alias() -> None:
    assert (
        parse_sink_options({**BASE, "kafka.message.timeout.ms": "9000"}).delivery_timeout_ms == 9000
    )
    assert (
        parse_sink_options({**BASE, "kafka.delivery.timeout.ms": "3000"}).delivery_timeout_ms
        == 3000
    )


# option the message names, raw options, phrase the message must contain
REFUSALS = [
    ("kafka.bootstrap.servers", {"topic": "t"}, "Set .option('kafka.bootstrap.servers'"),
    ("kafka.bootstrap.servers", {"kafka.bootstrap.servers": " ", "topic": "t"}, "host:port"),
    ("topic", {**BOOTSTRAP, "topic": "  "}, "Remove the option to take each row's topic"),
    ("topics", {**BOOTSTRAP, "topics": "t"}, "Did you mean 'topic'?"),
    ("fastPath.enable", {**BASE, "fastPath.enable": "false"}, "Did you mean 'fastPath.enabled'?"),
    ("producerCache.timeoutMs", {**BASE, "producerCache.timeoutMs": "soon"}, "an integer >= 1"),
    ("producerCache.capacity", {**BASE, "producerCache.capacity": "0"}, "an integer >= 1"),
    ("fastPath.enabled", {**BASE, "fastPath.enabled": "yes"}, "'true' or 'false'"),
    ("kafka.acks", {**BASE, "kafka.acks": "0"}, "never acknowledges a record"),
    ("kafka.request.required.acks", {**BASE, "kafka.request.required.acks": "0"}, "at-least-once"),
    (
        "kafka.acks",
        {**BASE, "kafka.acks": "1", "kafka.enable.idempotence": "true"},
        "set 'kafka.enable.idempotence' to 'false' or remove it",
    ),
    (
        "kafka.queue.buffering.max.kbytes",
        {**BASE, "kafka.message.max.bytes": "100000000", "kafka.queue.buffering.max.kbytes": "64"},
        "at least 97657",
    ),
    ("kafka.delivery.timeout.ms", {**BASE, "kafka.delivery.timeout.ms": "0"}, "wait forever"),
    ("kafka.message.timeout.ms", {**BASE, "kafka.message.timeout.ms": "2m"}, "milliseconds"),
    ("deliveryGuarantee", {**BASE, "deliveryGuarantee": "exactly_once"}, "'exactly-once'"),
    ("deliveryGuarantee", {**BASE, "deliveryGuarantee": "at-most-once"}, "'at-least-once'"),
    ("deliveryGuarante", {**BASE, "deliveryGuarante": "exactly-once"}, "Did you mean"),
    ("transactionalIdPrefix", {**BASE, "transactionalIdPrefix": "q1"}, "only used with"),
    ("transactionalWriteId", {**BASE, "transactionalWriteId": "w1"}, "'exactly-once') too"),
    ("transactionalWriteId", {**EOS, "transactionalWriteId": "a b"}, "A-Z a-z 0-9 . _ -"),
    ("transactionReplayCheck", {**EOS, "transactionReplayCheck": "none"}, "'rows' (the default)"),
    ("transactionReplayCheck", {**BASE, "transactionReplayCheck": "count"}, "'exactly-once') too"),
    ("kafka.enable.idempotence", {**EOS, "kafka.enable.idempotence": "false"}, "idempotent"),
    ("kafka.acks", {**EOS, "kafka.acks": "1"}, "every in-sync replica"),
    ("kafka.request.required.acks", {**EOS, "kafka.request.required.acks": "0"}, "in-sync"),
    ("transactionMarkerTopic", {**BOOTSTRAP, **EOS_ONLY}, "Set .option('topic', ...)"),
    ("kafka.transaction.timeout.ms", {**EOS, "kafka.transaction.timeout.ms": "5"}, ">= 1000"),
    ("kafka.delivery.timeout.ms", {**EOS, "kafka.delivery.timeout.ms": "400000"}, "(300000)"),
    (
        "kafka.delivery.timeout.ms",
        {**EOS, "kafka.transaction.timeout.ms": "60000", "kafka.delivery.timeout.ms": "120000"},
        "kafka.delivery.timeout.ms (120000) <= kafka.transaction.timeout.ms (60000)",
    ),
    (
        "kafka.message.timeout.ms",
        {**EOS, "kafka.transaction.timeout.ms": "60000", "kafka.message.timeout.ms": "60001"},
        "or remove it: it then defaults to the smaller of 120000 and the transaction timeout",
    ),
]


@pytest.mark.parametrize(("option", "raw", "phrase"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_refusal_names_the_option_and_what_to_do(
    option: str, raw: dict[str, str], phrase: str
) -> None:
    with pytest.raises(ConfigurationError) as info:
        parse_sink_options(raw)
    assert info.value.option.lower() == option.lower()
    assert f"'{option}'" in str(info.value) or f"'{option.lower()}'" in str(info.value)
    assert phrase in str(info.value)


# Spark: "Kafka option 'key.serializer' is not supported as keys are serialized with
# ByteArraySerializer." and the same for values.
OWNED = [
    ("key.serializer", "'key' column the type string or binary"),
    ("value.serializer", "'value' column the type string or binary"),
    ("transactional.id", "set .option('deliveryGuarantee', 'exactly-once')"),
    ("delivery.report.only.error", "owns delivery reports"),
    ("on_delivery", "owns delivery reports"),
    ("dr_msg_cb", "owns delivery reports"),
    ("error_cb", "Python logging"),
    ("logger", "kafka_direct.librdkafka"),
    ("interceptor.classes", "Java interceptors"),
]


@pytest.mark.parametrize(("key", "phrase"), OWNED, ids=[k for k, _ in OWNED])
def test_keys_the_sink_owns_are_refused_with_the_reason(key: str, phrase: str) -> None:
    with pytest.raises(UnsupportedKafkaOptionError) as info:
        parse_sink_options({**BASE, f"kafka.{key}": "x"})
    message = str(info.value)
    assert info.value.option == f"kafka.{key}"
    assert f"'kafka.{key}'" in message
    assert "because the sink manages it" in message
    assert phrase in message
    assert key in SINK_OWNED_KAFKA_KEYS


def test_other_options_are_ignored_as_spark_ignores_them() -> None:
    # writeStream passes its own options (checkpointLocation, path) to the sink.
    opts = parse_sink_options(
        {**BASE, "checkpointLocation": "/tmp/ck", "path": "x", "queryName": "q"}
    )
    assert opts.topic == "out"


def test_secrets_never_print() -> None:
    opts = parse_sink_options(
        {**BASE, "kafka.sasl.password": "hunter2", "kafka.sasl.username": "u"}
    )
    assert "hunter2" not in repr(opts)
    assert "hunter2" not in str(opts.producer)
    assert REDACTED in repr(opts)
    assert opts.producer.to_dict()["sasl.password"] == "hunter2"  # librdkafka still gets it


def test_a_refused_secret_is_redacted_in_the_message() -> None:
    with pytest.raises(ConfigurationError) as info:
        parse_sink_options(
            {**BASE, "kafka.ssl.key.password": "s3cret", "kafka.transactional.id": "tx"}
        )
    assert "s3cret" not in str(info.value)
    with pytest.raises(ConfigurationError) as info:
        parse_sink_options({**BASE, "kafka.ssl.key.password": "s3cret", "toppic": "x"})
    assert "s3cret" not in str(info.value)


def test_connection_config_leaves_out_producer_only_settings() -> None:
    user = {"bootstrap.servers": "b:1", "linger.ms": "5", "acks": "all", "sasl.username": "u"}
    assert connection_config(user) == {
        "bootstrap.servers": "b:1",
        "sasl.username": "u",
        "reconnect.backoff.ms": "20",
    }


def test_options_pickle() -> None:
    opts = parse_sink_options({**BASE, "kafka.sasl.password": "p"})
    assert pickle.loads(pickle.dumps(opts)) == opts


def test_a_writer_built_only_to_commit_reads_no_store(tmp_path: Path) -> None:
    # Spark starts a fresh Python process for every micro-batch's commit of a Python streaming
    # sink, and it builds no client: reading a JKS truststore there was a keytool JVM per
    # micro-batch. The store here does not exist, so any read would fail.
    from pyspark.sql.types import BinaryType, StructField, StructType

    from kafka_direct.config.reader import UNREAD_STORE
    from kafka_direct.source.sink import build_settings

    options = {
        "kafka.bootstrap.servers": "b:9092",
        "topic": "t",
        "kafka.security.protocol": "SSL",
        "kafka.ssl.truststore.location": str(tmp_path / "truststore.jks"),
        "kafka.ssl.truststore.password": "changeit",
    }
    schema = StructType([StructField("value", BinaryType())])
    settings = build_settings(options, schema, stream=True, ask_cluster=False)
    assert settings.producer_config["ssl.ca.pem"] in UNREAD_STORE
    with pytest.raises(ConfigurationError, match="readable where the query is defined"):
        build_settings(options, schema, stream=True, ask_cluster=True)
