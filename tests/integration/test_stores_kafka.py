"""KafkaGroupStore and starting_offsets_json against the real broker."""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from kafka_direct.errors import ConfigurationError, OffsetConflictError, TopicNotFoundError
from kafka_direct.kafka.groups import fetch_group_offsets
from kafka_direct.offsets import OffsetRange, TopicPartition
from kafka_direct.stores import KafkaGroupStore, SqlOffsetStore, starting_offsets_json
from kafka_direct.testing.topics import delete_topic
from tests.integration.kafka_helpers import produce_known


def _group() -> str:
    return f"g-{uuid.uuid4().hex[:8]}"


def test_kafka_group_store_round_trip(kafka_bootstrap: str, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=2)
    produce_known(kafka_bootstrap, topic, per_partition=20, partitions=2)
    group = _group()
    store = KafkaGroupStore({"bootstrap.servers": kafka_bootstrap})
    assert store.load(group) == {}
    store.save(
        group,
        [
            OffsetRange(topic, 0, 0, 5),
            OffsetRange(topic, 0, 5, 12),  # the highest until per partition is committed
            OffsetRange(topic, 1, 0, 20),
        ],
    )
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    assert store.load(group) == {tp0: 12, tp1: 20}
    assert store.load(group, [tp1]) == {tp1: 20}
    assert store.load(group, []) == {}
    # It is the consumer group itself: Kafka's tools (and group_offsets) see the same commit.
    assert fetch_group_offsets({"bootstrap.servers": kafka_bootstrap}, group) == {tp0: 12, tp1: 20}
    store.close()


def test_kafka_group_store_accepts_source_style_keys_and_hides_secrets(
    kafka_bootstrap: str,
) -> None:
    store = KafkaGroupStore(
        {"kafka.bootstrap.servers": kafka_bootstrap, "kafka.sasl.password": "hunter2"}
    )
    assert store.kafka_config["bootstrap.servers"] == kafka_bootstrap
    assert "hunter2" not in repr(store)
    with pytest.raises(ConfigurationError, match=r"bootstrap\.servers"):
        KafkaGroupStore({"security.protocol": "SSL"})


def test_starting_offsets_json_from_a_group(
    kafka_bootstrap: str, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(partitions=3)
    produce_known(kafka_bootstrap, topic, per_partition=10, partitions=3)
    group = _group()
    store = KafkaGroupStore({"bootstrap.servers": kafka_bootstrap})
    store.save(group, [OffsetRange(topic, 1, 0, 7)])

    # Every partition is named; unstored ones fall back. The store's own config finds them.
    assert json.loads(starting_offsets_json(store, group, [topic])) == {
        topic: {"0": -2, "1": 7, "2": -2}
    }
    assert json.loads(starting_offsets_json(store, group, [topic], "latest")) == {
        topic: {"0": -1, "1": 7, "2": -1}
    }
    with pytest.raises(ConfigurationError, match=f"none for {topic}-0, {topic}-2"):
        starting_offsets_json(store, group, [topic], "error")
    with pytest.raises(TopicNotFoundError, match="no-such-topic"):
        starting_offsets_json(store, group, [topic, "no-such-topic"])


def test_starting_offsets_json_from_a_sql_store_lists_partitions_through_kafka(
    kafka_bootstrap: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = make_topic(partitions=2)
    store = SqlOffsetStore.sqlite(tmp_path / "o.db")
    store.save("g", [OffsetRange(topic, 0, 0, 3)])
    with pytest.raises(ConfigurationError, match="kafka_config"):
        starting_offsets_json(store, "g", [topic])
    text = starting_offsets_json(
        store, "g", [topic], kafka_config={"kafka.bootstrap.servers": kafka_bootstrap}
    )
    assert json.loads(text) == {topic: {"0": 3, "1": -2}}
    # Given partitions need no Kafka at all.
    assert json.loads(starting_offsets_json(store, "g", [TopicPartition(topic, 0)])) == {
        topic: {"0": 3}
    }
    store.close()


def test_commits_are_compare_and_set_and_a_deleted_topic_is_left_out(
    kafka_bootstrap: str, make_topic: Callable[..., str], caplog: pytest.LogCaptureFixture
) -> None:
    # Regression (review): two copies of a stream commit through the admin client, which
    # Kafka accepts for a group without members: the offsets went back and forth. And a
    # deleted topic's partition failed every later commit.
    topic, doomed = make_topic(), make_topic()
    group = _group()
    tp, gone = TopicPartition(topic, 0), TopicPartition(doomed, 0)
    first = KafkaGroupStore({"bootstrap.servers": kafka_bootstrap})
    second = KafkaGroupStore({"bootstrap.servers": kafka_bootstrap})
    assert first.load(group, [tp, gone]) == second.load(group, [tp, gone]) == {}
    first.save(group, [OffsetRange(topic, 0, 0, 5), OffsetRange(doomed, 0, 0, 2)])
    with pytest.raises(OffsetConflictError, match=rf"{topic}-0 is at 5 \(committed by kafka-"):
        second.save(group, [OffsetRange(topic, 0, 0, 7)])
    # A copy that starts where the first stands commits the same offsets: the writer's name in
    # the commit's metadata (kept by Kafka) still tells them apart.
    third = KafkaGroupStore({"bootstrap.servers": kafka_bootstrap})
    assert third.load(group, [tp]) == {tp: 5}
    third.save(group, [OffsetRange(topic, 0, 5, 5)])
    with pytest.raises(OffsetConflictError, match=f"committed by {third.writer}"):
        first.save(group, [OffsetRange(topic, 0, 5, 5)])
    first.load(group, [tp, gone])  # as a restarted stream would
    delete_topic(kafka_bootstrap, doomed)
    # The broker refuses the deleted topic's partition alone and commits the rest.
    with caplog.at_level(logging.WARNING):
        first.save(group, [OffsetRange(topic, 0, 5, 9), OffsetRange(doomed, 0, 2, 4)])
    assert fetch_group_offsets({"bootstrap.servers": kafka_bootstrap}, group, [tp]) == {tp: 9}
    assert f"no longer has {doomed}-0" in caplog.text


def test_a_stream_refuses_a_group_with_an_active_member(
    kafka_bootstrap: str, make_topic: Callable[..., str]
) -> None:
    topic, group = make_topic(), _group()
    store = KafkaGroupStore({"bootstrap.servers": kafka_bootstrap})
    store.attach_stream(group, fail_on_data_loss=True)  # no members: fine
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": group,
            "client.id": "the-other-app",
            "session.timeout.ms": 6000,
        }
    )
    assigned = threading.Event()
    consumer.subscribe([topic], on_assign=lambda *_: assigned.set())
    try:
        deadline = time.monotonic() + 60
        while not assigned.is_set() and time.monotonic() < deadline:
            consumer.poll(0.2)
        assert assigned.is_set(), "the consumer never joined its group"
        with pytest.raises(ConfigurationError, match=r"it has 1: the-other-app on ") as info:
            store.attach_stream(group, fail_on_data_loss=True)
        assert info.value.option == "group.id"
    finally:
        consumer.close()
