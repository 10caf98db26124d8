"""Consumer-group commits from the streaming source, starting from committed offsets, lag."""

from __future__ import annotations

import time
import uuid

import pytest

from kafka_direct.kafka.groups import fetch_group_offsets
from kafka_direct.kafka.lag import group_lag
from kafka_direct.offsets import TopicPartition
from kafka_direct.source.listener import LagListener, LagReport
from tests.integration.kafka_helpers import produce_known
from tests.integration.streams import Collector, expected_keys, start, wait_for


def test_finished_batches_are_committed_to_the_group_and_a_new_query_resumes_there(
    make_topic, reader, kafka_bootstrap, tmp_path, spark
):
    topic = make_topic(partitions=2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    kafka = {"bootstrap.servers": kafka_bootstrap}
    first = produce_known(kafka_bootstrap, topic, per_partition=25, partitions=2)
    reports: list[LagReport] = []
    listener = LagListener(callback=reports.append)
    spark.streams.addListener(listener)
    try:
        sink = Collector()
        df = reader(
            stream=True, subscribe=topic, startingOffsets="earliest", commitOffsetsToGroup=group
        ).load()
        query = start(df, sink, str(tmp_path / "ck1"), availableNow=True)
        assert query.awaitTermination(120)
        assert sink.keys() == expected_keys(first)
        ends = {TopicPartition(topic, 0): 25, TopicPartition(topic, 1): 25}
        assert fetch_group_offsets(kafka, group) == ends
        rows = group_lag(kafka, group)
        assert [(r.partition, r.current_offset, r.log_end_offset, r.lag) for r in rows] == [
            (0, 25, 25, 0),
            (1, 25, 25, 0),
        ]
        deadline = time.monotonic() + 10  # listener events arrive asynchronously
        while not reports and time.monotonic() < deadline:
            time.sleep(0.2)
        assert reports and reports[-1].per_partition == {tp: 0 for tp in ends}
    finally:
        spark.streams.removeListener(listener)

    # A new query (fresh checkpoint) starts from what the group committed: no loss, no repeat.
    second = produce_known(kafka_bootstrap, topic, per_partition=10, partitions=2, start_index=25)
    sink2 = Collector()
    df2 = reader(
        stream=True, subscribe=topic, startingOffsets="committed", commitOffsetsToGroup=group
    ).load()
    query = start(df2, sink2, str(tmp_path / "ck2"), availableNow=True)
    assert query.awaitTermination(120)
    assert sink2.keys() == expected_keys(second)
    assert fetch_group_offsets(kafka, group) == {
        TopicPartition(topic, 0): 35,
        TopicPartition(topic, 1): 35,
    }


@pytest.mark.parametrize(
    "commits",
    [
        {"commitOffsetsToGroup": "GROUP", "commitOffsets": "false"},
        # As Spark's source: kafka.group.id names the executors' group, and is never committed to.
        {"kafka.group.id": "GROUP"},
    ],
    ids=["commitOffsets=false", "kafka.group.id alone"],
)
def test_commits_can_be_switched_off(make_topic, reader, kafka_bootstrap, tmp_path, commits):
    topic = make_topic()
    group = f"g-{uuid.uuid4().hex[:8]}"
    produce_known(kafka_bootstrap, topic, per_partition=5)
    df = reader(
        stream=True,
        subscribe=topic,
        startingOffsets="earliest",
        **{key: group if value == "GROUP" else value for key, value in commits.items()},
    ).load()
    sink = Collector()
    query = start(df, sink, str(tmp_path / "ck"), availableNow=True)
    assert query.awaitTermination(120)
    assert len(sink.rows) == 5
    assert fetch_group_offsets({"bootstrap.servers": kafka_bootstrap}, group) == {}


def test_commit_offsets_to_group_names_a_group_without_kafka_group_id(
    make_topic, reader, kafka_bootstrap, tmp_path
):
    topic = make_topic()
    group = f"mon-{uuid.uuid4().hex[:8]}"
    produce_known(kafka_bootstrap, topic, per_partition=7)
    df = reader(
        stream=True, subscribe=topic, startingOffsets="earliest", commitOffsetsToGroup=group
    ).load()
    query = start(df, Collector(), str(tmp_path / "ck"), availableNow=True)
    assert query.awaitTermination(120)
    assert fetch_group_offsets({"bootstrap.servers": kafka_bootstrap}, group) == {
        TopicPartition(topic, 0): 7
    }


def test_a_stream_with_a_pending_commit_lag_shows_it(make_topic, reader, kafka_bootstrap, tmp_path):
    topic = make_topic()
    group = f"g-{uuid.uuid4().hex[:8]}"
    produce_known(kafka_bootstrap, topic, per_partition=6)
    df = reader(
        stream=True, subscribe=topic, startingOffsets="earliest", commitOffsetsToGroup=group
    ).load()
    sink = Collector()
    query = start(df, sink, str(tmp_path / "ck"))
    wait_for(lambda: len(sink.rows) >= 6, query, what="the first records")
    wait_for(
        lambda: (
            fetch_group_offsets({"bootstrap.servers": kafka_bootstrap}, group)
            == {TopicPartition(topic, 0): 6}
        ),
        query,
        what="the commit of the first batch",
    )
    query.stop()
    produce_known(kafka_bootstrap, topic, per_partition=4, start_index=6)
    rows = group_lag({"bootstrap.servers": kafka_bootstrap}, group)
    assert [(r.current_offset, r.log_end_offset, r.lag) for r in rows] == [(6, 10, 4)]
