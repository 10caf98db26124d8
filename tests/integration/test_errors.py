"""Bad input and broken brokers through the public API: clear errors, no secrets."""

from __future__ import annotations

import json
import uuid

import pytest
from pyspark.errors import PySparkException

from kafka_direct.broker import EmbeddedBroker, create_topic
from kafka_direct.errors import FetchTimeoutError
from kafka_direct.executor import ExecutorSettings, read_range
from kafka_direct.offsets import OffsetRange
from kafka_direct.options import parse_source_options
from tests.integration.kafka_helpers import produce_known

SECRET = "s3cr3t-Pa55word"


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
        settings = ExecutorSettings.from_options(opts)
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
