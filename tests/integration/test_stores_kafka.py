"""KafkaGroupStore and starting_offsets_json against the real broker."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from kafka_direct.errors import ConfigurationError, TopicNotFoundError
from kafka_direct.kafka.groups import fetch_group_offsets
from kafka_direct.offsets import OffsetRange, TopicPartition
from kafka_direct.stores import KafkaGroupStore, SqlOffsetStore, starting_offsets_json
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
